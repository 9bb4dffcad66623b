//! Runs batches through an ONNX graph with ONNX Runtime and pools the result.
//!
//! ONNX Runtime is loaded at run time from a shared library (`--ort-library`), so the
//! binary builds without it and one build serves any compatible library.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use ort::environment::Environment;
use ort::ep;
use ort::logging::LogLevel;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{RunOptions, Session, SessionInputValue};
use ort::value::Tensor;

use super::Pooling;
use super::arena_shrink::{self, ArenaShrink};
use super::files::ModelFiles;
use super::shared_weights::SharedWeights;
use crate::error::{Error, Result};

/// ONNX Runtime allows one environment per process; every model shares it.
static RUNTIME: OnceLock<Environment> = OnceLock::new();

/// Loads ONNX Runtime from `library` once per process. Later calls reuse the first
/// library, whatever path they name.
pub fn init_runtime(library: &Path) -> Result<&'static Environment> {
    if let Some(environment) = RUNTIME.get() {
        return Ok(environment);
    }
    if !library.is_file() {
        return Err(Error::Config(format!(
            "ONNX Runtime library {} does not exist (run `make setup`, or pass --ort-library)",
            library.display()
        )));
    }
    let environment = ort::init_from(library)
        .map_err(|e| Error::Config(format!("loading {}: {e}", library.display())))?
        .with_name("embedwire")
        .with_telemetry(false)
        .build()
        .map_err(|e| Error::Config(format!("creating the ONNX Runtime environment: {e}")))?;
    environment.set_log_level(onnx_log_level());
    Ok(RUNTIME.get_or_init(|| environment))
}

/// The least severe ONNX Runtime message worth formatting: what the `ort::logging`
/// tracing target lets through. ort creates its environment at VERBOSE and leaves the
/// filtering to tracing, so ONNX Runtime formatted verbose messages into C++ string
/// streams at every run, only for tracing to drop them: about 2 % of the server's
/// samples in a profile of one-text batches, 0.2 % with batches of 64 (2026-12-07).
fn onnx_log_level() -> LogLevel {
    const TARGET: &str = "ort::logging";
    if tracing::enabled!(target: TARGET, tracing::Level::TRACE) {
        LogLevel::Verbose
    } else if tracing::enabled!(target: TARGET, tracing::Level::INFO) {
        LogLevel::Info
    } else {
        LogLevel::Warning
    }
}

/// How ONNX Runtime should run the model.
#[derive(Debug, Clone, Copy)]
pub struct OnnxSettings {
    /// Threads one batch may use.
    pub intra_op_threads: usize,
    /// When ONNX Runtime's threads spin instead of sleeping.
    pub spinning: Spinning,
    /// Whether ONNX Runtime keeps freed memory in its arena for reuse.
    pub arena: bool,
}

impl OnnxSettings {
    /// The settings of a session that runs one part of a split batch: one thread,
    /// since the parts run side by side on the cores.
    pub fn parallel_part(self) -> OnnxSettings {
        OnnxSettings { intra_op_threads: 1, ..self }
    }
}

/// When ONNX Runtime's pool threads spin (busy-wait) for work instead of sleeping.
/// A run of this model is about a hundred small parallel sections (one per matrix
/// product); a sleeping thread takes a futex wake-up to join each one, which for one
/// short text costs more than the arithmetic (measured in `embedwire-bench latency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Spinning {
    /// Threads sleep between parallel sections: the least CPU, the slowest small runs.
    #[value(alias = "false")]
    Never,
    /// Threads spin between the parallel sections of a run and stop spinning when
    /// it returns (ONNX Runtime's `session.force_spinning_stop`): small runs as fast
    /// as with `always`, and no CPU burnt between batches, where the request
    /// handlers need it.
    #[default]
    WithinRuns,
    /// Threads also spin for a while after a run ends (ONNX Runtime's default).
    #[value(alias = "true")]
    Always,
}

/// What the graph outputs.
#[derive(Debug, Clone)]
enum GraphOutput {
    /// Token vectors [batch, seq_len, hidden] that the server pools.
    TokenVectors(String),
    /// Already pooled vectors [batch, hidden] (graphs exported with pooling inside).
    Pooled(String),
}

/// One loaded ONNX model. Not shared: the batcher's model thread owns it, because
/// `Session::run` needs `&mut self` and one batch at a time is what the CPU can do.
pub struct OnnxModel {
    session: Session,
    /// The graph's output to read and whether it still needs pooling.
    output: GraphOutput,
    /// Whether the graph takes `token_type_ids` (BERT does; some exports drop it).
    takes_token_type_ids: bool,
    /// Vector dimension.
    dim: usize,
    /// Pooling for token-vector outputs.
    pooling: Pooling,
    /// When a run gives the arena's unused memory back (None without the arena).
    arena_shrink: Option<ArenaShrink>,
    /// A batch at least this large (in [`arena_shrink::footprint`]) leaves memory
    /// worth giving back when the model idles: one text of the longest the model takes.
    idle_release_footprint: usize,
    /// The run options that ask for it.
    shrink_options: RunOptions,
    /// The weights the session reads, when shared with other sessions: dropped after
    /// the session (fields drop in order).
    _shared: Option<Arc<SharedWeights>>,
}

impl OnnxModel {
    /// Loads `graph` (the fp32 graph of `files` or its int8 twin) into a session.
    pub fn load(
        environment: &Environment,
        files: &ModelFiles,
        graph: &Path,
        settings: OnnxSettings,
        shared: Option<&Arc<SharedWeights>>,
    ) -> Result<Self> {
        let session = open_session(environment, graph, settings, shared.map(|shared| &**shared))?;
        let takes_token_type_ids = check_bert_inputs(&session, graph)?;
        let output = pick_output(&session).ok_or_else(|| {
            Error::Config(format!(
                "{}: no last_hidden_state, token_embeddings or sentence_embedding output",
                graph.display()
            ))
        })?;
        let mut shrink_options = RunOptions::new().map_err(|e| Error::Model(e.to_string()))?;
        shrink_options
            .set("memory.enable_memory_arena_shrinkage", "cpu:0")
            .map_err(|e| Error::Model(format!("run options: {e}")))?;
        Ok(OnnxModel {
            session,
            output,
            takes_token_type_ids,
            dim: files.hidden_size,
            pooling: files.pooling,
            arena_shrink: settings.arena.then(|| ArenaShrink::new(Instant::now())),
            idle_release_footprint: arena_shrink::footprint(1, files.max_input_tokens, files.hidden_size),
            shrink_options,
            _shared: shared.cloned(),
        })
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Embeds a batch of token id sequences: [batch.len(), dim] pooled, unnormalized.
    /// Sequences are padded to the longest one; padding never reaches the result.
    pub fn embed_batch(&mut self, batch: &[&[u32]]) -> Result<Vec<f32>> {
        let rows = batch.len();
        let seq_len = batch.iter().map(|ids| ids.len()).max().unwrap_or(0);
        if rows == 0 || seq_len == 0 {
            return Ok(Vec::new());
        }
        let footprint = arena_shrink::footprint(rows, seq_len, self.dim);
        let shrink = self.arena_shrink.as_mut().is_some_and(|arena| arena.before_run(footprint, Instant::now()));
        self.run(batch, shrink)
    }

    /// Whether a batch since the arena last shrank left memory worth giving back
    /// while the model idles.
    pub fn holds_idle_memory(&self) -> bool {
        self.arena_shrink.as_ref().is_some_and(|arena| arena.grown_past(self.idle_release_footprint))
    }

    /// Gives the arena's unused memory back now: ONNX Runtime frees it only at the end
    /// of a run that asks, so this runs one token (id 0, in any vocabulary).
    pub fn release_idle_memory(&mut self) -> Result<()> {
        let Some(arena) = self.arena_shrink.as_mut() else { return Ok(()) };
        arena.shrunk(Instant::now());
        self.run(&[&[0]], true).map(drop)
    }

    /// Runs `batch` (non-empty, ids non-empty), asking for the arena's shrink at the end if `shrink`.
    fn run(&mut self, batch: &[&[u32]], shrink: bool) -> Result<Vec<f32>> {
        let rows = batch.len();
        let seq_len = batch.iter().map(|ids| ids.len()).max().unwrap_or(0);
        let shape = [rows as i64, seq_len as i64];
        let mut inputs: Vec<(&str, SessionInputValue)> = vec![
            ("input_ids", tensor(shape, pad_rows(batch, seq_len))?.into()),
            ("attention_mask", tensor(shape, attention_mask(batch, seq_len))?.into()),
        ];
        if self.takes_token_type_ids {
            inputs.push(("token_type_ids", tensor(shape, vec![0i64; rows * seq_len])?.into()));
        }
        let (output, pooling, dim) = (self.output.clone(), self.pooling, self.dim);
        let outputs =
            if shrink { self.session.run_with_options(inputs, &self.shrink_options) } else { self.session.run(inputs) }
                .map_err(|e| Error::Model(e.to_string()))?;
        let lengths: Vec<usize> = batch.iter().map(|ids| ids.len()).collect();
        match output {
            GraphOutput::TokenVectors(name) => {
                let (_, hidden) = outputs[name.as_str()]
                    .try_extract_tensor::<f32>()
                    .map_err(|e| Error::Model(format!("output {name}: {e}")))?;
                expect_len(hidden.len(), rows * seq_len * dim, &name)?;
                Ok(pooling.pool(hidden, &lengths, seq_len, dim))
            }
            GraphOutput::Pooled(name) => {
                let (_, pooled) = outputs[name.as_str()]
                    .try_extract_tensor::<f32>()
                    .map_err(|e| Error::Model(format!("output {name}: {e}")))?;
                expect_len(pooled.len(), rows * dim, &name)?;
                Ok(pooled.to_vec())
            }
        }
    }
}

/// Opens the graph at `path` with `settings`; the error names the file.
/// With `shared`, the session takes its weights from there instead of loading its own.
pub(super) fn open_session(
    environment: &Environment,
    path: &Path,
    settings: OnnxSettings,
    shared: Option<&SharedWeights>,
) -> Result<Session> {
    Session::builder(environment)
        .and_then(|b| match shared {
            Some(shared) => Ok(shared.apply(b)?),
            None => Ok(b),
        })
        .and_then(|b| Ok(b.with_optimization_level(GraphOptimizationLevel::All)?))
        .and_then(|b| Ok(b.with_intra_threads(settings.intra_op_threads)?))
        .and_then(|b| Ok(b.with_inter_threads(1)?))
        .and_then(|b| Ok(b.with_intra_op_spinning(settings.spinning != Spinning::Never)?))
        .and_then(|b| {
            let stop_after_run = if settings.spinning == Spinning::WithinRuns { "1" } else { "0" };
            Ok(b.with_config_entry("session.force_spinning_stop", stop_after_run)?)
        })
        // The arena keeps the peak of the largest batch ever run (hundreds of MiB for
        // a batch of long texts, attention being quadratic) for the process' life;
        // without it, buffers are allocated per batch and large ones go back to the
        // system. Faster with it: see --ort-arena.
        .and_then(|b| {
            // Registering the CPU provider explicitly is needed only to turn the arena
            // off; the default registration is what the benchmarks measured.
            if settings.arena {
                return Ok(b);
            }
            Ok(b.with_execution_providers([ep::CPU::default().with_arena_allocator(false).build()])?)
        })
        .and_then(|mut b| b.commit_from_file(path))
        .map_err(|e| Error::Config(format!("loading {}: {e}", path.display())))
}

/// Fails unless the graph takes `input_ids` and `attention_mask`; returns whether it
/// also takes `token_type_ids` (BERT does; some exports drop it).
pub(super) fn check_bert_inputs(session: &Session, path: &Path) -> Result<bool> {
    let input_names: Vec<&str> = session.inputs().iter().map(|i| i.name()).collect();
    for required in ["input_ids", "attention_mask"] {
        if !input_names.contains(&required) {
            return Err(Error::Config(format!(
                "{}: the graph has no `{required}` input (inputs: {input_names:?})",
                path.display()
            )));
        }
    }
    Ok(input_names.contains(&"token_type_ids"))
}

/// `rows` as one row-major [rows.len(), seq_len] buffer, right-padded with zeros: the
/// [PAD] id, and token type 0. Padding is masked out, so its values never matter.
pub(super) fn pad_rows(rows: &[&[u32]], seq_len: usize) -> Vec<i64> {
    let mut padded = vec![0i64; rows.len() * seq_len];
    for (row, values) in rows.iter().enumerate() {
        let start = row * seq_len;
        for (slot, value) in padded[start..start + values.len()].iter_mut().zip(values.iter()) {
            *slot = *value as i64;
        }
    }
    padded
}

/// 1 over each row's tokens and 0 over its padding, in `pad_rows`' layout.
pub(super) fn attention_mask(rows: &[&[u32]], seq_len: usize) -> Vec<i64> {
    let mut mask = vec![0i64; rows.len() * seq_len];
    for (row, values) in rows.iter().enumerate() {
        let start = row * seq_len;
        mask[start..start + values.len()].fill(1);
    }
    mask
}

pub(super) fn tensor(shape: [i64; 2], values: Vec<i64>) -> Result<Tensor<i64>> {
    Tensor::from_array((shape, values)).map_err(|e| Error::Model(format!("input tensor: {e}")))
}

fn expect_len(actual: usize, expected: usize, name: &str) -> Result<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(Error::Model(format!("output {name} has {actual} values, expected {expected}")))
    }
}

/// Prefers token vectors (`last_hidden_state`, `token_embeddings`), pooled here the
/// way sentence-transformers pools; otherwise a pooled `sentence_embedding` output.
/// (BERT's `pooler_output` is a tanh projection, not an embedding: never used.)
fn pick_output(session: &Session) -> Option<GraphOutput> {
    let names: Vec<&str> = session.outputs().iter().map(|o| o.name()).collect();
    let present = |candidates: &[&str]| candidates.iter().find(|name| names.contains(name)).map(|n| n.to_string());
    present(&["last_hidden_state", "token_embeddings"])
        .map(GraphOutput::TokenVectors)
        .or_else(|| present(&["sentence_embedding"]).map(GraphOutput::Pooled))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The level ONNX Runtime is set to under the tracing filter `directives`.
    fn level_under(directives: &str) -> LogLevel {
        let subscriber = tracing_subscriber::fmt().with_env_filter(directives).finish();
        tracing::subscriber::with_default(subscriber, onnx_log_level)
    }

    #[test]
    fn onnx_runtime_formats_only_the_messages_the_tracing_filter_lets_through() {
        assert_eq!(level_under("info,ort=warn"), LogLevel::Warning);
        assert_eq!(level_under("info"), LogLevel::Info);
        assert_eq!(level_under("warn,ort=trace"), LogLevel::Verbose);
        assert_eq!(level_under("error"), LogLevel::Warning);
    }
}
