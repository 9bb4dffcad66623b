//! The cross-encoder scorer: pairs are tokenized on the request path, then join the
//! cross-encoder's own dynamic batcher, so pairs of concurrent calls share batches
//! under the token budget, sorted by length; a long candidate list is split over
//! several batches and its scores come back in order. Unary calls are admitted while
//! fewer than [`AUTO_CALLS`] of them are queued or running (or under `--max-queue-ms`);
//! a caller that goes away (deadline, cancel) has its pairs dropped before they cost
//! model time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{RerankOptions, Scores, keep_units};
use crate::batcher::{BatchLimits, Priority, TokenBudgetBatcher};
use crate::error::{Error, Result};
use crate::lanes::{Admission, InteractiveAdmission, InteractiveCall, QueueBound};
use crate::model::cross_encoder::{CrossEncoder, LoadedCrossEncoder};
use crate::model::pair_tokenizer::{PairTokenizer, TokenizedPair, TruncationSide};
use crate::stats::Stats;

/// Pairs tokenized inline on the async runtime at most; more move to the blocking
/// pool so one long candidate list does not stall other connections' I/O.
const INLINE_TOKENIZE_LIMIT: usize = 32;

/// The warm-up call: 20 candidates of about 60 tokens, what a retrieval stage
/// typically hands a reranker.
const WARM_UP_PAIRS: usize = 20;

/// The default bound: unary rerank calls queued or running at once. Counted in calls
/// for the reason the embedding model's bound is (`lanes`): a closed-loop client of N
/// callers never has more than N calls in flight, so one of up to this many callers
/// is queued, never refused. The old default, 8 x the time of a 20-pair call queued
/// ahead, refused closed-loop clients of 16 and 32 callers (172 and 1,614 refusals
/// in `embedwire-bench rerank`) that the model served at full speed anyway. Fewer
/// calls than the embedding model's 128: a rerank call is itself a batch or more of
/// pairs (20 pairs of ~75 tokens are ~0.7 of a 2,048-token batch), so 64 calls ahead
/// are already ~45 batches of wait for an accepted call under open-loop overload.
pub const AUTO_CALLS: usize = 64;

/// The cross-encoder, its tokenizer and its model thread.
pub struct CrossEncoderScorer {
    tokenizer: Arc<PairTokenizer>,
    batcher: TokenBudgetBatcher<TokenizedPair>,
    model_id: String,
    /// Admission of unary calls (streams' requests are bulk: paced, never refused).
    admission: InteractiveAdmission,
}

impl CrossEncoderScorer {
    /// Warms the model up and starts the model thread; the admission bound in force is
    /// published in `stats`. Blocking: the warm-up runs two calls.
    pub fn start(
        loaded: LoadedCrossEncoder,
        model_id: String,
        limits: BatchLimits,
        queue_bound: QueueBound,
        stats: Arc<Stats>,
    ) -> Result<Self> {
        let LoadedCrossEncoder { mut model, tokenizer, .. } = loaded;
        let typical_call = warm_up(&mut model, &tokenizer)?;
        let rule = match queue_bound {
            QueueBound::Auto => Admission::Calls(AUTO_CALLS),
            QueueBound::Calls(calls) => Admission::Calls(calls),
            QueueBound::Off => Admission::Off,
            QueueBound::Fixed(bound) => Admission::QueueTime(bound),
        };
        let admission = InteractiveAdmission::new(rule, stats.clone());
        tracing::info!(
            model = %model_id,
            typical_call_ms = typical_call.as_secs_f64() * 1e3,
            bound = %rule.describe(),
            "cross-encoder ready"
        );
        let limits = BatchLimits {
            // A single pair always fits, whatever the budget says.
            max_batch_tokens: limits.max_batch_tokens.max(tokenizer.max_tokens()),
            max_bulk_batch_tokens: limits.max_bulk_batch_tokens.max(tokenizer.max_tokens()),
            ..limits
        };
        let batcher = TokenBudgetBatcher::start(model, limits, stats)?;
        Ok(CrossEncoderScorer { tokenizer: Arc::new(tokenizer), batcher, model_id, admission })
    }

    /// The cross-encoder's id.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// One logit per text.
    pub async fn score(&self, query: &str, texts: &[String], options: RerankOptions) -> Result<Scores> {
        // Before tokenizing: under overload most calls are refused, and each refusal
        // should cost as little CPU as possible, which the model needs.
        let _admitted = match options.priority {
            Priority::Interactive => self.admission.admit_interactive(self.batcher.work_ahead())?,
            Priority::Bulk => InteractiveCall::default(),
        };
        let started = Instant::now();
        let pairs = if texts.len() <= INLINE_TOKENIZE_LIMIT {
            tokenize_pairs(&self.tokenizer, query, texts, options)?
        } else {
            let (tokenizer, query, texts) = (self.tokenizer.clone(), query.to_string(), texts.to_vec());
            tokio::task::spawn_blocking(move || tokenize_pairs(&tokenizer, &query, &texts, options))
                .await
                .map_err(|e| Error::Model(format!("tokenizer task: {e}")))??
        };
        let tokenization = started.elapsed();
        if !options.truncate {
            self.refuse_truncated(query, &pairs)?;
        }
        let tokens = pairs.iter().map(|pair| pair.ids.len() as u64).sum();
        let reply = self.batcher.submit(pairs, options.priority);
        let (values, timing) = reply
            .await
            .map_err(|_| Error::Unavailable("the cross-encoder stopped (server shutting down)".into()))??;
        Ok(Scores { values, tokens, tokenization, timing })
    }

    /// With truncation off, fails on the first pair that had to be cut, naming the
    /// query when the cut reached it (longest-first truncation cuts the query only
    /// when it is the longer of the two).
    fn refuse_truncated(&self, query: &str, pairs: &[TokenizedPair]) -> Result<()> {
        let Some(index) = pairs.iter().position(|pair| pair.truncated) else { return Ok(()) };
        let limit = self.tokenizer.max_tokens();
        let query_tokens = self.tokenizer.text_offsets(query)?.len();
        // Segment 0 is [CLS] query [SEP].
        let query_kept = pairs[index].type_ids.iter().filter(|&&segment| segment == 0).count().saturating_sub(2);
        if query_kept < query_tokens {
            return Err(Error::invalid(
                "query",
                format!(
                    "has {query_tokens} tokens, too many to pair with texts[{index}] within the cross-encoder's \
                     limit of {limit}; shorten it or set truncate"
                ),
            ));
        }
        Err(Error::invalid(
            format!("texts[{index}]"),
            format!(
                "with the query is longer than the cross-encoder's limit of {limit} tokens; shorten it or set truncate"
            ),
        ))
    }
}

/// Every (query, text) pair, texts first cut to `max_tokens_per_text`.
fn tokenize_pairs(
    tokenizer: &PairTokenizer,
    query: &str,
    texts: &[String],
    options: RerankOptions,
) -> Result<Vec<TokenizedPair>> {
    texts
        .iter()
        .map(|text| match options.max_tokens_per_text {
            Some(keep) => {
                let offsets = tokenizer.text_offsets(text)?;
                tokenizer.tokenize(query, keep_units(text, &offsets, keep, options.side), options.side)
            }
            None => tokenizer.tokenize(query, text, options.side),
        })
        .collect()
}

/// Runs a call before serving (ONNX Runtime's first run allocates and plans); returns
/// the model time of one typical call, for the log.
fn warm_up(model: &mut CrossEncoder, tokenizer: &PairTokenizer) -> Result<Duration> {
    // A passage of about 60 tokens, as retrieval stages hand out.
    let pair = tokenizer.tokenize(
        "what does a reranker do",
        "A reranker reads a query together with one candidate passage and scores how well the passage \
         answers it. Retrieval systems first fetch a few dozen candidates cheaply, by keywords or by \
         comparing embedding vectors, and then let the slower but more accurate reranker put the best \
         of them first before they are shown to a person or handed to a language model.",
        TruncationSide::Right,
    )?;
    let call: Vec<&TokenizedPair> = vec![&pair; WARM_UP_PAIRS];
    model.score(&call[..2])?;
    let started = Instant::now();
    model.score(&call)?;
    Ok(started.elapsed())
}
