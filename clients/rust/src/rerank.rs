//! Rerank: candidate texts ordered by relevance to a query, scored by the server's
//! cross-encoder or, on a server without one, its embedding model (every answer
//! names its scorer). Stateless like embed: balanced over the servers, retried and
//! hedged by the client's policy.

use std::time::Duration;

use embedwire_proto::v1 as pb;

use crate::Client;
use crate::error::{Error, Result};
use crate::policy::Hedge;
use crate::pool::Route;

/// Which end of an over-long text loses tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Truncation {
    /// The end (the server's default).
    #[default]
    Right,
    /// The start.
    Left,
}

/// Options of a Rerank call; the default is the server's (every text, probabilities
/// for a cross-encoder, no text echoed, over-long pairs cut from the right).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RerankOptions {
    /// Keep only the n best.
    pub top_n: Option<u32>,
    /// A cross-encoder's logit instead of its sigmoid.
    pub raw_scores: bool,
    /// Echo each text in its rank.
    pub return_text: bool,
    /// Cut over-long pairs instead of failing (server default: true).
    pub truncate: Option<bool>,
    /// Which end is cut.
    pub truncation: Truncation,
    /// Cut each text to this many tokens before it is scored.
    pub max_tokens_per_text: Option<u32>,
}

/// One text's place in the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Rank {
    /// Its position in the texts sent.
    pub index: usize,
    /// Its relevance; higher is more relevant.
    pub score: f32,
    /// The text, with `return_text`.
    pub text: Option<String>,
}

/// A Rerank answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reranked {
    /// Best first.
    pub ranks: Vec<Rank>,
    /// `cross-encoder:<model>` or `bi-encoder:<model>`.
    pub scorer: String,
    /// The scorer's model id.
    pub model: String,
    /// Tokens the model read.
    pub tokens: u32,
    /// The server's time for the call, queue and model included.
    pub server_time: Duration,
}

impl Client {
    /// Orders `texts` by relevance to `query`, best first.
    pub async fn rerank<I, S>(&self, query: &str, texts: I, options: &RerankOptions) -> Result<Reranked>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let request = pb::RerankRequest {
            query: query.to_string(),
            texts: texts.into_iter().map(Into::into).collect(),
            truncate: options.truncate,
            raw_scores: options.raw_scores,
            return_text: options.return_text,
            truncation_direction: match options.truncation {
                Truncation::Right => pb::TruncationDirection::Right,
                Truncation::Left => pb::TruncationDirection::Left,
            } as i32,
            top_n: options.top_n,
            max_tokens_per_text: options.max_tokens_per_text,
        };
        let count = request.texts.len();
        let caller = &self.inner.caller;
        let (address, response) = caller
            .unary(Route::Balanced, Hedge::Allowed, |backend| {
                let request = caller.request(request.clone());
                async move {
                    let response = backend.rerank().rerank(request).await?;
                    Ok((backend.address.clone(), response.into_inner()))
                }
            })
            .await?;
        if let Some(bad) = response.ranks.iter().find(|rank| rank.index as usize >= count) {
            return Err(Error::Protocol { address, reason: format!("rank index {} of {count} texts", bad.index) });
        }
        let metadata = response.metadata.unwrap_or_default();
        Ok(Reranked {
            ranks: response
                .ranks
                .into_iter()
                .map(|rank| Rank { index: rank.index as usize, score: rank.score, text: rank.text })
                .collect(),
            scorer: response.scorer,
            model: response.model,
            tokens: metadata.compute_tokens,
            server_time: Duration::from_nanos(metadata.total_time_ns),
        })
    }
}
