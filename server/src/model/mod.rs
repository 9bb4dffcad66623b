//! The models: the embedding model (its files, its tokenizer, and the ways to run it)
//! and the cross-encoder that re-scores search candidates.
//!
//! # Layout
//! - [`files`]: reads a model directory (config files, pooling, max length).
//! - [`tokenizer`]: texts to token ids with sentence-transformers' truncation.
//! - [`onnx`]: runs a batch through ONNX Runtime and pools token vectors.
//! - [`arena_shrink`]: when a run hands ONNX Runtime's arena memory back.
//! - [`pooling`]: mean / CLS pooling and L2 normalization.
//! - [`pseudo`]: deterministic hash vectors for the pseudo backend.
//! - [`cross_encoder`]: scores (query, text) pairs for the rerank service.
//! - [`pair_tokenizer`]: (query, text) pairs to token ids, cut to the model's limit.
//! - [`precision`]: fp32 or the int8 graph beside it (`--precision`).

pub mod arena_shrink;
pub mod cross_encoder;
pub mod files;
pub mod onnx;
pub mod pair_tokenizer;
pub mod pooling;
pub mod precision;
pub mod pseudo;
pub mod shared_weights;
pub mod tokenizer;

pub use pooling::Pooling;
pub use precision::Precision;

/// What clients are told about the served model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// The model id, e.g. `sentence-transformers/all-MiniLM-L6-v2`.
    pub model_id: String,
    /// Dimensions of a vector.
    pub dim: usize,
    /// Longest input in tokens, special tokens included.
    pub max_input_tokens: usize,
    /// How token vectors are pooled.
    pub pooling: Pooling,
    /// The precision the model runs at.
    pub precision: Precision,
}

/// One text as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizedText {
    /// Token ids after truncation, special tokens included.
    pub ids: Vec<u32>,
    /// Whether the text was longer than the model's limit and got cut.
    pub truncated: bool,
    /// Token count before truncation.
    pub untruncated_count: usize,
}
