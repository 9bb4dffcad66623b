//! Answers queries: embeds query texts (with live traffic, through the engine), asks
//! the store for the best chunks, optionally re-scores them with the rerank engine
//! (cross-encoder or bi-encoder), and cuts the page.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Corpus;
use super::filter::Filter;
use crate::engine::EmbedOptions;
use crate::error::{Error, Result};
use crate::rerank::RerankOptions;
use crate::store::{StoreQuery, StoredHit};

/// One query.
#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    /// Embedded with the served model.
    Text(String),
    /// Used as is; must have the model's dimension.
    Vector(Vec<f32>),
}

/// A search, validated by [`Corpus::search`].
#[derive(Debug, Clone)]
pub struct SearchParams {
    pub queries: Vec<Query>,
    pub top_k: usize,
    pub score_threshold: Option<f32>,
    pub offset: usize,
    pub filter: Filter,
    pub include_text: bool,
    pub include_metadata: bool,
    pub include_vectors: bool,
    /// None: rerank when the server has a cross-encoder; true without one reranks
    /// with the embedding model (bi-encoder).
    pub rerank: Option<bool>,
    /// The largest top_k allowed (differs for Search and SearchStream).
    pub max_top_k: usize,
}

/// One matching chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub document_id: String,
    pub chunk_index: u32,
    pub start_char: u32,
    pub end_char: u32,
    /// Cosine similarity to the query.
    pub score: f32,
    /// The rerank score (a cross-encoder's probability, or a bi-encoder's cosine),
    /// when reranked.
    pub rerank_score: Option<f32>,
    pub text: Option<String>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub vector: Option<Vec<f32>>,
}

impl Corpus {
    /// Runs every query of `params`; one list of hits per query, best first.
    pub async fn search(self: &Arc<Self>, params: SearchParams) -> Result<Vec<Vec<Hit>>> {
        let rerank = self.validate_search(&params)?;
        let vectors = self.query_vectors(&params.queries).await?;
        let wanted = params.offset + params.top_k;
        // The cross-encoder re-scores a wider pool, from which the final page is cut.
        let pool = if rerank { wanted.max(self.settings.rerank_candidates) } else { wanted };
        let mut results = Vec::with_capacity(vectors.len());
        for (query, vector) in params.queries.iter().zip(&vectors) {
            let mut candidates = self
                .store
                .search(StoreQuery {
                    vector,
                    count: pool,
                    score_threshold: params.score_threshold,
                    filter: &params.filter,
                    with_text: rerank || params.include_text,
                    with_metadata: params.include_metadata,
                    with_vector: params.include_vectors,
                })
                .await?;
            let mut rerank_scores = None;
            if rerank && !candidates.is_empty() {
                let texts: Vec<String> = candidates.iter().map(|c| c.text.clone().unwrap_or_default()).collect();
                let Query::Text(query_text) = query else { unreachable!("validated: rerank needs text queries") };
                let reranked = self.reranker.rerank(query_text, &texts, RerankOptions::default()).await?;
                let mut slots: Vec<Option<StoredHit>> = candidates.into_iter().map(Some).collect();
                candidates = reranked.ranks.iter().map(|r| slots[r.index].take().expect("each index once")).collect();
                rerank_scores = Some(reranked.ranks.iter().map(|r| r.score).collect::<Vec<f32>>());
            }
            let hits = candidates
                .into_iter()
                .enumerate()
                .skip(params.offset)
                .take(params.top_k)
                .map(|(rank, candidate)| Hit {
                    document_id: candidate.document_id,
                    chunk_index: candidate.chunk_index,
                    start_char: candidate.start_char,
                    end_char: candidate.end_char,
                    score: candidate.score,
                    rerank_score: rerank_scores.as_ref().map(|scores| scores[rank]),
                    text: if params.include_text { Some(candidate.text.unwrap_or_default()) } else { None },
                    metadata: params.include_metadata.then_some(candidate.metadata),
                    vector: candidate.vector,
                })
                .collect();
            results.push(hits);
        }
        Ok(results)
    }

    /// Checks limits and fields; returns whether to rerank.
    fn validate_search(&self, params: &SearchParams) -> Result<bool> {
        if params.queries.is_empty() {
            return Err(Error::invalid("queries", "must contain at least one query"));
        }
        if params.queries.len() > self.settings.max_queries_per_request {
            return Err(Error::invalid(
                "queries",
                format!(
                    "has {} queries, more than the limit of {}",
                    params.queries.len(),
                    self.settings.max_queries_per_request
                ),
            ));
        }
        if params.top_k == 0 || params.top_k > params.max_top_k {
            return Err(Error::invalid(
                "top_k",
                format!("must be between 1 and {}, not {}", params.max_top_k, params.top_k),
            ));
        }
        if params.offset > params.max_top_k {
            return Err(Error::invalid("offset", format!("must be at most {}", params.max_top_k)));
        }
        if let Some(threshold) = params.score_threshold
            && !(-1.0..=1.0).contains(&threshold)
        {
            return Err(Error::invalid("score_threshold", format!("must be between -1 and 1, not {threshold}")));
        }
        params.filter.validate("filter")?;
        let dim = self.engine.info()?.dim;
        for (index, query) in params.queries.iter().enumerate() {
            match query {
                Query::Text(text) if text.trim().is_empty() => {
                    return Err(Error::invalid(format!("queries[{index}].text"), "is empty"));
                }
                Query::Vector(vector) if vector.len() != dim => {
                    return Err(Error::invalid(
                        format!("queries[{index}].vector"),
                        format!("has {} values, the model's dimension is {dim}", vector.len()),
                    ));
                }
                Query::Vector(vector) if vector.iter().any(|v| !v.is_finite()) => {
                    return Err(Error::invalid(format!("queries[{index}].vector"), "has a value that is not finite"));
                }
                _ => {}
            }
        }
        // By default only a cross-encoder reranks: the bi-encoder's scores would repeat
        // the vector search's own.
        let rerank = params.rerank.unwrap_or_else(|| self.reranker.has_cross_encoder());
        if rerank && params.queries.iter().any(|q| matches!(q, Query::Vector(_))) {
            return Err(Error::invalid("rerank", "needs text queries; set rerank to false for vector queries"));
        }
        Ok(rerank)
    }

    /// One normalized vector per query; texts are embedded in one engine call.
    async fn query_vectors(&self, queries: &[Query]) -> Result<Vec<Vec<f32>>> {
        let texts: Vec<String> = queries
            .iter()
            .filter_map(|q| match q {
                Query::Text(text) => Some(text.clone()),
                Query::Vector(_) => None,
            })
            .collect();
        let embedded =
            if texts.is_empty() { None } else { Some(self.engine.embed(texts, EmbedOptions::default()).await?) };
        let mut rows = embedded.as_ref().map(|e| e.values.chunks_exact(e.dim));
        Ok(queries
            .iter()
            .map(|query| match query {
                Query::Text(_) => rows.as_mut().and_then(Iterator::next).expect("one row per text").to_vec(),
                Query::Vector(vector) => vector.clone(),
            })
            .collect())
    }
}
