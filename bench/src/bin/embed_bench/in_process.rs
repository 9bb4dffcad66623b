//! The ceiling: ONNX Runtime called in-process through the server crate's own
//! `OnnxModel` (same graph, same session options, same pooling), with no gRPC, no
//! batcher and no other work on the machine's cores.
//!
//! Sentences are tokenized once up front: tokenizing 12 words takes microseconds
//! against milliseconds of inference, and leaving it out makes this a clean upper
//! bound for what the server can reach.

use std::time::{Duration, Instant};

use embedwire_bench::latency::LatencySummary;
use embedwire_server::model::files::ModelFiles;
use embedwire_server::model::onnx::{OnnxModel, OnnxSettings, init_runtime};
use embedwire_server::model::tokenizer::TextTokenizer;

use crate::config::ModelPaths;

/// One batch size run for a while.
#[derive(Debug, Clone)]
pub struct BatchSizeRun {
    pub batch_size: usize,
    /// Sentences embedded in the measured time.
    pub sentences: usize,
    /// Measured time, inference only.
    pub elapsed: Duration,
    /// Time of one `embed_batch` call.
    pub batch_latency: LatencySummary,
}

impl BatchSizeRun {
    /// Sentences per second.
    pub fn rate(&self) -> f64 {
        self.sentences as f64 / self.elapsed.as_secs_f64()
    }
}

/// Every batch size measured.
#[derive(Debug, Clone)]
pub struct Ceiling {
    /// In the order measured; the first is batch size 1.
    pub runs: Vec<BatchSizeRun>,
}

impl Ceiling {
    /// The batch size with the most sentences per second.
    pub fn best(&self) -> &BatchSizeRun {
        self.runs.iter().max_by(|a, b| a.rate().total_cmp(&b.rate())).expect("at least one batch size")
    }

    /// The batch-1 run, whose call time is the single-request floor.
    pub fn batch_one(&self) -> &BatchSizeRun {
        self.runs.iter().find(|run| run.batch_size == 1).expect("batch size 1 is always measured")
    }
}

/// What to measure.
pub struct CeilingPlan<'a> {
    pub batch_sizes: &'a [usize],
    /// Measured time per batch size.
    pub time_per_size: Duration,
    /// Unmeasured time before the first size.
    pub warmup: Duration,
    pub intra_op_threads: usize,
}

/// Loads the model, measures every batch size, and drops the model again (so its
/// threads and memory are gone before the server runs).
pub fn measure(paths: &ModelPaths, texts: &[String], plan: &CeilingPlan) -> anyhow::Result<Ceiling> {
    let (mut model, sequences) = load(paths, texts, plan.intra_op_threads)?;
    let sequences: Vec<&[u32]> = sequences.iter().map(Vec::as_slice).collect();
    let mut cursor = SequenceCursor { sequences: &sequences, next: 0 };

    run_for(&mut model, &mut cursor, 8, plan.warmup)?;
    let mut runs = Vec::with_capacity(plan.batch_sizes.len());
    for &batch_size in plan.batch_sizes {
        // A few batches of the new shape first: ONNX Runtime sizes buffers per shape.
        run_for(&mut model, &mut cursor, batch_size, Duration::ZERO)?;
        let run = run_for(&mut model, &mut cursor, batch_size, plan.time_per_size)?;
        println!(
            "  in-process batch {:>2}: {:>7.1} sentences/s   batch call mean {:>6.2} ms  p50 {:>6.2} ms",
            batch_size,
            run.rate(),
            embedwire_bench::latency::ms(run.batch_latency.mean),
            embedwire_bench::latency::ms(run.batch_latency.p50),
        );
        runs.push(run);
    }
    Ok(Ceiling { runs })
}

fn load(paths: &ModelPaths, texts: &[String], threads: usize) -> anyhow::Result<(OnnxModel, Vec<Vec<u32>>)> {
    let files = ModelFiles::read(&paths.model_dir)?;
    let environment = init_runtime(&paths.ort_library)?;
    let tokenizer = TextTokenizer::from_file(&files.tokenizer_path, files.max_input_tokens)?;
    // Spinning off, as in the server's default, so both sides use the same options.
    let settings = OnnxSettings { intra_op_threads: threads, spin: false, arena: false };
    let model = OnnxModel::load(environment, &files, &paths.graph, settings)?;
    let sequences = texts.iter().map(|text| tokenizer.tokenize(text).map(|t| t.ids)).collect::<Result<Vec<_>, _>>()?;
    Ok((model, sequences))
}

/// Hands out consecutive sentences, wrapping around, so each batch holds different
/// texts and successive batches differ too.
struct SequenceCursor<'a> {
    sequences: &'a [&'a [u32]],
    next: usize,
}

impl<'a> SequenceCursor<'a> {
    fn batch(&mut self, size: usize) -> Vec<&'a [u32]> {
        let batch = (0..size).map(|k| self.sequences[(self.next + k) % self.sequences.len()]).collect();
        self.next = (self.next + size) % self.sequences.len();
        batch
    }
}

/// Fewest batches in a run, so that even a short run of large batches says something.
const MIN_BATCHES: usize = 3;

/// Runs batches of `batch_size` for at least `time` and MIN_BATCHES batches.
fn run_for(
    model: &mut OnnxModel,
    cursor: &mut SequenceCursor,
    batch_size: usize,
    time: Duration,
) -> anyhow::Result<BatchSizeRun> {
    let mut latencies = Vec::new();
    let mut elapsed = Duration::ZERO;
    while elapsed < time || latencies.len() < MIN_BATCHES {
        let batch = cursor.batch(batch_size);
        let started = Instant::now();
        let vectors = model.embed_batch(&batch)?;
        let took = started.elapsed();
        anyhow::ensure!(vectors.len() == batch_size * model.dim(), "the model returned {} values", vectors.len());
        latencies.push(took);
        elapsed += took;
    }
    Ok(BatchSizeRun {
        batch_size,
        sentences: latencies.len() * batch_size,
        elapsed,
        batch_latency: LatencySummary::from_samples(latencies),
    })
}
