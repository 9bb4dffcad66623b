//! The cross-encoder that reranks: it reads the query and one text together,
//! `[CLS] query [SEP] text [SEP]`, so it sees how the two relate where comparing two
//! separately made vectors cannot; it is also one model run per text, so it scores a
//! request's candidates, not a corpus.
//!
//! The model is a BertForSequenceClassification graph as optimum (or
//! scripts/model/build_onnx.py) exports it (e.g. `cross-encoder/ms-marco-MiniLM-L-6-v2`):
//! inputs `input_ids`, `attention_mask` and, where the graph takes it, `token_type_ids`;
//! output `logits` [batch, 1] (or [batch, 2]). It runs on its own model thread behind a
//! [`crate::batcher::TokenBudgetBatcher`], like the embedding model: pairs from
//! concurrent requests share batches.

use std::path::Path;

use ort::environment::Environment;
use ort::session::{Session, SessionInputValue};

use super::files::ModelFiles;
use super::onnx::{OnnxSettings, attention_mask, check_bert_inputs, open_session, pad_rows, tensor};
use super::pair_tokenizer::{PairTokenizer, TokenizedPair};
use super::precision::{self, CpuInt8, Precision, PrecisionChoice};
use crate::batcher::BatchModel;
use crate::error::{Error, Result};

/// The graph output that holds the scores.
const LOGITS: &str = "logits";

/// One loaded cross-encoder graph. Owned by its model thread: `Session::run` needs
/// `&mut self`, and one batch at a time is what the CPU can do.
pub struct CrossEncoder {
    session: Session,
    /// Whether the graph takes `token_type_ids` (BERT does; some exports drop it).
    takes_token_type_ids: bool,
}

/// What loading a cross-encoder directory yields: the graph for the model thread and
/// the tokenizer for the request path.
pub struct LoadedCrossEncoder {
    pub model: CrossEncoder,
    pub tokenizer: PairTokenizer,
    /// The graph loaded: fp32, or the int8 one beside it.
    pub precision: Precision,
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
    ) -> Result<LoadedCrossEncoder> {
        if !model_dir.is_dir() {
            return Err(Error::Config(format!("cross-encoder directory {} does not exist", model_dir.display())));
        }
        // The directory has an embedding model's layout; of the settings read from it only
        // the max length applies: sentence_bert_config.json's if present, else 512, capped
        // by the position embeddings.
        let files = ModelFiles::read(model_dir)?;
        let tokenizer = PairTokenizer::from_file(&files.tokenizer_path, files.max_input_tokens)?;
        let chosen =
            precision::resolve(choice, model_dir, &files.onnx_path, CpuInt8::detect()).unwrap_or_else(|missing| {
                tracing::warn!(%missing, "the cross-encoder runs at fp32");
                precision::Resolved {
                    precision: Precision::Fp32,
                    graph: files.onnx_path.clone(),
                    reason: missing.to_string(),
                }
            });
        let session = open_session(environment, &chosen.graph, settings, None)?;
        let takes_token_type_ids = check_bert_inputs(&session, &chosen.graph)?;
        check_logits_output(&session, &chosen.graph)?;
        Ok(LoadedCrossEncoder {
            model: CrossEncoder { session, takes_token_type_ids },
            tokenizer,
            precision: chosen.precision,
        })
    }

    /// Scores `pairs` in one batch padded to the longest: the relevance logit of each
    /// (higher is more relevant), in order.
    pub fn score(&mut self, pairs: &[&TokenizedPair]) -> Result<Vec<f32>> {
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
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

impl BatchModel for CrossEncoder {
    type Input = TokenizedPair;
    const THREAD_NAME: &'static str = "embedwire-rerank";

    fn dim(&self) -> usize {
        1
    }

    fn run_batch(&mut self, batch: &[&TokenizedPair]) -> Result<Vec<f32>> {
        self.score(batch)
    }
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
