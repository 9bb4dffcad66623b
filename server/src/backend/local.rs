//! The ONNX model served in-process: requests tokenize on the async runtime, then
//! their sequences join the dynamic batcher that feeds the model thread.

use std::sync::Arc;
use std::time::Duration;

use super::{RawEmbeddings, check_truncation, token_counts};
use crate::batcher::{BatchLimits, BatchModel, Priority, TokenBudgetBatcher};
use crate::error::{Error, Result};
use crate::model::files::ModelFiles;
use crate::model::onnx::{OnnxModel, OnnxSettings, init_runtime};
use crate::model::precision::{self, CpuInt8, PrecisionChoice};
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
    /// Batch formation.
    pub batch: BatchLimits,
    /// Longest expected wait for the model an interactive request is admitted to.
    pub max_queue_wait: Option<Duration>,
    /// fp32, int8 or auto.
    pub precision: PrecisionChoice,
}

/// Tokenizer + batcher + model thread.
pub struct LocalBackend {
    tokenizer: Arc<TextTokenizer>,
    batcher: TokenBudgetBatcher,
    info: ModelInfo,
    max_queue_wait: Option<Duration>,
}

impl BatchModel for OnnxModel {
    fn dim(&self) -> usize {
        OnnxModel::dim(self)
    }

    fn embed_batch(&mut self, batch: &[&[u32]]) -> Result<Vec<f32>> {
        OnnxModel::embed_batch(self, batch)
    }
}

/// Inputs tokenized inline on the async runtime at most; larger requests move to the
/// blocking pool so one big request does not stall other connections' I/O.
const INLINE_TOKENIZE_LIMIT: usize = 8;

impl LocalBackend {
    /// Checks that the model's files exist and parse; cheap, so the server can fail
    /// at start with a clear message before it begins to listen.
    pub fn check_files(config: &LocalModelConfig) -> Result<ModelFiles> {
        ModelFiles::read(&config.model_dir)
    }

    /// Loads ONNX Runtime, the tokenizer and the model, and starts the model thread.
    /// Blocking: takes about a second.
    pub fn load(config: &LocalModelConfig, stats: Arc<Stats>) -> Result<Self> {
        let files = ModelFiles::read(&config.model_dir)?;
        let environment = init_runtime(&config.ort_library)?;
        let tokenizer = TextTokenizer::from_file(&files.tokenizer_path, files.max_input_tokens)?;
        let chosen = precision::resolve(config.precision, &config.model_dir, &files.onnx_path, CpuInt8::detect())?;
        tracing::info!(precision = chosen.precision.name(), graph = %chosen.graph.display(), reason = %chosen.reason, "model graph");
        let mut model = OnnxModel::load(environment, &files, &chosen.graph, config.onnx)?;
        warm_up(&mut model, &tokenizer)?;
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
        let batcher = TokenBudgetBatcher::start(model, batch, stats)?;
        Ok(LocalBackend { tokenizer: Arc::new(tokenizer), batcher, info, max_queue_wait: config.max_queue_wait })
    }

    /// The served model.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Sequences waiting for the model.
    pub fn queue_depth(&self) -> usize {
        self.batcher.queue_depth()
    }

    /// Tokenizes, batches with concurrent requests, and waits for the vectors.
    pub async fn embed(&self, texts: Vec<String>, truncate: bool, priority: Priority) -> Result<RawEmbeddings> {
        // Before tokenizing: under overload most calls are refused, and each
        // refusal should cost as little CPU as possible, which the model needs.
        if priority == Priority::Interactive {
            self.admit_by_queue_time(&texts)?;
        }
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
        let reply = self.batcher.submit(tokenized.into_iter().map(|t| t.ids).collect(), priority);
        let (values, timing) =
            reply.await.map_err(|_| Error::Unavailable("the model stopped (server shutting down)".into()))??;
        Ok(RawEmbeddings { values, token_counts, timing })
    }

    /// Refuses new interactive work while the work ahead of it would keep it waiting
    /// longer than the bound, unless the request is large enough that the wait is
    /// small beside its own work: bulk Embed calls (hundreds of texts each, a few at
    /// once) then keep the model's batches full, while single queries under overload
    /// are refused and the ones accepted stay fast. The request's own work is
    /// estimated from its bytes, so that a refusal costs no tokenization.
    fn admit_by_queue_time(&self, texts: &[String]) -> Result<()> {
        let work_ahead = self.batcher.work_ahead();
        let (Some(bound), Some(wait)) = (self.max_queue_wait, work_ahead.expected_wait()) else {
            return Ok(());
        };
        if wait <= bound {
            return Ok(());
        }
        let own = work_ahead.time_for(estimated_tokens(texts)).unwrap_or_default();
        if wait <= own * MAX_QUEUE_SLOWDOWN {
            return Ok(());
        }
        Err(Error::ResourceExhausted(format!(
            "server overloaded: about {} ms of model work is queued ahead, more than the {} ms bound \
             (--max-queue-ms) and than {MAX_QUEUE_SLOWDOWN} x this request's own; retry later",
            wait.as_millis(),
            bound.as_millis()
        )))
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

/// A request may wait past the queue-time bound for up to this many times its own
/// model work: its answer then takes at most about this many times longer than on
/// an idle server.
const MAX_QUEUE_SLOWDOWN: u32 = 4;

/// Tokens of `texts` as the admission check guesses them without tokenizing: about
/// four bytes a token in English WordPiece, plus the two special tokens of each.
fn estimated_tokens(texts: &[String]) -> u64 {
    texts.iter().map(|text| text.len() as u64 / 4 + 2).sum()
}

/// Runs one small batch before serving: ONNX Runtime's first run allocates and
/// plans, and costs many times a normal batch. Better at start than in the first
/// caller's latency, or in the speed estimate that admission goes by.
fn warm_up(model: &mut OnnxModel, tokenizer: &TextTokenizer) -> Result<()> {
    let text = tokenizer.tokenize("a short sentence to warm the model up")?;
    model.embed_batch(&[text.ids.as_slice(), text.ids.as_slice()])?;
    Ok(())
}

fn tokenize_all(tokenizer: &TextTokenizer, texts: &[String]) -> Result<Vec<TokenizedText>> {
    texts.iter().map(|text| tokenizer.tokenize(text)).collect()
}
