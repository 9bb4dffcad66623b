//! The ceiling: ONNX Runtime called in-process through the server crate's own
//! `OnnxModel` (same graph, same session options, same pooling), with no gRPC, no
//! batcher and no other work on the machine's cores.
//!
//! Sentences are tokenized once up front: tokenizing 12 words takes microseconds
//! against milliseconds of inference, and leaving it out makes this a clean upper
//! bound for what the server can reach.

use std::time::Duration;

use embedwire_bench::in_process::{self, CeilingPlan as SharedPlan};
use embedwire_server::model::files::ModelFiles;
use embedwire_server::model::onnx::{OnnxModel, OnnxSettings, init_runtime};
use embedwire_server::model::tokenizer::TextTokenizer;

pub use embedwire_bench::in_process::Ceiling;

use crate::config::ModelPaths;

/// What to measure.
pub struct CeilingPlan<'a> {
    pub batch_sizes: &'a [usize],
    /// Measured time per batch size.
    pub time_per_size: Duration,
    /// Unmeasured time before the first size.
    pub warmup: Duration,
    pub intra_op_threads: usize,
}

/// Loads the model, measures every batch size with the bench's shared in-process
/// runner, and drops the model again (so its threads and memory are gone before the
/// server runs).
pub fn measure(paths: &ModelPaths, texts: &[String], plan: &CeilingPlan) -> anyhow::Result<Ceiling> {
    let (mut model, sequences) = load(paths, texts, plan.intra_op_threads)?;
    let shared =
        SharedPlan { batch_sizes: plan.batch_sizes.to_vec(), time_per_size: plan.time_per_size, warmup: plan.warmup };
    in_process::measure(&mut model, &sequences, &shared, |run| {
        println!(
            "  in-process batch {:>2}: {:>7.1} sentences/s   batch call mean {:>6.2} ms  p50 {:>6.2} ms",
            run.batch_size,
            run.rate(),
            embedwire_bench::latency::ms(run.batch_latency.mean),
            embedwire_bench::latency::ms(run.batch_latency.p50),
        );
    })
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
