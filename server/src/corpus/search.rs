//! Answers queries: embeds query texts (with live traffic, through the engine),
//! scans the index under its read lock only, optionally re-scores the best
//! candidates with the cross-encoder, and resolves hits to citations.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::filter::Filter;
use super::{Corpus, blocking};
use crate::engine::EmbedOptions;
use crate::error::{Error, Result};
use crate::index::ChunkId;

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
    /// None: rerank when the server has a cross-encoder.
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
    /// The cross-encoder's score, when reranked.
    pub rerank_score: Option<f32>,
    pub text: Option<String>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub vector: Option<Vec<f32>>,
}

/// A hit before its text is read from the store.
struct Candidate {
    chunk_id: ChunkId,
    score: f32,
    document_id: String,
    chunk_index: u32,
    byte_range: (u32, u32),
    char_range: (u32, u32),
    metadata: BTreeMap<String, String>,
    vector: Option<Vec<f32>>,
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
            let mut candidates = self.candidates(vector, pool, &params)?;
            let mut rerank_scores = None;
            if rerank && !candidates.is_empty() {
                let texts = self.candidate_texts(&candidates).await?;
                let query_text = match query {
                    Query::Text(text) => text.clone(),
                    Query::Vector(_) => unreachable!("validated: rerank needs text queries"),
                };
                let reranker = self.reranker.as_ref().expect("validated: a reranker exists");
                let scores = reranker.rerank(&query_text, &texts).await?;
                let mut order: Vec<usize> = (0..candidates.len()).collect();
                order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
                let mut slots: Vec<Option<Candidate>> = candidates.into_iter().map(Some).collect();
                candidates = order.iter().map(|&i| slots[i].take().expect("each index once")).collect();
                rerank_scores = Some(order.iter().map(|&i| scores[i]).collect::<Vec<f32>>());
            }
            let page: Vec<(usize, Candidate)> =
                candidates.into_iter().enumerate().skip(params.offset).take(params.top_k).collect();
            let texts = if params.include_text {
                let only: Vec<&Candidate> = page.iter().map(|(_, c)| c).collect();
                Some(self.texts_of(&only).await?)
            } else {
                None
            };
            let hits = page
                .into_iter()
                .enumerate()
                .map(|(position, (rank, candidate))| Hit {
                    document_id: candidate.document_id,
                    chunk_index: candidate.chunk_index,
                    start_char: candidate.char_range.0,
                    end_char: candidate.char_range.1,
                    score: candidate.score,
                    rerank_score: rerank_scores.as_ref().map(|scores| scores[rank]),
                    text: texts.as_ref().map(|t| t[position].clone()),
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
        let rerank = match (params.rerank, &self.reranker) {
            (Some(true), None) => {
                return Err(Error::FailedPrecondition(
                    "rerank: this server has no cross-encoder (start it with --rerank-model-dir)".into(),
                ));
            }
            (Some(wanted), Some(_)) => wanted,
            (None, reranker) => reranker.is_some(),
            (Some(false), None) => false,
        };
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

    /// The best `count` chunks for `vector` passing the filter and threshold.
    fn candidates(&self, vector: &[f32], count: usize, params: &SearchParams) -> Result<Vec<Candidate>> {
        let view = self.read_view();
        let filter = &params.filter;
        let passes = |id: ChunkId| view.chunk_matches(id, filter);
        let predicate: Option<&(dyn Fn(ChunkId) -> bool + Sync)> = if filter.is_empty() { None } else { Some(&passes) };
        Ok(view
            .index
            .search(vector, count, params.score_threshold, predicate)?
            .into_iter()
            .filter_map(|(chunk_id, score)| {
                let chunk = view.chunk(chunk_id)?;
                Some(Candidate {
                    chunk_id,
                    score,
                    document_id: chunk.document.id.clone(),
                    chunk_index: chunk.index,
                    byte_range: (chunk.start_byte, chunk.end_byte),
                    char_range: (chunk.start_char, chunk.end_char),
                    metadata: if params.include_metadata { chunk.document.metadata.clone() } else { BTreeMap::new() },
                    vector: if params.include_vectors { view.index.get(chunk_id).map(|v| v.to_vec()) } else { None },
                })
            })
            .collect())
    }

    async fn candidate_texts(self: &Arc<Self>, candidates: &[Candidate]) -> Result<Vec<String>> {
        let all: Vec<&Candidate> = candidates.iter().collect();
        self.texts_of(&all).await
    }

    /// The chunk texts, sliced from the stored documents.
    async fn texts_of(self: &Arc<Self>, candidates: &[&Candidate]) -> Result<Vec<String>> {
        let wanted: Vec<(String, (u32, u32), ChunkId)> =
            candidates.iter().map(|c| (c.document_id.clone(), c.byte_range, c.chunk_id)).collect();
        let corpus = self.clone();
        blocking(move || {
            let ids: Vec<&str> = wanted.iter().map(|(id, _, _)| id.as_str()).collect();
            let records = corpus.store.documents(&ids)?;
            Ok(wanted
                .iter()
                .zip(records)
                .map(|((_, (start, end), _), record)| {
                    // A document deleted since the scan has no text any more.
                    record
                        .and_then(|r| r.text.get(*start as usize..*end as usize).map(str::to_string))
                        .unwrap_or_default()
                })
                .collect())
        })
        .await
    }
}
