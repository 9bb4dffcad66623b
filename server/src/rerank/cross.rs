//! The cross-encoder scorer: pairs are tokenized on the request path, then join the
//! cross-encoder's own dynamic batcher, so pairs of concurrent calls share batches
//! under the token budget, sorted by length; a long candidate list is split over
//! several batches and its scores come back in order. Calls are admitted while the
//! work queued ahead fits the queue-time bound; a caller that goes away (deadline,
//! cancel) has its pairs dropped before they cost model time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{RerankOptions, Scores, keep_units};
use crate::batcher::{BatchLimits, Priority, TokenBudgetBatcher};
use crate::error::{Error, Result};
use crate::lanes::{self, QueueBound};
use crate::model::cross_encoder::{CrossEncoder, LoadedCrossEncoder};
use crate::model::pair_tokenizer::{PairTokenizer, TokenizedPair, TruncationSide};
use crate::stats::Stats;

/// Pairs tokenized inline on the async runtime at most; more move to the blocking
/// pool so one long candidate list does not stall other connections' I/O.
const INLINE_TOKENIZE_LIMIT: usize = 32;

/// The warm-up call, the unit of the derived queue-time bound: 20 candidates of
/// about 60 tokens, what a retrieval stage typically hands a reranker.
const WARM_UP_PAIRS: usize = 20;

/// The derived bound, in warm-up calls' model time: a call is refused while more
/// than this many typical calls are queued ahead. Looser than the embedding model's
/// bound (a few short texts): a rerank call is itself a batch of pairs, and a
/// closed-loop client population of this size keeps the model busy without waits
/// past a second on this kind of CPU.
pub const AUTO_BOUND_CALLS: u32 = 8;

/// The cross-encoder, its tokenizer and its model thread.
pub struct CrossEncoderScorer {
    tokenizer: Arc<PairTokenizer>,
    batcher: TokenBudgetBatcher<TokenizedPair>,
    model_id: String,
    /// The resolved queue-time bound; None: off.
    queue_bound: Option<Duration>,
}

impl CrossEncoderScorer {
    /// Warms the model up, derives the queue-time bound from it, and starts the model
    /// thread. Blocking: the warm-up runs a few batches.
    pub fn start(
        loaded: LoadedCrossEncoder,
        model_id: String,
        limits: BatchLimits,
        queue_bound: QueueBound,
        stats: Arc<Stats>,
    ) -> Result<Self> {
        let LoadedCrossEncoder { mut model, tokenizer, .. } = loaded;
        let typical_call = warm_up(&mut model, &tokenizer)?;
        let queue_bound = match queue_bound {
            QueueBound::Auto => Some((typical_call * AUTO_BOUND_CALLS).max(lanes::AUTO_BOUND_FLOOR)),
            QueueBound::Off => None,
            QueueBound::Fixed(bound) => Some(bound),
        };
        tracing::info!(
            model = %model_id,
            typical_call_ms = typical_call.as_secs_f64() * 1e3,
            queue_bound_ms = queue_bound.map(|b| b.as_secs_f64() * 1e3),
            "cross-encoder ready: rerank calls are refused while more model work than the bound is queued"
        );
        let limits = BatchLimits {
            // A single pair always fits, whatever the budget says.
            max_batch_tokens: limits.max_batch_tokens.max(tokenizer.max_tokens()),
            max_bulk_batch_tokens: limits.max_bulk_batch_tokens.max(tokenizer.max_tokens()),
            ..limits
        };
        let batcher = TokenBudgetBatcher::start(model, limits, stats)?;
        Ok(CrossEncoderScorer { tokenizer: Arc::new(tokenizer), batcher, model_id, queue_bound })
    }

    /// The cross-encoder's id.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// One logit per text.
    pub async fn score(&self, query: &str, texts: &[String], options: RerankOptions) -> Result<Scores> {
        // Before tokenizing: under overload most calls are refused, and each refusal
        // should cost as little CPU as possible, which the model needs.
        if let (Some(bound), Priority::Interactive) = (self.queue_bound, options.priority) {
            let derived = format!("{AUTO_BOUND_CALLS} x the cross-encoder's time for a call of {WARM_UP_PAIRS} pairs");
            lanes::admit_within(self.batcher.work_ahead(), bound, &derived)?;
        }
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

/// Runs a few calls before serving (ONNX Runtime's first run allocates and plans);
/// returns the model time of one typical call, the median of three.
fn warm_up(model: &mut CrossEncoder, tokenizer: &PairTokenizer) -> Result<Duration> {
    // A passage of about 60 tokens, as retrieval stages hand out: the bound is in
    // calls like the ones the server will see.
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
    let mut runs: Vec<Duration> = (0..3)
        .map(|_| {
            let started = Instant::now();
            model.score(&call).map(|_| started.elapsed())
        })
        .collect::<Result<_>>()?;
    runs.sort();
    Ok(runs[1])
}
