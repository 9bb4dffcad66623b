//! The three ways texts become vectors, behind one enum so the engine does not care.
//!
//! # Layout
//! - [`local`]: the ONNX model in-process: tokenizer + dynamic batcher + model thread.
//! - [`remote`]: forwards to other embedwire-server processes over gRPC.
//! - pseudo: hash vectors, handled inline here (no state beyond its settings).

pub mod local;
pub mod remote;

use crate::batcher::{BatchTiming, Priority};
use crate::corpus::chunker::word_offsets;
use crate::error::{Error, Result};
use crate::model::pseudo::PseudoModel;
use crate::model::{ModelInfo, TokenizedText};

pub use local::LocalBackend;
pub use remote::RemoteBackend;

/// Vectors as a backend returns them: pooled, not normalized, full dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEmbeddings {
    /// `token_counts.len() * dim` values, row-major.
    pub values: Vec<f32>,
    /// Tokens of each input after truncation, special tokens included.
    pub token_counts: Vec<u32>,
    /// Queue and model time (zero where there is no queue: pseudo, remote).
    pub timing: BatchTiming,
}

/// A loaded backend.
pub enum Backend {
    /// The ONNX model, batched.
    Local(LocalBackend),
    /// Hash vectors.
    Pseudo { model: PseudoModel, info: ModelInfo },
    /// Other servers.
    Remote(RemoteBackend),
}

impl Backend {
    /// What clients are told about the model.
    pub fn info(&self) -> &ModelInfo {
        match self {
            Backend::Local(local) => local.info(),
            Backend::Pseudo { info, .. } => info,
            Backend::Remote(remote) => remote.info(),
        }
    }

    /// Embeds `texts`. With `truncate` false, an input over the model's limit fails
    /// the call with INVALID_ARGUMENT naming its index.
    pub async fn embed(&self, texts: Vec<String>, truncate: bool, priority: Priority) -> Result<RawEmbeddings> {
        match self {
            Backend::Local(local) => local.embed(texts, truncate, priority).await,
            Backend::Pseudo { model, info } => {
                let tokenized: Vec<TokenizedText> = texts.iter().map(|t| model.tokenize(t)).collect();
                check_truncation(&tokenized, truncate, info.max_input_tokens)?;
                let mut values = vec![0.0; texts.len() * info.dim];
                for (text, row) in texts.iter().zip(values.chunks_exact_mut(info.dim)) {
                    model.embed_one(text, row);
                }
                Ok(RawEmbeddings { values, token_counts: token_counts(&tokenized), timing: BatchTiming::default() })
            }
            Backend::Remote(remote) => remote.embed(texts, truncate).await,
        }
    }

    /// Units to chunk `text` by, as byte ranges, and how many units make a token:
    /// the model's own tokens when the tokenizer is here, words otherwise (a remote
    /// model's tokens are unknown here; English averages about 0.75 words a token).
    pub fn chunking_units(&self, text: &str) -> Result<(Vec<(usize, usize)>, f32)> {
        match self {
            Backend::Local(local) => Ok((local.token_offsets(text)?, 1.0)),
            Backend::Pseudo { .. } => Ok((word_offsets(text), 1.0)),
            Backend::Remote(_) => Ok((word_offsets(text), 0.75)),
        }
    }

    /// The model's tokenization of each text.
    pub async fn tokenize(&self, texts: Vec<String>, truncate: bool) -> Result<Vec<TokenizedText>> {
        let tokenized = match self {
            Backend::Local(local) => local.tokenize(&texts)?,
            Backend::Pseudo { model, .. } => texts.iter().map(|t| model.tokenize(t)).collect(),
            Backend::Remote(remote) => return remote.tokenize(texts, truncate).await,
        };
        check_truncation(&tokenized, truncate, self.info().max_input_tokens)?;
        Ok(tokenized)
    }
}

/// With truncation off, fails on the first input that had to be cut.
pub fn check_truncation(tokenized: &[TokenizedText], truncate: bool, max_tokens: usize) -> Result<()> {
    if truncate {
        return Ok(());
    }
    match tokenized.iter().position(|t| t.truncated) {
        Some(index) => Err(Error::invalid(
            format!("inputs[{index}]"),
            format!(
                "has {} tokens, more than the model's limit of {max_tokens}; shorten it or set truncate",
                tokenized[index].untruncated_count
            ),
        )),
        None => Ok(()),
    }
}

/// The token count of each tokenized input.
pub fn token_counts(tokenized: &[TokenizedText]) -> Vec<u32> {
    tokenized.iter().map(|t| t.ids.len() as u32).collect()
}
