//! Search: a text (or vector) query, how many hits, metadata filters and what each
//! hit should carry; hits come back as plain Rust values.

use std::collections::HashMap;

use bytes::Bytes;
use embedwire_proto::v1 as pb;
use embedwire_proto::vectors;

use crate::Client;
use crate::error::{Error, Result};
use crate::policy::Hedge;
use crate::pool::Route;

/// A query: a text the server embeds, or a vector (L2-normalized, the model's dim).
#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    Text(String),
    Vector(Vec<f32>),
}

impl From<&str> for Query {
    fn from(text: &str) -> Self {
        Query::Text(text.to_string())
    }
}

impl From<String> for Query {
    fn from(text: String) -> Self {
        Query::Text(text)
    }
}

impl From<Vec<f32>> for Query {
    fn from(vector: Vec<f32>) -> Self {
        Query::Vector(vector)
    }
}

impl Query {
    fn to_proto(&self) -> pb::SearchQuery {
        let query = match self {
            Query::Text(text) => pb::search_query::Query::Text(text.clone()),
            Query::Vector(vector) => pb::search_query::Query::Vector(Bytes::from(vectors::f32_to_le_bytes(vector))),
        };
        pb::SearchQuery { query: Some(query) }
    }
}

/// Selects documents by metadata: every `must` holds, at least one `should` holds
/// (when there are any), no `must_not` holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub must: Vec<Condition>,
    pub should: Vec<Condition>,
    pub must_not: Vec<Condition>,
}

/// A test of one metadata key.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// The key's value is exactly this.
    Equals { key: String, value: String },
    /// The key's value is one of these.
    AnyOf { key: String, values: Vec<String> },
}

impl Filter {
    /// No condition: every document matches.
    pub fn new() -> Self {
        Filter::default()
    }

    /// Requires `key == value`.
    pub fn must_equal(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.must.push(Condition::Equals { key: key.into(), value: value.into() });
        self
    }

    /// Requires `key` to be one of `values`.
    pub fn must_be_any_of<I, S>(mut self, key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.must.push(Condition::AnyOf { key: key.into(), values: values.into_iter().map(Into::into).collect() });
        self
    }

    /// Adds an alternative: at least one `should` condition must hold.
    pub fn should_equal(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.should.push(Condition::Equals { key: key.into(), value: value.into() });
        self
    }

    /// Excludes documents with `key == value`.
    pub fn must_not_equal(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.must_not.push(Condition::Equals { key: key.into(), value: value.into() });
        self
    }

    pub(crate) fn to_proto(&self) -> pb::Filter {
        let convert = |conditions: &[Condition]| conditions.iter().map(Condition::to_proto).collect();
        pb::Filter { must: convert(&self.must), should: convert(&self.should), must_not: convert(&self.must_not) }
    }
}

impl Condition {
    fn to_proto(&self) -> pb::Condition {
        match self {
            Condition::Equals { key, value } => {
                pb::Condition { key: key.clone(), test: Some(pb::condition::Test::Equals(value.clone())) }
            }
            Condition::AnyOf { key, values } => pb::Condition {
                key: key.clone(),
                test: Some(pb::condition::Test::AnyOf(pb::StringSet { values: values.clone() })),
            },
        }
    }
}

/// Options of a search; the default is the server's (5 hits with text and
/// metadata, reranked when the server has a reranker).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchOptions {
    /// Hits per query (server default 5).
    pub top_k: Option<u32>,
    /// Drops hits scoring below this.
    pub score_threshold: Option<f32>,
    /// Skips the first hits, for paging.
    pub offset: u32,
    /// Restricts hits to documents whose metadata match.
    pub filter: Option<Filter>,
    /// Return each hit's chunk text (server default true).
    pub include_text: Option<bool>,
    /// Return each hit's document metadata (server default true).
    pub include_metadata: Option<bool>,
    /// Return each hit's vector (as f32).
    pub include_vectors: bool,
    /// Rerank with the server's rerank scorer (server default: when it has a
    /// cross-encoder; true without one re-scores with the embedding model).
    pub rerank: Option<bool>,
    /// How chunks are found (server default: by vector).
    pub mode: SearchMode,
    /// The vector side's weight in hybrid mode, 0 to 1 (server default 0.5).
    pub alpha: Option<f32>,
    /// How hybrid mode merges its two rankings (server default: relative score).
    pub fusion: Option<Fusion>,
    /// Rank documents, each with at most this many of its best chunks (1 to 100),
    /// one after the other: `top_k` and `offset` then count documents. None: rank
    /// chunks.
    pub group_by_document: Option<u32>,
    /// Mark each hit's words that match the query's, in [`Hit::highlights`].
    pub highlight: bool,
    /// The collection searched; None: the client's ([`Client::collection`]).
    pub collection: Option<String>,
}

/// How a search finds chunks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SearchMode {
    /// By meaning: the cosine similarity of embeddings.
    #[default]
    Vector,
    /// By words: BM25 over the chunks' text (exact terms, names, codes).
    Keyword,
    /// Both rankings, fused.
    Hybrid,
}

impl SearchMode {
    fn to_proto(self) -> pb::SearchMode {
        match self {
            SearchMode::Vector => pb::SearchMode::Vector,
            SearchMode::Keyword => pb::SearchMode::Keyword,
            SearchMode::Hybrid => pb::SearchMode::Hybrid,
        }
    }
}

/// How hybrid mode merges the vector and keyword rankings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fusion {
    /// Each side adds weight / (60 + rank).
    ReciprocalRank,
    /// Each side's scores scaled to [0, 1], weighted and added.
    RelativeScore,
}

impl Fusion {
    fn to_proto(self) -> pb::Fusion {
        match self {
            Fusion::ReciprocalRank => pb::Fusion::ReciprocalRank,
            Fusion::RelativeScore => pb::Fusion::RelativeScore,
        }
    }
}

/// Where a chunk sits in its document's normalized text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Position of the chunk in the document, from 0.
    pub index: u32,
    /// First character, in Unicode code points.
    pub start_char: u32,
    /// One past the last character.
    pub end_char: u32,
}

impl From<pb::ChunkSpan> for ChunkSpan {
    fn from(span: pb::ChunkSpan) -> Self {
        ChunkSpan { index: span.index, start_char: span.start_char, end_char: span.end_char }
    }
}

/// One matching chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub document_id: String,
    pub chunk: ChunkSpan,
    /// Cosine similarity to the query (vector mode), BM25 score (keyword mode) or
    /// fused score (hybrid mode).
    pub score: f32,
    /// The cosine similarity, when the vector side found the chunk.
    pub vector_score: Option<f32>,
    /// The BM25 score, when the keyword side found the chunk.
    pub keyword_score: Option<f32>,
    /// The rerank score when the hits were reranked (a cross-encoder's probability,
    /// or a bi-encoder's cosine).
    pub rerank_score: Option<f32>,
    /// The chunk's text (empty unless included).
    pub text: String,
    /// The document's metadata (empty unless included).
    pub metadata: HashMap<String, String>,
    /// The chunk's vector (only with `include_vectors`).
    pub vector: Option<Vec<f32>>,
    /// The chunk's words that match the query's (only with `highlight`), as
    /// (start, end) offsets in the document's text in code points, like `chunk`.
    pub highlights: Vec<(u32, u32)>,
}

impl Hit {
    fn from_proto(hit: pb::SearchHit) -> Self {
        let vector = (!hit.vector.is_empty()).then(|| vectors::f32_from_le_bytes(&hit.vector));
        Hit {
            document_id: hit.document_id,
            chunk: hit.chunk.map(ChunkSpan::from).unwrap_or_default(),
            score: hit.score,
            vector_score: hit.vector_score,
            keyword_score: hit.keyword_score,
            rerank_score: hit.rerank_score,
            text: hit.text,
            metadata: hit.metadata,
            vector,
            highlights: hit.highlights.iter().map(|span| (span.start_char, span.end_char)).collect(),
        }
    }
}

impl Client {
    /// The best chunks for one query, best first.
    pub async fn search(&self, query: impl Into<Query>, options: &SearchOptions) -> Result<Vec<Hit>> {
        let mut results = self.search_many(vec![query.into()], options).await?;
        Ok(results.pop().unwrap_or_default())
    }

    /// The best chunks for each of several queries, in query order.
    pub async fn search_many(&self, queries: Vec<Query>, options: &SearchOptions) -> Result<Vec<Vec<Hit>>> {
        let request = pb::SearchRequest {
            queries: queries.iter().map(Query::to_proto).collect(),
            top_k: options.top_k,
            score_threshold: options.score_threshold,
            offset: options.offset,
            filter: options.filter.as_ref().map(Filter::to_proto),
            include_text: options.include_text,
            include_metadata: options.include_metadata,
            include_vectors: options.include_vectors,
            vector_dtype: pb::EmbeddingDtype::Float32 as i32,
            rerank: options.rerank,
            mode: options.mode.to_proto() as i32,
            alpha: options.alpha,
            fusion: options.fusion.map_or(pb::Fusion::Unspecified, Fusion::to_proto) as i32,
            group_by: if options.group_by_document.is_some() { pb::GroupBy::Document } else { pb::GroupBy::Unspecified }
                as i32,
            group_size: options.group_by_document,
            highlight: options.highlight,
            collection: options.collection.clone().unwrap_or_else(|| self.collection.to_string()),
        };
        let caller = &self.inner.caller;
        let (address, response) = caller
            .unary(Route::Primary, Hedge::Allowed, |backend| {
                let request = caller.request(request.clone());
                async move {
                    let response = backend.search().search(request).await?;
                    Ok((backend.address.clone(), response.into_inner()))
                }
            })
            .await?;
        if response.results.len() != queries.len() {
            return Err(Error::Protocol {
                address,
                reason: format!("{} results for {} queries", response.results.len(), queries.len()),
            });
        }
        Ok(response.results.into_iter().map(|result| result.hits.into_iter().map(Hit::from_proto).collect()).collect())
    }
}
