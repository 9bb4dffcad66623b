//! The in-process ceiling a server run is compared with: the server crate's own model (any [`BatchModel`]) called batch
//! after batch, with no gRPC, batcher or client. Inputs come tokenized (so this is an upper bound), taken in rotation
//! so batches differ. On a noisy machine a bench measures in rounds: [`InProcess`] keeps the model between passes that
//! alternate with the server's runs, and [`Ceiling::combine`] pools them, so both sides sample the same stretch.

use std::{collections::HashSet, time::Duration, time::Instant};

use embedwire_server::batcher::{self, BatchInput, BatchModel};

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

    pub fn rate(&self) -> f64 {
        self.inputs as f64 / self.elapsed.as_secs_f64()
    }
}

/// Every batch size, in the order measured.
#[derive(Debug, Clone)]
pub struct Ceiling {
    pub runs: Vec<BatchSizeRun>,
}

impl Ceiling {
    /// The batch size with the most inputs per second.
    pub fn best(&self) -> &BatchSizeRun {
        self.runs.iter().max_by(|a, b| a.rate().total_cmp(&b.rate())).expect("at least one batch size")
    }

    pub fn of(&self, batch_size: usize) -> Option<&BatchSizeRun> {
        self.runs.iter().find(|run| run.batch_size == batch_size)
    }

    /// Passes (at least one) over the same batch sizes as one: each size's batches pooled.
    pub fn combine(passes: &[Ceiling]) -> Ceiling {
        let pooled = |size| passes.iter().filter_map(move |pass| pass.of(size)).flat_map(|run| run.samples.clone());
        let sizes = passes[0].runs.iter().map(|run| run.batch_size);
        Ceiling { runs: sizes.map(|size| BatchSizeRun::from_samples(size, pooled(size).collect())).collect() }
    }
}

#[derive(Debug, Clone)]
pub struct CeilingPlan {
    pub batch_sizes: Vec<usize>,
    /// Measured time per batch size (in all, when measured in rounds).
    pub time_per_size: Duration,
    /// Unmeasured run before the first size, so allocation and thread start-up stay out of the figures.
    pub warmup: Duration,
}

/// Fewest batches of a one-pass run, so that even a short run of large batches says something.
pub const MIN_BATCHES: usize = 3;
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

    /// Runs batches of `batch_size` for at least `time` and `min_batches` batches. The first time a size runs, one
    /// batch of it goes first, unmeasured: ONNX Runtime sizes buffers per shape.
    fn run(&mut self, batch_size: usize, time: Duration, min_batches: usize) -> anyhow::Result<BatchSizeRun> {
        anyhow::ensure!(batch_size > 0, "batch size 0");
        if self.seen.insert(batch_size) {
            self.time_one(batch_size)?;
        }
        let (mut samples, mut elapsed) = (Vec::new(), Duration::ZERO);
        while elapsed < time || samples.len() < min_batches {
            samples.push(self.time_one(batch_size)?);
            elapsed += samples[samples.len() - 1];
        }
        Ok(BatchSizeRun::from_samples(batch_size, samples))
    }

    /// One pass over `plan`'s batch sizes, `time` and `min_batches` each; runs go to `on_run` (to print progress).
    pub fn pass(
        &mut self,
        plan: &CeilingPlan,
        time: Duration,
        min_batches: usize,
        mut on_run: impl FnMut(&BatchSizeRun),
    ) -> anyhow::Result<Ceiling> {
        anyhow::ensure!(!plan.batch_sizes.is_empty(), "no batch sizes");
        let runs = plan.batch_sizes.iter().map(|&batch_size| {
            let run = self.run(batch_size, time, min_batches)?;
            on_run(&run);
            Ok(run)
        });
        Ok(Ceiling { runs: runs.collect::<anyhow::Result<_>>()? })
    }

    /// The next `batch_size` inputs once; the model call's time.
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

/// The whole ceiling in one pass: the warm-up, then each size of `plan` for its time and >= [`MIN_BATCHES`] batches.
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

/// A batch run the way the server runs a split batch (`--batch-parts`): cut into the server's chunks, which the models
/// take on threads of their own as they finish one (`embedwire_server::batcher::run_shared_chunks`), and the batch ends
/// when its last chunk does. Measured with [`measure`] like a whole model, it is the ceiling of the server's other way
/// of running a batch, which on cores shared with request handling can beat the whole one.
pub struct SplitModel<M: BatchModel> {
    parts: Vec<M>,
}

impl<M: BatchModel> SplitModel<M> {
    pub fn new(parts: Vec<M>) -> anyhow::Result<Self> {
        anyhow::ensure!(parts.len() >= 2, "a split batch needs two part models or more");
        Ok(SplitModel { parts })
    }
}

impl<M: BatchModel> BatchModel for SplitModel<M> {
    type Input = M::Input;

    fn dim(&self) -> usize {
        self.parts[0].dim()
    }

    fn run_batch(&mut self, batch: &[&Self::Input]) -> embedwire_server::error::Result<Vec<f32>> {
        let lengths: Vec<usize> = batch.iter().map(|input| input.token_count()).collect();
        let chunks = batcher::chunk_ranges(&lengths, self.parts.len());
        let outputs = batcher::run_shared_chunks(&mut self.parts, chunks.len(), |part, chunk| {
            part.run_batch(&batch[chunks[chunk].clone()])
        });
        let mut values = Vec::with_capacity(batch.len() * self.dim());
        for output in outputs {
            values.extend(output.expect("a batch chunk panicked")?);
        }
        Ok(values)
    }
}
