//! The in-process ceiling of a model the server batches: the server crate's own model
//! (any [`BatchModel`]: the embedding model, the cross-encoder) called directly, batch
//! after batch, with no gRPC, no batcher and no client. What a server run is compared
//! with.
//!
//! Inputs are tokenized by the caller beforehand and taken in rotation, so each batch
//! holds different inputs and successive batches differ too; tokenizing is left out,
//! which makes this an upper bound (a bench can time tokenizing apart).
//!
//! A bench on a noisy machine can measure in rounds: [`InProcess`] keeps the model
//! between passes, so passes can alternate with the server's runs (the two never run
//! at once), and [`Ceiling::combine`] pools the passes, so both sides sample the same
//! stretch of the machine's moods.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use embedwire_server::batcher::BatchModel;

use crate::latency::LatencySummary;

/// One batch size, run for a while.
#[derive(Debug, Clone)]
pub struct BatchSizeRun {
    pub batch_size: usize,
    /// Inputs run in the measured time.
    pub inputs: usize,
    /// Measured time, model calls only.
    pub elapsed: Duration,
    /// Time of one batch.
    pub batch_latency: LatencySummary,
    /// The times summarized in `batch_latency`, kept so runs can be combined.
    pub samples: Vec<Duration>,
}

impl BatchSizeRun {
    fn from_samples(batch_size: usize, samples: Vec<Duration>) -> Self {
        BatchSizeRun {
            batch_size,
            inputs: samples.len() * batch_size,
            elapsed: samples.iter().sum(),
            batch_latency: LatencySummary::from_samples(samples.clone()),
            samples,
        }
    }

    /// Inputs per second.
    pub fn rate(&self) -> f64 {
        self.inputs as f64 / self.elapsed.as_secs_f64()
    }
}

/// Every batch size measured, in the order measured.
#[derive(Debug, Clone)]
pub struct Ceiling {
    pub runs: Vec<BatchSizeRun>,
}

impl Ceiling {
    /// The batch size with the most inputs per second.
    pub fn best(&self) -> &BatchSizeRun {
        self.runs.iter().max_by(|a, b| a.rate().total_cmp(&b.rate())).expect("at least one batch size")
    }

    /// The run of `batch_size`, if measured.
    pub fn of(&self, batch_size: usize) -> Option<&BatchSizeRun> {
        self.runs.iter().find(|run| run.batch_size == batch_size)
    }

    /// Passes over the same batch sizes as one: each size's batches pooled.
    pub fn combine(passes: &[Ceiling]) -> Ceiling {
        let mut pooled: Vec<BatchSizeRun> = Vec::new();
        for run in passes.iter().flat_map(|pass| &pass.runs) {
            match pooled.iter_mut().find(|known| known.batch_size == run.batch_size) {
                Some(known) => known.samples.extend(&run.samples),
                None => pooled.push(run.clone()),
            }
        }
        Ceiling {
            runs: pooled.into_iter().map(|run| BatchSizeRun::from_samples(run.batch_size, run.samples)).collect(),
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct CeilingPlan {
    pub batch_sizes: Vec<usize>,
    /// Measured time per batch size (in all, when measured in rounds).
    pub time_per_size: Duration,
    /// Unmeasured run before the first size, so allocation and thread start-up stay
    /// out of the figures.
    pub warmup: Duration,
}

/// Fewest batches of a one-pass run, so that even a short run of large batches says
/// something.
pub const MIN_BATCHES: usize = 3;
/// Batch size of the warm-up.
const WARMUP_BATCH: usize = 8;

/// A model and its inputs, ready for runs of any batch size.
pub struct InProcess<'a, M: BatchModel> {
    model: &'a mut M,
    inputs: &'a [M::Input],
    /// The next input to hand out.
    next: usize,
    /// Batch sizes run before: a size's first batch runs unmeasured.
    seen: HashSet<usize>,
}

impl<'a, M: BatchModel> InProcess<'a, M> {
    pub fn new(model: &'a mut M, inputs: &'a [M::Input]) -> anyhow::Result<Self> {
        anyhow::ensure!(!inputs.is_empty(), "no inputs");
        Ok(InProcess { model, inputs, next: 0, seen: HashSet::new() })
    }

    /// Runs batches for `time` (at least one), unmeasured.
    pub fn warm_up(&mut self, time: Duration) -> anyhow::Result<()> {
        self.run(WARMUP_BATCH, time, 0).map(|_| ())
    }

    /// Runs batches of `batch_size` for at least `time` and `min_batches` batches. The
    /// first time a size runs, one batch of it goes first, unmeasured: ONNX Runtime
    /// sizes buffers per shape.
    pub fn run(&mut self, batch_size: usize, time: Duration, min_batches: usize) -> anyhow::Result<BatchSizeRun> {
        anyhow::ensure!(batch_size > 0, "batch size 0");
        if self.seen.insert(batch_size) {
            self.time_one(batch_size)?;
        }
        let mut samples = Vec::new();
        let mut elapsed = Duration::ZERO;
        while elapsed < time || samples.len() < min_batches {
            let took = self.time_one(batch_size)?;
            samples.push(took);
            elapsed += took;
        }
        Ok(BatchSizeRun::from_samples(batch_size, samples))
    }

    /// One pass over `plan`'s batch sizes, `time` and `min_batches` each; hands each
    /// run to `on_run` as it completes (to print progress).
    pub fn pass(
        &mut self,
        plan: &CeilingPlan,
        time: Duration,
        min_batches: usize,
        mut on_run: impl FnMut(&BatchSizeRun),
    ) -> anyhow::Result<Ceiling> {
        anyhow::ensure!(!plan.batch_sizes.is_empty(), "no batch sizes");
        let mut runs = Vec::with_capacity(plan.batch_sizes.len());
        for &batch_size in &plan.batch_sizes {
            let run = self.run(batch_size, time, min_batches)?;
            on_run(&run);
            runs.push(run);
        }
        Ok(Ceiling { runs })
    }

    /// Runs the next `batch_size` inputs once; returns the model call's time.
    fn time_one(&mut self, batch_size: usize) -> anyhow::Result<Duration> {
        let batch: Vec<&M::Input> =
            (0..batch_size).map(|k| &self.inputs[(self.next + k) % self.inputs.len()]).collect();
        self.next = (self.next + batch_size) % self.inputs.len();
        let started = Instant::now();
        let values = self.model.run_batch(&batch)?;
        let took = started.elapsed();
        anyhow::ensure!(
            values.len() == batch_size * self.model.dim(),
            "the model returned {} values for {batch_size} inputs",
            values.len()
        );
        Ok(took)
    }
}

/// The whole ceiling in one pass: the warm-up, then every batch size of `plan` for
/// its time and at least [`MIN_BATCHES`] batches.
pub fn measure<M: BatchModel>(
    model: &mut M,
    inputs: &[M::Input],
    plan: &CeilingPlan,
    on_run: impl FnMut(&BatchSizeRun),
) -> anyhow::Result<Ceiling> {
    let mut in_process = InProcess::new(model, inputs)?;
    in_process.warm_up(plan.warmup)?;
    in_process.pass(plan, plan.time_per_size, MIN_BATCHES, on_run)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums each input's values; records the first value of each input it runs.
    struct Summing {
        seen: Vec<u32>,
    }

    impl BatchModel for Summing {
        type Input = Vec<u32>;

        fn dim(&self) -> usize {
            1
        }

        fn run_batch(&mut self, batch: &[&Vec<u32>]) -> embedwire_server::error::Result<Vec<f32>> {
            self.seen.extend(batch.iter().map(|input| input[0]));
            Ok(batch.iter().map(|input| input.iter().sum::<u32>() as f32).collect())
        }
    }

    #[test]
    fn every_size_is_measured_with_inputs_in_rotation() {
        let inputs: Vec<Vec<u32>> = (0..5).map(|i| vec![i]).collect();
        let mut model = Summing { seen: Vec::new() };
        let plan = CeilingPlan { batch_sizes: vec![1, 3], time_per_size: Duration::ZERO, warmup: Duration::ZERO };
        let mut printed = Vec::new();
        let ceiling = measure(&mut model, &inputs, &plan, |run| printed.push(run.batch_size)).unwrap();
        assert_eq!(printed, [1, 3]);
        assert_eq!(ceiling.runs.iter().map(|r| r.inputs).collect::<Vec<_>>(), [3, 9]);
        assert!(ceiling.of(3).is_some() && ceiling.of(2).is_none());
        // The warm-up's one batch, then each size's first (unmeasured) batch and its
        // measured batches: all in rotation.
        assert_eq!(model.seen.len(), 8 + (1 + 3) + (3 + 3 * 3));
        let expected: Vec<u32> = (0..model.seen.len() as u32).map(|k| k % 5).collect();
        assert_eq!(model.seen, expected);
    }

    #[test]
    fn passes_combine_per_batch_size() {
        let inputs: Vec<Vec<u32>> = (0..5).map(|i| vec![i]).collect();
        let mut model = Summing { seen: Vec::new() };
        let plan = CeilingPlan { batch_sizes: vec![2, 1], time_per_size: Duration::ZERO, warmup: Duration::ZERO };
        let mut in_process = InProcess::new(&mut model, &inputs).unwrap();
        let first = in_process.pass(&plan, Duration::ZERO, 1, |_| {}).unwrap();
        let second = in_process.pass(&plan, Duration::ZERO, 2, |_| {}).unwrap();
        let both = Ceiling::combine(&[first, second]);
        assert_eq!(both.runs.iter().map(|r| (r.batch_size, r.inputs)).collect::<Vec<_>>(), [(2, 6), (1, 3)]);
        assert_eq!(both.of(2).unwrap().batch_latency.count, 3);
        // A size's unmeasured first batch only in the first pass.
        assert_eq!(model.seen.len(), (2 + 2) + (1 + 1) + (2 * 2 + 2 * 1));
    }
}
