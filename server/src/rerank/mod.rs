//! Reranking: orders candidate texts by their relevance to a query. The engine
//! validates and admits a call, has its scorer score every (query, text) pair, and
//! sorts; the scorer is the cross-encoder when the server has one, else the embedding
//! model (cosine similarity of the query's and each text's vectors). Callers never
//! match on which one runs: every answer names it.
//!
//! # Layout
//! - [`cross`]: the cross-encoder scorer: pair tokenizer + dynamic batcher + model
//!   thread, with admission by calls in flight.
//! - [`bi`]: the bi-encoder scorer over the embedding engine.
//! - [`stats`]: rerank counters and histograms for `/metrics`.

pub mod bi;
pub mod cross;
pub mod stats;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admission::InFlightLimiter;
use crate::batcher::{BatchTiming, Priority};
use crate::error::{Error, Result};
use crate::model::pair_tokenizer::TruncationSide;

pub use bi::BiEncoderScorer;
pub use cross::CrossEncoderScorer;
pub use stats::RerankStats;

/// Bounds on one call.
#[derive(Debug, Clone, Copy)]
pub struct RerankLimits {
    /// Most texts in one call (`--max-rerank-texts`).
    pub max_texts: usize,
    /// Longest query or text in characters (`--max-input-chars`).
    pub max_input_chars: usize,
    /// Pairs admitted (queued or running) at once (`--max-in-flight-inputs`).
    pub max_in_flight_pairs: usize,
}

/// Per-call options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RerankOptions {
    /// Keep only the n best; None keeps all.
    pub top_n: Option<usize>,
    /// The cross-encoder's logit instead of its sigmoid.
    pub raw_scores: bool,
    /// Cut over-long pairs instead of failing.
    pub truncate: bool,
    /// Which end loses tokens when cut.
    pub side: TruncationSide,
    /// Cut each text to this many tokens before pairing.
    pub max_tokens_per_text: Option<usize>,
    /// Interactive (a unary call: admitted under the load bound) or bulk (a stream's
    /// requests: never refused for load, paced by flow control).
    pub priority: Priority,
}

impl Default for RerankOptions {
    fn default() -> Self {
        RerankOptions {
            top_n: None,
            raw_scores: false,
            truncate: true,
            side: TruncationSide::Right,
            max_tokens_per_text: None,
            priority: Priority::Interactive,
        }
    }
}

/// One text's place in an answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    /// Its position in the call's texts.
    pub index: usize,
    /// Its relevance; higher is more relevant.
    pub score: f32,
}

/// A call's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reranked {
    /// Best first; `top_n` of them when set.
    pub ranks: Vec<Ranked>,
    /// `cross-encoder:<id>` or `bi-encoder:<id>`.
    pub scorer: String,
    /// The scorer's model id.
    pub model_id: String,
    /// Tokens the model read, special tokens included.
    pub tokens: u64,
    /// Characters scored, query and texts.
    pub chars: u64,
    /// Time spent tokenizing.
    pub tokenization: Duration,
    /// Queue and model time.
    pub timing: BatchTiming,
}

/// What a scorer returns: one score per text, in the texts' order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scores {
    /// The relevance of each text: a logit (cross-encoder) or a cosine (bi-encoder).
    pub values: Vec<f32>,
    /// Tokens the model read.
    pub tokens: u64,
    /// Time spent tokenizing on the request path.
    pub tokenization: Duration,
    /// Queue and model time.
    pub timing: BatchTiming,
}

/// What scores the pairs; chosen once at start from `--rerank-model-dir`.
pub enum Scorer {
    /// A cross-encoder on its own model thread.
    Cross(CrossEncoderScorer),
    /// The embedding model's cosine similarity.
    Bi(BiEncoderScorer),
}

impl Scorer {
    /// `cross-encoder:<id>` or `bi-encoder:<id>`, as Info and answers name it.
    pub fn name(&self) -> String {
        match self {
            Scorer::Cross(cross) => format!("cross-encoder:{}", cross.model_id()),
            Scorer::Bi(bi) => format!("bi-encoder:{}", bi.model_id()),
        }
    }

    fn model_id(&self) -> String {
        match self {
            Scorer::Cross(cross) => cross.model_id().to_string(),
            Scorer::Bi(bi) => bi.model_id(),
        }
    }

    async fn score(&self, query: &str, texts: &[String], options: RerankOptions) -> Result<Scores> {
        match self {
            Scorer::Cross(cross) => cross.score(query, texts, options).await,
            Scorer::Bi(bi) => bi.score(query, texts, options).await,
        }
    }
}

/// Validation, admission, scoring and ordering.
pub struct RerankEngine {
    scorer: Scorer,
    admission: InFlightLimiter,
    limits: RerankLimits,
    stats: Arc<RerankStats>,
}

impl RerankEngine {
    /// An engine over `scorer`.
    pub fn new(scorer: Scorer, limits: RerankLimits, stats: Arc<RerankStats>) -> Self {
        RerankEngine { admission: InFlightLimiter::new(limits.max_in_flight_pairs), scorer, limits, stats }
    }

    /// `cross-encoder:<id>` or `bi-encoder:<id>`.
    pub fn scorer_name(&self) -> String {
        self.scorer.name()
    }

    /// Whether a cross-encoder scores (search reranks by default only then: a
    /// bi-encoder rerank of a vector search repeats the search's own scores).
    pub fn has_cross_encoder(&self) -> bool {
        matches!(self.scorer, Scorer::Cross(_))
    }

    /// The limits.
    pub fn limits(&self) -> RerankLimits {
        self.limits
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<RerankStats> {
        &self.stats
    }

    /// Scores every text of `texts` against `query` and orders them best first.
    pub async fn rerank(&self, query: &str, texts: &[String], options: RerankOptions) -> Result<Reranked> {
        let started = Instant::now();
        RerankStats::add(&self.stats.requests, 1);
        self.check(query, texts, options)?;
        let _admission = self.admission.try_admit(texts.len()).inspect_err(|_| {
            RerankStats::add(&self.stats.rejected_overload, 1);
        })?;
        let scores = self.scorer.score(query, texts, options).await.inspect_err(|error| {
            if matches!(error, Error::Overloaded { .. }) {
                RerankStats::add(&self.stats.rejected_overload, 1);
            }
        })?;
        let calibrated = !options.raw_scores && self.has_cross_encoder();
        let ranks = rank(&scores.values, options.top_n, calibrated);
        RerankStats::add(&self.stats.pairs, texts.len() as u64);
        self.stats.pairs_per_request.observe(texts.len() as f64);
        self.stats.request_seconds.observe(started.elapsed().as_secs_f64());
        let chars =
            (query.chars().count() * texts.len() + texts.iter().map(|t| t.chars().count()).sum::<usize>()) as u64;
        Ok(Reranked {
            ranks,
            scorer: self.scorer.name(),
            model_id: self.scorer.model_id(),
            tokens: scores.tokens,
            chars,
            tokenization: scores.tokenization,
            timing: scores.timing,
        })
    }

    /// Count and size checks that need no model.
    fn check(&self, query: &str, texts: &[String], options: RerankOptions) -> Result<()> {
        if query.trim().is_empty() {
            return Err(Error::invalid("query", "is empty"));
        }
        if texts.is_empty() {
            return Err(Error::invalid("texts", "must contain at least one text"));
        }
        if texts.len() > self.limits.max_texts {
            return Err(Error::OutOfRange(format!(
                "texts: has {} texts, more than the limit of {} per request (--max-rerank-texts)",
                texts.len(),
                self.limits.max_texts
            )));
        }
        let max_chars = self.limits.max_input_chars;
        let too_long = |text: &str| text.len() > max_chars && text.chars().count() > max_chars;
        if too_long(query) {
            return Err(Error::invalid("query", format!("is longer than the limit of {max_chars} characters")));
        }
        for (index, text) in texts.iter().enumerate() {
            if text.trim().is_empty() {
                return Err(Error::invalid(format!("texts[{index}]"), "is empty"));
            }
            if too_long(text) {
                return Err(Error::invalid(
                    format!("texts[{index}]"),
                    format!("is longer than the limit of {max_chars} characters"),
                ));
            }
        }
        if options.max_tokens_per_text == Some(0) {
            return Err(Error::invalid("max_tokens_per_text", "must be at least 1 when set"));
        }
        Ok(())
    }
}

/// Texts best first (ties in input order), cut to `top_n`; `calibrated` turns logits
/// into probabilities with the sigmoid.
fn rank(scores: &[f32], top_n: Option<usize>, calibrated: bool) -> Vec<Ranked> {
    let mut ranks: Vec<Ranked> = scores
        .iter()
        .enumerate()
        .map(|(index, &score)| Ranked { index, score: if calibrated { sigmoid(score) } else { score } })
        .collect();
    // Sorting the logits, not the sigmoids: two large logits can round to the same
    // probability and must still keep their order.
    ranks.sort_by(|a, b| scores[b.index].total_cmp(&scores[a.index]).then(a.index.cmp(&b.index)));
    if let Some(n) = top_n.filter(|&n| n > 0) {
        ranks.truncate(n);
    }
    ranks
}

fn sigmoid(logit: f32) -> f32 {
    1.0 / (1.0 + (-logit).exp())
}

/// Renames an INVALID_ARGUMENT about `inputs[i]` (the embedding engine's field) to
/// `name(i)`; other errors pass unchanged.
fn rename_inputs(error: Error, name: impl Fn(usize) -> String) -> Error {
    let Error::InvalidArgument(message) = &error else { return error };
    let Some(rest) = message.strip_prefix("inputs[") else { return error };
    let Some((index, tail)) = rest.split_once(']') else { return error };
    match index.parse::<usize>() {
        Ok(index) => Error::InvalidArgument(format!("{}{tail}", name(index))),
        Err(_) => error,
    }
}

/// `text` cut to its first (or, from the left, last) `keep` units, given its units'
/// byte offsets; whole when it has no more.
fn keep_units<'a>(text: &'a str, offsets: &[(usize, usize)], keep: usize, side: TruncationSide) -> &'a str {
    if offsets.len() <= keep {
        return text;
    }
    match side {
        TruncationSide::Right => &text[..offsets[keep].0],
        TruncationSide::Left => &text[offsets[offsets.len() - keep].0..],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_best_first_with_ties_in_input_order_and_cut_to_top_n() {
        let ranks = rank(&[0.5, 2.0, 0.5, -1.0], None, false);
        let order: Vec<usize> = ranks.iter().map(|r| r.index).collect();
        assert_eq!(order, vec![1, 0, 2, 3]);
        assert_eq!(rank(&[0.5, 2.0, 0.5], Some(2), false).len(), 2);
        assert_eq!(rank(&[0.5, 2.0, 0.5], Some(0), false).len(), 3, "0 means all");
    }

    #[test]
    fn calibrated_scores_are_the_sigmoid_and_keep_the_logit_order() {
        let ranks = rank(&[0.0, 40.0, 30.0], None, true);
        assert_eq!(ranks.iter().map(|r| r.index).collect::<Vec<_>>(), vec![1, 2, 0]);
        assert_eq!(ranks[2].score, 0.5);
        assert!(ranks.iter().all(|r| (0.0..=1.0).contains(&r.score)));
    }

    #[test]
    fn input_errors_are_renamed_to_the_callers_field() {
        let error = Error::invalid("inputs[3]", "has 900 tokens");
        assert_eq!(rename_inputs(error, |i| format!("texts[{i}]")).to_string(), "texts[3]: has 900 tokens");
        let other = Error::invalid("dimensions", "bad");
        assert_eq!(rename_inputs(other, |i| format!("texts[{i}]")).to_string(), "dimensions: bad");
    }

    #[test]
    fn texts_are_cut_at_unit_borders_from_either_side() {
        let text = "alpha beta gamma";
        let offsets = [(0, 5), (6, 10), (11, 16)];
        assert_eq!(keep_units(text, &offsets, 2, TruncationSide::Right), "alpha beta ");
        assert_eq!(keep_units(text, &offsets, 2, TruncationSide::Left), "beta gamma");
        assert_eq!(keep_units(text, &offsets, 3, TruncationSide::Left), text);
    }
}
