//! (query, text) pairs to token ids for the cross-encoder: `[CLS] query [SEP] text
//! [SEP]`, cut longest-first to the model's limit from the end a request chooses.

use std::path::Path;

use tokenizers::{Tokenizer, TruncationDirection as Cut, TruncationParams, TruncationStrategy};

use crate::batcher::BatchInput;
use crate::error::{Error, Result};

/// One (query, text) pair as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizedPair {
    /// `[CLS] query [SEP] text [SEP]` after truncation.
    pub ids: Vec<u32>,
    /// The segment of each token: 0 through the first `[SEP]`, 1 after. BERT adds a
    /// learned vector per segment, which is how it tells the query from the text.
    /// Kept beside the ids rather than re-derived from the first `[SEP]`: a query
    /// that contains the text "[SEP]" would move that border.
    pub type_ids: Vec<u32>,
    /// Whether the pair was longer than the model's limit and got cut.
    pub truncated: bool,
}

impl BatchInput for TokenizedPair {
    fn token_count(&self) -> usize {
        self.ids.len()
    }
}

/// Which end of an over-long pair loses tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TruncationSide {
    /// The end (sentence-transformers' CrossEncoder cuts here).
    #[default]
    Right,
    /// The start.
    Left,
}

/// A tokenizer.json set up for pairs, once per truncation side (the side is part of
/// a tokenizer's settings, and requests pick it per call).
pub struct PairTokenizer {
    cut_right: Tokenizer,
    cut_left: Tokenizer,
    /// For texts alone: token offsets, untruncated.
    untruncated: Tokenizer,
    /// Longest pair in tokens, special tokens included.
    max_tokens: usize,
}

impl PairTokenizer {
    /// Loads `path` with truncation longest-first at `max_tokens` (the tokenizers
    /// default, named because the query's survival depends on it: tokens come off
    /// whichever of the two is longer, so a short query survives whole) and no
    /// padding (the model pads each batch to its longest pair). Many tokenizer.json
    /// files pad and truncate to a fixed 128; both settings are replaced.
    pub fn from_file(path: &Path, max_tokens: usize) -> Result<Self> {
        let mut base = Tokenizer::from_file(path).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        base.with_padding(None);
        let with_cut = |direction: Cut| -> Result<Tokenizer> {
            let mut tokenizer = base.clone();
            let truncation = TruncationParams {
                max_length: max_tokens,
                strategy: TruncationStrategy::LongestFirst,
                direction,
                ..Default::default()
            };
            tokenizer
                .with_truncation(Some(truncation))
                .map_err(|e| Error::Config(format!("{}: truncation at {max_tokens}: {e}", path.display())))?;
            Ok(tokenizer)
        };
        let (cut_right, cut_left) = (with_cut(Cut::Right)?, with_cut(Cut::Left)?);
        let mut untruncated = base;
        untruncated.with_truncation(None).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        Ok(PairTokenizer { cut_right, cut_left, untruncated, max_tokens })
    }

    /// Longest pair in tokens, special tokens included.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The pair as the model sees it, cut to `max_tokens` from `side`.
    pub fn tokenize(&self, query: &str, text: &str, side: TruncationSide) -> Result<TokenizedPair> {
        let tokenizer = match side {
            TruncationSide::Right => &self.cut_right,
            TruncationSide::Left => &self.cut_left,
        };
        // encode_fast skips character offsets, which scoring never needs.
        let encoding =
            tokenizer.encode_fast((query, text), true).map_err(|e| Error::Model(format!("tokenizer failed: {e}")))?;
        Ok(TokenizedPair {
            ids: encoding.get_ids().to_vec(),
            type_ids: encoding.get_type_ids().to_vec(),
            truncated: !encoding.get_overflowing().is_empty(),
        })
    }

    /// `text` alone, untruncated and without special tokens: its token count and
    /// byte offsets, to cut a text to a number of tokens before it is paired.
    pub fn text_offsets(&self, text: &str) -> Result<Vec<(usize, usize)>> {
        let encoding =
            self.untruncated.encode(text, false).map_err(|e| Error::Model(format!("tokenizer failed: {e}")))?;
        Ok(encoding.get_offsets().to_vec())
    }
}
