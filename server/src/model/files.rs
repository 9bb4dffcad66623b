//! Reads a model directory in the usual Hugging Face / sentence-transformers layout:
//! `model.onnx` (or `onnx/model.onnx`), `tokenizer.json`, `config.json`, and where
//! present `sentence_bert_config.json` (max length) and `1_Pooling/config.json`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Pooling;
use crate::error::{Error, Result};

/// The files and settings of one model directory.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// The ONNX graph.
    pub onnx_path: PathBuf,
    /// The Hugging Face tokenizer.
    pub tokenizer_path: PathBuf,
    /// Hidden size, the dimension of token vectors.
    pub hidden_size: usize,
    /// Longest input in tokens: sentence-transformers' max_seq_length, bounded by the
    /// model's position embeddings.
    pub max_input_tokens: usize,
    /// Pooling from 1_Pooling/config.json; mean when absent.
    pub pooling: Pooling,
}

#[derive(Deserialize)]
struct TransformerConfig {
    hidden_size: usize,
    #[serde(default)]
    max_position_embeddings: Option<usize>,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
}

/// Used when neither config file says how long inputs may be: BERT's usual limit.
const FALLBACK_MAX_TOKENS: usize = 512;

impl ModelFiles {
    /// Reads `dir`, failing with a message that names the missing or broken file.
    pub fn read(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Config(format!(
                "model directory {} does not exist (run `make setup`, or pass --model-dir)",
                dir.display()
            )));
        }
        let onnx_path = ["model.onnx", "onnx/model.onnx"]
            .iter()
            .map(|name| dir.join(name))
            .find(|path| path.is_file())
            .ok_or_else(|| Error::Config(format!("no model.onnx in {}", dir.display())))?;
        let tokenizer_path = dir.join("tokenizer.json");
        if !tokenizer_path.is_file() {
            return Err(Error::Config(format!("no tokenizer.json in {}", dir.display())));
        }
        let transformer: TransformerConfig = read_json(&dir.join("config.json"))?
            .ok_or_else(|| Error::Config(format!("no config.json in {}", dir.display())))?;
        let sentence_bert: Option<SentenceBertConfig> = read_json(&dir.join("sentence_bert_config.json"))?;
        let pooling_config: Option<PoolingConfig> = read_json(&dir.join("1_Pooling/config.json"))?;

        let position_limit = transformer.max_position_embeddings.unwrap_or(FALLBACK_MAX_TOKENS);
        let max_input_tokens =
            sentence_bert.and_then(|c| c.max_seq_length).unwrap_or(position_limit).min(position_limit);
        let pooling = match pooling_config {
            Some(c) if c.pooling_mode_cls_token && !c.pooling_mode_mean_tokens => Pooling::Cls,
            _ => Pooling::Mean,
        };
        Ok(ModelFiles { onnx_path, tokenizer_path, hidden_size: transformer.hidden_size, max_input_tokens, pooling })
    }
}

/// Parses an optional JSON file: `Ok(None)` when it does not exist.
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map(Some).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Config(format!("{}: {e}", path.display()))),
    }
}
