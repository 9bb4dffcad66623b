//! Texts to token ids, the way sentence-transformers tokenizes: truncation at the
//! model's max_seq_length and no padding (the batcher pads to the longest input of
//! each batch). Many tokenizer.json files pad and truncate to a fixed 128; both
//! settings are replaced here.

use std::path::Path;

use tokenizers::{Encoding, Tokenizer, TruncationParams};

use super::TokenizedText;
use crate::error::{Error, Result};

/// A Hugging Face tokenizer set up for embedding.
pub struct TextTokenizer {
    /// The tokenizer with truncation at `max_tokens` and padding off.
    inner: Tokenizer,
    /// The same without truncation, to find chunk borders in long documents.
    untruncated: Tokenizer,
    /// Longest output in tokens, special tokens included.
    max_tokens: usize,
}

impl TextTokenizer {
    /// Loads `tokenizer.json` and truncates at `max_tokens`.
    pub fn from_file(path: &Path, max_tokens: usize) -> Result<Self> {
        let mut inner = Tokenizer::from_file(path).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        inner.with_padding(None);
        let mut untruncated = inner.clone();
        untruncated
            .with_truncation(None)
            .map_err(|e| Error::Config(format!("{}: no truncation: {e}", path.display())))?;
        inner
            .with_truncation(Some(TruncationParams { max_length: max_tokens, ..Default::default() }))
            .map_err(|e| Error::Config(format!("{}: truncation at {max_tokens}: {e}", path.display())))?;
        Ok(TextTokenizer { inner, untruncated, max_tokens })
    }

    /// Longest output in tokens.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Tokenizes one text, special tokens included.
    pub fn tokenize(&self, text: &str) -> Result<TokenizedText> {
        // encode_fast skips character offsets, which embedding never needs.
        let encoding =
            self.inner.encode_fast(text, true).map_err(|e| Error::Model(format!("tokenizer failed: {e}")))?;
        let overflow = encoding.get_overflowing();
        let untruncated_count = encoding.len() + overflow.iter().map(content_tokens).sum::<usize>();
        Ok(TokenizedText { ids: encoding.get_ids().to_vec(), truncated: !overflow.is_empty(), untruncated_count })
    }
}

impl TextTokenizer {
    /// Byte offsets of every token of `text` (no special tokens, no truncation).
    pub fn token_offsets(&self, text: &str) -> Result<Vec<(usize, usize)>> {
        let encoding =
            self.untruncated.encode(text, false).map_err(|e| Error::Model(format!("tokenizer failed: {e}")))?;
        Ok(encoding.get_offsets().to_vec())
    }
}

/// Tokens of an overflow piece that came from the text (its special tokens are
/// added again to every piece).
fn content_tokens(piece: &Encoding) -> usize {
    piece.get_special_tokens_mask().iter().filter(|&&special| special == 0).count()
}
