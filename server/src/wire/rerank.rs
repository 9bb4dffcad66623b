//! Conversions between the `embedwire.v1` rerank messages and the rerank engine's
//! types.

use embedwire_proto::v1::{Rank, RerankMetadata, RerankRequest, RerankResponse, TruncationDirection, Usage};

use crate::error::{Error, Result};
use crate::model::pair_tokenizer::TruncationSide;
use crate::rerank::{RerankOptions, Reranked};

/// The request's options with the documented defaults filled in.
pub fn rerank_options(request: &RerankRequest) -> Result<RerankOptions> {
    let side = match TruncationDirection::try_from(request.truncation_direction) {
        Ok(TruncationDirection::Unspecified | TruncationDirection::Right) => TruncationSide::Right,
        Ok(TruncationDirection::Left) => TruncationSide::Left,
        Err(_) => {
            return Err(Error::invalid(
                "truncation_direction",
                format!("unknown value {}", request.truncation_direction),
            ));
        }
    };
    Ok(RerankOptions {
        top_n: request.top_n.filter(|&n| n > 0).map(|n| n as usize),
        raw_scores: request.raw_scores,
        truncate: request.truncate.unwrap_or(true),
        side,
        max_tokens_per_text: request.max_tokens_per_text.filter(|&n| n > 0).map(|n| n as usize),
        ..RerankOptions::default()
    })
}

/// The answer to `request`: ranks best first, texts echoed when asked.
pub fn rerank_response(request: &RerankRequest, reranked: Reranked, total: std::time::Duration) -> RerankResponse {
    let ranks = reranked
        .ranks
        .iter()
        .map(|rank| Rank {
            index: rank.index as u32,
            text: request.return_text.then(|| request.texts[rank.index].clone()),
            score: rank.score,
        })
        .collect();
    let tokens = u32::try_from(reranked.tokens).unwrap_or(u32::MAX);
    RerankResponse {
        ranks,
        metadata: Some(RerankMetadata {
            compute_chars: u32::try_from(reranked.chars).unwrap_or(u32::MAX),
            compute_tokens: tokens,
            total_time_ns: nanos(total),
            tokenization_time_ns: nanos(reranked.tokenization),
            queue_time_ns: nanos(reranked.timing.queue),
            inference_time_ns: nanos(reranked.timing.inference),
        }),
        scorer: reranked.scorer,
        model: reranked.model_id,
        usage: Some(Usage { prompt_tokens: tokens, total_tokens: tokens }),
    }
}

fn nanos(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
