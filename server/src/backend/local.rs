//! The ONNX model served in-process: requests tokenize on the async runtime, then
//! their sequences join the dynamic batcher that feeds the model thread.

use std::sync::Arc;
use std::thread::JoinHandle;

use super::{RawEmbeddings, check_truncation, token_counts};
use crate::batcher::{BatchLimits, BatchModel, LateParts, Priority, TokenBudgetBatcher};
use crate::error::{Error, Result};
use crate::lanes::{Admission, InteractiveAdmission, QueueBound};
use crate::model::files::ModelFiles;
use crate::model::onnx::{OnnxModel, OnnxSettings, init_runtime};
use crate::model::precision::{self, CpuInt8, PrecisionChoice};
use crate::model::shared_weights::SharedWeights;
use crate::model::tokenizer::TextTokenizer;
use crate::model::{ModelInfo, TokenizedText};
use crate::stats::Stats;

/// Where the model comes from and how to run it.
#[derive(Debug, Clone)]
pub struct LocalModelConfig {
    /// The model directory.
    pub model_dir: std::path::PathBuf,
    /// The id reported to clients.
    pub model_id: String,
    /// The ONNX Runtime shared library.
    pub ort_library: std::path::PathBuf,
    /// ONNX Runtime threading.
    pub onnx: OnnxSettings,
    /// Parts a large batch runs as, side by side (see `batcher::MIN_SPLIT_SEQUENCES`);
    /// 1 or 0: whole.
    pub batch_parts: usize,
    /// Batch formation.
    pub batch: BatchLimits,
    /// When an interactive request is refused for load (see `lanes`).
    pub queue_bound: QueueBound,
    /// fp32, int8 or auto.
    pub precision: PrecisionChoice,
}

/// Tokenizer + batcher + model thread.
pub struct LocalBackend {
    tokenizer: Arc<TextTokenizer>,
    batcher: TokenBudgetBatcher,
    info: ModelInfo,
    /// Refuses interactive calls under real overload.
    admission: InteractiveAdmission,
    /// The thread loading the sessions of split batches after start, joined on drop:
    /// a process must not exit while it is inside ONNX Runtime.
    parts_loader: Option<JoinHandle<()>>,
}

impl Drop for LocalBackend {
    fn drop(&mut self) {
        if let Some(loading) = self.parts_loader.take() {
            let _ = loading.join();
        }
    }
}

impl BatchModel for OnnxModel {
    type Input = Vec<u32>;

    fn dim(&self) -> usize {
        OnnxModel::dim(self)
    }

    fn run_batch(&mut self, batch: &[&Vec<u32>]) -> Result<Vec<f32>> {
        let ids: Vec<&[u32]> = batch.iter().map(|ids| ids.as_slice()).collect();
        OnnxModel::embed_batch(self, &ids)
    }

    fn holds_idle_memory(&self) -> bool {
        OnnxModel::holds_idle_memory(self)
    }

    fn release_idle_memory(&mut self) -> Result<()> {
        OnnxModel::release_idle_memory(self)
    }
}

/// Inputs tokenized inline on the async runtime at most; larger requests move to the
/// blocking pool so one big request does not stall other connections' I/O.
const INLINE_TOKENIZE_LIMIT: usize = 8;

impl LocalBackend {
    /// Checks that the model's files exist and parse; cheap, so the server can fail
    /// at start with a clear message before it begins to listen.
    pub fn check_files(config: &LocalModelConfig) -> Result<ModelFiles> {
        let files = ModelFiles::read(&config.model_dir)?;
        // `--precision int8` without an int8 graph is a start error too.
        precision::resolve(config.precision, &config.model_dir, &files.onnx_path, CpuInt8::detect())?;
        Ok(files)
    }

    /// Loads ONNX Runtime, the tokenizer and the model, and starts the model thread.
    /// Blocking: takes about a second.
    pub fn load(config: &LocalModelConfig, stats: Arc<Stats>) -> Result<Self> {
        let files = ModelFiles::read(&config.model_dir)?;
        let chosen = precision::resolve(config.precision, &config.model_dir, &files.onnx_path, CpuInt8::detect())?;
        tracing::info!(precision = chosen.precision.name(), graph = %chosen.graph.display(), reason = %chosen.reason, "model graph");
        // Parsing tokenizer.json (about 30 ms alone) overlaps loading ONNX Runtime and
        // the graph (about 90 ms): measured 10 ms less in all, as both want the cores.
        let (tokenizer, loaded) = std::thread::scope(|scope| {
            let tokenizer = scope.spawn(|| TextTokenizer::from_file(&files.tokenizer_path, files.max_input_tokens));
            let loaded = init_runtime(&config.ort_library).and_then(|environment| {
                // The parts' sessions and the whole model's share one copy of the weights.
                let shared = match config.batch_parts >= 2 {
                    true => Some(Arc::new(SharedWeights::read(&chosen.graph)?)),
                    false => None,
                };
                let model = OnnxModel::load(environment, &files, &chosen.graph, config.onnx, shared.as_ref())?;
                Ok((environment, model, shared))
            });
            let tokenizer =
                tokenizer.join().unwrap_or_else(|_| Err(Error::Config("the tokenizer loader panicked".into())));
            (tokenizer, loaded)
        });
        let (tokenizer, (environment, mut model, shared)) = (Arc::new(tokenizer?), loaded?);
        warm_up(&mut model, &tokenizer)?;
        let parts = PartsLoader {
            environment,
            files: files.clone(),
            graph: chosen.graph.clone(),
            settings: config.onnx.parallel_part(),
            count: config.batch_parts,
            tokenizer: tokenizer.clone(),
            stats: stats.clone(),
        };
        let (late_parts, parts_loader) = parts.start(shared)?;
        let admission =
            InteractiveAdmission::new(config.queue_bound.resolve(config.batch.max_batch_size), stats.clone());
        tracing::info!(
            bound = %admission.rule().describe(),
            "admission: interactive calls are refused only past the bound; bigger calls take the bulk lane"
        );
        let info = ModelInfo {
            model_id: config.model_id.clone(),
            dim: model.dim(),
            max_input_tokens: files.max_input_tokens,
            pooling: files.pooling,
            precision: chosen.precision,
        };
        let batch = BatchLimits {
            // A single sequence always fits, whatever the budget says.
            max_batch_tokens: config.batch.max_batch_tokens.max(files.max_input_tokens),
            max_bulk_batch_tokens: config.batch.max_bulk_batch_tokens.max(files.max_input_tokens),
            ..config.batch
        };
        let batcher = TokenBudgetBatcher::start_with_late_parts(model, late_parts, batch, stats)?;
        Ok(LocalBackend { tokenizer, batcher, info, admission, parts_loader })
    }

    /// The served model.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The admission rule in force for interactive calls.
    pub fn admission(&self) -> Admission {
        self.admission.rule()
    }

    /// Interactive calls queued or running (counted under the default rule).
    pub fn interactive_calls(&self) -> usize {
        self.admission.in_flight()
    }

    /// Sequences waiting for the model.
    pub fn queue_depth(&self) -> usize {
        self.batcher.queue_depth()
    }

    /// Tokenizes, batches with concurrent requests, and waits for the vectors.
    pub async fn embed(&self, texts: Vec<String>, truncate: bool, priority: Priority) -> Result<RawEmbeddings> {
        // Before tokenizing: under overload most calls are refused, and each
        // refusal should cost as little CPU as possible, which the model needs.
        // The admitted call holds its place in the count until this function returns.
        let (priority, _admitted) = match priority {
            Priority::Interactive => self.admission.admit(self.batcher.work_ahead(), texts.len())?,
            Priority::Bulk => (Priority::Bulk, Default::default()),
        };
        let tokenized = if texts.len() <= INLINE_TOKENIZE_LIMIT {
            self.tokenize(&texts)?
        } else {
            let tokenizer = self.tokenizer.clone();
            tokio::task::spawn_blocking(move || tokenize_all(&tokenizer, &texts))
                .await
                .map_err(|e| Error::Model(format!("tokenizer task: {e}")))??
        };
        check_truncation(&tokenized, truncate, self.info.max_input_tokens)?;
        let token_counts = token_counts(&tokenized);
        let sequences: Vec<Vec<u32>> = tokenized.into_iter().map(|t| t.ids).collect();
        let reply = if runs_now_if_free(&sequences, priority) {
            // Blocks this runtime thread for one short text's model time (1-4 ms), and
            // only while the model is otherwise idle, so at most one thread at a time:
            // the others keep serving. Not `block_in_place`: the thread it wakes to take
            // over competes with ONNX Runtime's for the cores, measured 0.1-0.2 ms slower.
            self.batcher.submit_or_run_now(sequences, priority)
        } else {
            self.batcher.submit(sequences, priority)
        };
        let (values, timing) =
            reply.await.map_err(|_| Error::Unavailable("the model stopped (server shutting down)".into()))??;
        Ok(RawEmbeddings { values, token_counts, timing })
    }

    /// Byte offsets of the tokens of `text`, untruncated.
    pub fn token_offsets(&self, text: &str) -> Result<Vec<(usize, usize)>> {
        self.tokenizer.token_offsets(text)
    }

    /// The model's tokenization of each text.
    pub fn tokenize(&self, texts: &[String]) -> Result<Vec<TokenizedText>> {
        tokenize_all(&self.tokenizer, texts)
    }
}

/// Most tokens of a request that runs at once on its caller's thread when the model
/// is free: one short text's worth (a search query, a sentence), a millisecond or two
/// of model time. Longer work goes through the model thread, so a request thread is
/// never held for long.
const RUN_NOW_MAX_TOKENS: usize = 64;

/// Whether a request may skip the queue when the model is free (see
/// `TokenBudgetBatcher::submit_or_run_now`): one short interactive text, on a
/// multi-threaded runtime (a single-threaded one would stop all its I/O meanwhile).
fn runs_now_if_free(sequences: &[Vec<u32>], priority: Priority) -> bool {
    let multi_threaded = tokio::runtime::Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    priority == Priority::Interactive && multi_threaded && matches!(sequences, [one] if one.len() <= RUN_NOW_MAX_TOKENS)
}

/// What loads the single-threaded sessions that run the parts of a split batch.
struct PartsLoader {
    environment: &'static ort::environment::Environment,
    files: ModelFiles,
    graph: std::path::PathBuf,
    settings: OnnxSettings,
    count: usize,
    tokenizer: Arc<TextTokenizer>,
    stats: Arc<Stats>,
}

impl PartsLoader {
    /// Loads the parts on a thread of their own while the server already serves (they
    /// doubled the time to SERVING: 0.13 -> 0.24 s), and sends them to the model thread,
    /// which runs every batch whole until they come; none when batches run whole.
    /// Returns where they will come, and the loading thread.
    fn start(self, shared: Option<Arc<SharedWeights>>) -> Result<(LateParts<OnnxModel>, Option<JoinHandle<()>>)> {
        let (sender, late_parts) = std::sync::mpsc::channel();
        let Some(shared) = shared.filter(|_| self.count >= 2) else { return Ok((late_parts, None)) };
        let loading = std::thread::Builder::new()
            .name("load-batch-parts".into())
            .spawn(move || {
                let loaded = match self.load(&shared) {
                    Ok(parts) => {
                        let count = parts.len() as u64;
                        sender.send(parts).map_or(0, |()| count)
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the sessions for split batches did not load: batches run whole");
                        0
                    }
                };
                // Every session reads its weights now: what stays mapped can go.
                shared.drop_resident_pages();
                // Said last: once it shows, the start-up work is over (a memory reading is settled).
                self.stats.batch_part_sessions.store(loaded, std::sync::atomic::Ordering::Relaxed);
            })
            .map_err(|e| Error::Config(format!("starting the thread that loads the batch parts: {e}")))?;
        Ok((late_parts, Some(loading)))
    }

    fn load(&self, shared: &Arc<SharedWeights>) -> Result<Vec<OnnxModel>> {
        (0..self.count)
            .map(|_| {
                let mut part =
                    OnnxModel::load(self.environment, &self.files, &self.graph, self.settings, Some(shared))?;
                warm_up(&mut part, &self.tokenizer)?;
                Ok(part)
            })
            .collect()
    }
}

/// Runs a few small batches before serving: ONNX Runtime's first run allocates and
/// plans, and costs many times a normal batch. Better at start than in the first
/// caller's latency, or in the speed estimate of the queue-time bound and of the
/// retry hints.
fn warm_up(model: &mut OnnxModel, tokenizer: &TextTokenizer) -> Result<()> {
    let text = tokenizer.tokenize("a short sentence to warm the model up")?;
    model.embed_batch(&[text.ids.as_slice(), text.ids.as_slice()])?;
    for _ in 0..WARM_UP_LONE_RUNS {
        model.embed_batch(&[text.ids.as_slice()])?;
    }
    Ok(())
}

/// Runs of one short text at start, after the first batch: the shape a lone client
/// sends, planned before it arrives.
const WARM_UP_LONE_RUNS: usize = 2;

fn tokenize_all(tokenizer: &TextTokenizer, texts: &[String]) -> Result<Vec<TokenizedText>> {
    texts.iter().map(|text| tokenizer.tokenize(text)).collect()
}
