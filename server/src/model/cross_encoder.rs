//! The cross-encoder of search's optional rerank stage. It reads the query and one
//! candidate together, `[CLS] query [SEP] passage [SEP]`, so it sees how the two relate
//! where comparing two separately made vectors cannot; it is also one model run per
//! candidate, so it re-scores only a search's top candidates.
//!
//! The model is a BertForSequenceClassification graph as optimum exports it (e.g.
//! `cross-encoder/ms-marco-MiniLM-L-6-v2`): inputs `input_ids`, `attention_mask` and,
//! where the graph takes it, `token_type_ids`; output `logits` [batch, 1].

use std::path::Path;
use std::sync::Arc;

use ort::environment::Environment;
use ort::session::{Session, SessionInputValue};
use tokenizers::{Tokenizer, TruncationParams, TruncationStrategy};

use super::files::ModelFiles;
use super::onnx::{OnnxSettings, attention_mask, check_bert_inputs, open_session, pad_rows, tensor};
use super::precision::{self, CpuInt8, Precision, PrecisionChoice};
use crate::error::{Error, Result};

/// The graph output that holds the scores.
const LOGITS: &str = "logits";

/// One (query, passage) pair as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizedPair {
    /// `[CLS] query [SEP] passage [SEP]` after truncation.
    pub ids: Vec<u32>,
    /// The segment of each token: 0 through the first `[SEP]`, 1 after. BERT adds a
    /// learned vector per segment, which is how it tells the query from the passage.
    pub type_ids: Vec<u32>,
}

/// One loaded cross-encoder. `score` needs `&mut self` because `Session::run` does;
/// [`Reranker`] shares it between concurrent searches.
pub struct CrossEncoder {
    session: Session,
    /// The tokenizer with pair truncation at `max_tokens` and padding off.
    tokenizer: Tokenizer,
    /// Longest pair in tokens, special tokens included.
    max_tokens: usize,
    /// Whether the graph takes `token_type_ids` (BERT does; some exports drop it).
    takes_token_type_ids: bool,
    /// The graph loaded: fp32, or the int8 one beside it.
    precision: Precision,
}

impl CrossEncoder {
    /// Loads `model.onnx` (or `onnx/model.onnx`), `tokenizer.json` and `config.json` from
    /// `model_dir`. Blocking: opening the graph takes a moment.
    /// `choice` picks the graph as for the embedding model, except that a directory
    /// without an int8 graph runs fp32 with a warning instead of refusing to start:
    /// the embedding model's precision is the one `--precision` promises.
    pub fn load(
        environment: &Environment,
        model_dir: &Path,
        settings: OnnxSettings,
        choice: PrecisionChoice,
    ) -> Result<Self> {
        if !model_dir.is_dir() {
            return Err(Error::Config(format!("cross-encoder directory {} does not exist", model_dir.display())));
        }
        // The directory has an embedding model's layout; of the settings read from it only
        // the max length applies: sentence_bert_config.json's if present, else 512, capped
        // by the position embeddings.
        let files = ModelFiles::read(model_dir)?;
        let tokenizer = pair_tokenizer(&files.tokenizer_path, files.max_input_tokens)?;
        let chosen =
            precision::resolve(choice, model_dir, &files.onnx_path, CpuInt8::detect()).unwrap_or_else(|missing| {
                tracing::warn!(%missing, "the cross-encoder runs at fp32");
                precision::Resolved {
                    precision: Precision::Fp32,
                    graph: files.onnx_path.clone(),
                    reason: missing.to_string(),
                }
            });
        let session = open_session(environment, &chosen.graph, settings)?;
        let takes_token_type_ids = check_bert_inputs(&session, &chosen.graph)?;
        check_logits_output(&session, &chosen.graph)?;
        Ok(CrossEncoder {
            session,
            tokenizer,
            max_tokens: files.max_input_tokens,
            takes_token_type_ids,
            precision: chosen.precision,
        })
    }

    /// The graph's precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Longest pair in tokens, special tokens included.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The pair as the model sees it, cut to `max_tokens` longest-first: tokens come off
    /// the end of whichever text is longer, so a short query survives whole and a long
    /// passage loses its tail, as sentence-transformers' CrossEncoder cuts.
    pub fn tokenize(&self, query: &str, passage: &str) -> Result<TokenizedPair> {
        // encode_fast skips character offsets, which scoring never needs.
        let encoding = self
            .tokenizer
            .encode_fast((query, passage), true)
            .map_err(|e| Error::Model(format!("tokenizer failed: {e}")))?;
        Ok(TokenizedPair { ids: encoding.get_ids().to_vec(), type_ids: encoding.get_type_ids().to_vec() })
    }

    /// Scores each passage against `query` in one batch padded to the longest pair: the
    /// raw logit, higher is more relevant, in the passages' order. The caller bounds the
    /// number of passages (the batch's memory grows with it).
    pub fn score(&mut self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
        if passages.is_empty() {
            return Ok(Vec::new());
        }
        let pairs = passages.iter().map(|passage| self.tokenize(query, passage)).collect::<Result<Vec<_>>>()?;
        let ids: Vec<&[u32]> = pairs.iter().map(|pair| pair.ids.as_slice()).collect();
        let rows = ids.len();
        let seq_len = ids.iter().map(|ids| ids.len()).max().unwrap_or(0);
        let shape = [rows as i64, seq_len as i64];
        let mut inputs: Vec<(&str, SessionInputValue)> = vec![
            ("input_ids", tensor(shape, pad_rows(&ids, seq_len))?.into()),
            ("attention_mask", tensor(shape, attention_mask(&ids, seq_len))?.into()),
        ];
        if self.takes_token_type_ids {
            let type_ids: Vec<&[u32]> = pairs.iter().map(|pair| pair.type_ids.as_slice()).collect();
            inputs.push(("token_type_ids", tensor(shape, pad_rows(&type_ids, seq_len))?.into()));
        }
        let outputs = self.session.run(inputs).map_err(|e| Error::Model(e.to_string()))?;
        let (shape, logits) =
            outputs[LOGITS].try_extract_tensor::<f32>().map_err(|e| Error::Model(format!("output {LOGITS}: {e}")))?;
        relevance(shape, logits, rows)
    }
}

/// The cross-encoder shared by concurrent searches, one batch at a time (ONNX Runtime
/// already spreads a batch over its intra-op threads). Callers wait their turn on an
/// async lock, so waiting holds no thread; the run itself goes to the blocking pool,
/// off the async runtime. Cloning is cheap and shares the model.
#[derive(Clone)]
pub struct Reranker {
    encoder: Arc<tokio::sync::Mutex<CrossEncoder>>,
    /// Copied out of the encoder so reading it never waits for the lock.
    max_tokens: usize,
}

impl Reranker {
    /// Shares `encoder`.
    pub fn new(encoder: CrossEncoder) -> Self {
        let max_tokens = encoder.max_tokens();
        Reranker { encoder: Arc::new(tokio::sync::Mutex::new(encoder)), max_tokens }
    }

    /// Longest (query, candidate) pair in tokens; longer pairs are cut.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Scores each candidate against `query`, in the candidates' order (higher is more
    /// relevant): see [`CrossEncoder::score`]. If the caller goes away while the model
    /// runs, the run still finishes and its result is dropped.
    pub async fn rerank<S: AsRef<str>>(&self, query: &str, candidates: &[S]) -> Result<Vec<f32>> {
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let query = query.to_owned();
        let candidates: Vec<String> = candidates.iter().map(|c| c.as_ref().to_owned()).collect();
        let mut encoder = self.encoder.clone().lock_owned().await;
        tokio::task::spawn_blocking(move || {
            let passages: Vec<&str> = candidates.iter().map(String::as_str).collect();
            encoder.score(&query, &passages)
        })
        .await
        .map_err(|e| Error::Model(format!("reranker task: {e}")))?
    }
}

/// The tokenizer.json at `path` set up for pairs: truncation longest-first at
/// `max_tokens` (the tokenizers default, named because the query's survival depends on
/// it) and no padding (`score` pads to the longest pair of each batch). Many
/// tokenizer.json files pad and truncate to a fixed 128; both settings are replaced.
fn pair_tokenizer(path: &Path, max_tokens: usize) -> Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_file(path).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
    tokenizer.with_padding(None);
    let truncation =
        TruncationParams { max_length: max_tokens, strategy: TruncationStrategy::LongestFirst, ..Default::default() };
    tokenizer
        .with_truncation(Some(truncation))
        .map_err(|e| Error::Config(format!("{}: truncation at {max_tokens}: {e}", path.display())))?;
    Ok(tokenizer)
}

/// Fails at load, rather than on the first search, unless the graph outputs `logits`
/// with one or two labels per row (as far as the graph declares its shape).
fn check_logits_output(session: &Session, path: &Path) -> Result<()> {
    let names: Vec<&str> = session.outputs().iter().map(|o| o.name()).collect();
    let logits = session.outputs().iter().find(|o| o.name() == LOGITS).ok_or_else(|| {
        Error::Config(format!("{}: no `{LOGITS}` output (outputs: {names:?}); is it a cross-encoder?", path.display()))
    })?;
    match logits.dtype().tensor_shape().map(|shape| &shape[..]) {
        Some([_, -1 | 1 | 2]) => Ok(()),
        shape => Err(Error::Config(format!(
            "{}: output `{LOGITS}` has shape {shape:?}, expected [batch, 1] or [batch, 2]",
            path.display()
        ))),
    }
}

/// One score per row from logits [rows, labels]. One label is the relevance logit. Two
/// labels are (not relevant, relevant): their difference is the log-odds of relevant,
/// which orders rows as the softmax probability of relevant does (the relevant logit
/// alone need not).
fn relevance(shape: &[i64], logits: &[f32], rows: usize) -> Result<Vec<f32>> {
    match *shape {
        [r, 1] if r as usize == rows && logits.len() == rows => Ok(logits.to_vec()),
        [r, 2] if r as usize == rows && logits.len() == 2 * rows => {
            Ok(logits.chunks_exact(2).map(|row| row[1] - row[0]).collect())
        }
        _ => Err(Error::Model(format!("output {LOGITS} has shape {shape:?}, expected [{rows}, 1] or [{rows}, 2]"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_label_is_the_score_and_two_labels_give_the_log_odds_of_relevant() {
        assert_eq!(relevance(&[3, 1], &[0.5, -1.0, 2.0], 3).unwrap(), vec![0.5, -1.0, 2.0]);
        assert_eq!(relevance(&[2, 2], &[1.0, 3.0, 0.5, -0.5], 2).unwrap(), vec![2.0, -1.0]);
    }

    #[test]
    fn other_shapes_are_a_model_failure() {
        for (shape, logits) in [(&[2, 3][..], &[0.0; 6][..]), (&[3, 1], &[0.0; 3]), (&[2], &[0.0; 2])] {
            assert!(matches!(relevance(shape, logits, 2), Err(Error::Model(_))), "{shape:?}");
        }
    }
}
