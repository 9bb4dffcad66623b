//! The bi-encoder scorer: the query and every text embedded by the served embedding
//! model (normalized), each text scored by its vector's cosine similarity to the
//! query's. What a server without a cross-encoder reranks with: weaker than a
//! cross-encoder (the two texts are never read together), but it needs no second
//! model, and its scores are exactly those of the embed API's vectors.

use std::sync::Arc;

use super::{RerankOptions, Scores, keep_units, rename_inputs};
use crate::engine::{EmbedOptions, EmbeddingEngine};
use crate::error::Result;
use crate::model::pair_tokenizer::TruncationSide;

/// Scores through the embedding engine (local, pseudo or remote backend alike).
pub struct BiEncoderScorer {
    engine: Arc<EmbeddingEngine>,
}

impl BiEncoderScorer {
    /// A scorer over `engine`.
    pub fn new(engine: Arc<EmbeddingEngine>) -> Self {
        BiEncoderScorer { engine }
    }

    /// The embedding model's id.
    pub fn model_id(&self) -> String {
        self.engine.info().map(|info| info.model_id.clone()).unwrap_or_default()
    }

    /// One cosine per text. The query and the texts go to the engine as one call:
    /// they share its batches and it is admitted once (two calls at once would see
    /// each other as queued work); an error names the caller's field (`query`,
    /// `texts[i]`).
    pub async fn score(&self, query: &str, texts: &[String], options: RerankOptions) -> Result<Scores> {
        let mut inputs = Vec::with_capacity(texts.len() + 1);
        inputs.push(query.to_string());
        inputs.extend(self.cut_texts(texts, options)?);
        let embed = EmbedOptions { truncate: options.truncate, priority: options.priority, ..EmbedOptions::default() };
        let embedded = self.engine.embed(inputs, embed).await.map_err(|error| {
            rename_inputs(error, |i| if i == 0 { "query".to_string() } else { format!("texts[{}]", i - 1) })
        })?;
        let mut rows = embedded.values.chunks_exact(embedded.dim);
        let query_vector = rows.next().expect("one row per input");
        Ok(Scores {
            values: rows.map(|row| dot(row, query_vector)).collect(),
            tokens: embedded.token_counts.iter().map(|&n| u64::from(n)).sum(),
            // Tokenizing happens inside the embedding engine, counted in its timing.
            tokenization: Default::default(),
            timing: embedded.timing,
        })
    }

    /// The texts as the model should read them: cut to `max_tokens_per_text`, and,
    /// when cut from the left, to the model's limit (the embedding tokenizer itself
    /// only cuts from the right).
    fn cut_texts(&self, texts: &[String], options: RerankOptions) -> Result<Vec<String>> {
        let model_limit = self.engine.info()?.max_input_tokens.saturating_sub(2);
        let left_cut = options.truncate && options.side == TruncationSide::Left;
        let keep_tokens = match (options.max_tokens_per_text, left_cut) {
            (Some(n), true) => n.min(model_limit),
            (Some(n), false) => n,
            (None, true) => model_limit,
            (None, false) => return Ok(texts.to_vec()),
        };
        texts
            .iter()
            .map(|text| {
                let (units, units_per_token) = self.engine.chunking_units(text)?;
                let keep = ((keep_tokens as f32) * units_per_token).floor().max(1.0) as usize;
                Ok(keep_units(text, &units, keep, options.side).to_string())
            })
            .collect()
    }
}

/// The dot product; the cosine for normalized vectors.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
