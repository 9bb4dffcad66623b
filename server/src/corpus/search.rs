//! Answers queries: embeds query texts (with live traffic, through the engine), asks
//! the store for the best chunks (by vector, by keyword, or both, fused), optionally
//! re-scores them with the rerank engine (cross-encoder or bi-encoder), and cuts the
//! page: of chunks, or of documents when grouped ([`super::grouping`]), with the
//! matching words marked when asked ([`super::highlight`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Corpus;
use super::filter::Filter;
use super::fusion::{self, FusedHit, Fusion};
use super::grouping;
use super::highlight::QueryWords;
use crate::engine::EmbedOptions;
use crate::error::{Error, Result};
use crate::rerank::RerankOptions;
use crate::store::{CorpusStore, HitContent, KeywordQuery, StoreQuery, StoredHit};

/// How chunks are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchMode {
    /// By the query's embedding (cosine similarity).
    #[default]
    Vector,
    /// By the query's words (BM25 over each chunk's text).
    Keyword,
    /// Both, fused (see [`fusion`]).
    Hybrid,
}

/// The vector side's weight in hybrid mode when the request sets none. Measured on
/// SciFact's train split (`embedwire-bench retrieval`, README's retrieval table).
pub const DEFAULT_ALPHA: f32 = 0.5;

/// Candidates each side of a hybrid search ranks (more when the page needs more):
/// a chunk ranked low by one side can still win on the other's. Each costs: on a
/// 3-node Weaviate cluster each side reads every shard's candidates, and both sides
/// share the cores with the embedding. Measured there at 5,183 SciFact documents
/// (train split, 809 queries, top_k 10, the documents at their best chunk): depth 50
/// nDCG@10 0.7164 at p50 31.8 ms, 30: 0.7158 / 27.6 ms, 20: 0.7155 / 25.1 ms, 15:
/// 0.7140 / 24.2 ms, against vector search's 19.9 ms (earlier, on the embedded store,
/// 50 and 100 gave the same 0.7205). See [`fusion::fuse`]'s depth.
pub const HYBRID_CANDIDATES: usize = 20;

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
    pub mode: SearchMode,
    /// The vector side's weight in hybrid mode (0..1); None: [`DEFAULT_ALPHA`].
    pub alpha: Option<f32>,
    pub fusion: Fusion,
    /// Grouped by document, each bringing at most this many chunks; None: not grouped.
    pub group_size: Option<usize>,
    /// Mark each hit's words that match a text query's.
    pub highlight: bool,
}

/// One matching chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub document_id: String,
    pub chunk_index: u32,
    pub start_char: u32,
    pub end_char: u32,
    /// By mode: the cosine similarity to the query (vector), the BM25 score
    /// (keyword), the fused score (hybrid).
    pub score: f32,
    /// The cosine similarity, when the vector side found the chunk.
    pub vector_score: Option<f32>,
    /// The BM25 score, when the keyword side found the chunk.
    pub keyword_score: Option<f32>,
    /// The rerank score (a cross-encoder's probability, or a bi-encoder's cosine),
    /// when reranked.
    pub rerank_score: Option<f32>,
    pub text: Option<String>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub vector: Option<Vec<f32>>,
    /// The words of the chunk that match the query's, in code points of the document,
    /// when asked for.
    pub highlights: Vec<(u32, u32)>,
}

/// A candidate in its final order, with its rerank score when reranked.
struct Ranked {
    candidate: FusedHit,
    rerank_score: Option<f32>,
}

impl Ranked {
    fn into_hit(self, params: &SearchParams, words: Option<&mut QueryWords>) -> Hit {
        let hit = self.candidate.hit;
        let highlights = match (words, &hit.text) {
            (Some(words), Some(text)) => words.spans(text, hit.start_char),
            _ => Vec::new(),
        };
        Hit {
            document_id: hit.document_id,
            chunk_index: hit.chunk_index,
            start_char: hit.start_char,
            end_char: hit.end_char,
            score: self.candidate.score,
            vector_score: self.candidate.vector_score,
            keyword_score: self.candidate.keyword_score,
            rerank_score: self.rerank_score,
            text: if params.include_text { Some(hit.text.unwrap_or_default()) } else { None },
            metadata: params.include_metadata.then_some(hit.metadata),
            vector: hit.vector,
            highlights,
        }
    }
}

/// What one query is searched with: its vector (empty in keyword mode) and, in hybrid
/// mode, its keyword side started early.
struct Sides<'a> {
    vector: &'a [f32],
    keyword: &'a mut KeywordSide,
}

/// A hybrid query's keyword side: running since the request came in, then its hits
/// (kept: a grouped search that grows its pool fuses them again).
enum KeywordSide {
    None,
    Running(AbortOnDrop),
    Done(Vec<StoredHit>),
}

impl KeywordSide {
    /// The side's hits: the started search's, or `query` searched now when none was
    /// started.
    async fn hits(&mut self, store: &dyn CorpusStore, query: KeywordQuery<'_>) -> Result<Vec<StoredHit>> {
        let hits = match std::mem::replace(self, KeywordSide::None) {
            KeywordSide::Done(hits) => hits,
            KeywordSide::Running(mut task) => (&mut task.0)
                .await
                .map_err(|error| Error::Unavailable(format!("the keyword search did not finish: {error}")))??,
            KeywordSide::None => store.keyword_search(query).await?,
        };
        *self = KeywordSide::Done(hits.clone());
        Ok(hits)
    }
}

/// A spawned search that stops when nobody waits for it any more (the caller went
/// away, or another part of the request failed).
struct AbortOnDrop(tokio::task::JoinHandle<Result<Vec<StoredHit>>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How deep each side of a hybrid search ranks: a depth set by the page's size (and
/// the rerank scorer's pool when reranking, so that it scores both sides' best), never
/// by its offset or a grouped search's growing pool, so that pages of one ranking
/// agree. Past it, the vector side (which reaches every chunk) goes on.
fn hybrid_depth(params: &SearchParams, rerank_pool: Option<usize>) -> usize {
    let page = params.top_k * params.group_size.unwrap_or(1);
    HYBRID_CANDIDATES.max(page).max(rerank_pool.unwrap_or(0))
}

/// What the page's hits carry: text to show, to mark or to rerank.
fn page_content(params: &SearchParams, rerank: bool) -> HitContent {
    HitContent {
        with_text: rerank || params.include_text || params.highlight,
        with_metadata: params.include_metadata,
        with_vector: params.include_vectors,
    }
}

/// The keyword search of `text` for `count` chunks under the request's filter,
/// carrying `content`.
fn keyword_query<'a>(params: &'a SearchParams, text: &'a str, count: usize, content: HitContent) -> KeywordQuery<'a> {
    let HitContent { with_text, with_metadata, with_vector } = content;
    KeywordQuery { text, count, filter: &params.filter, with_text, with_metadata, with_vector }
}

/// The best chunks of one query, and whether the store has no more to give (it
/// returned fewer than asked).
struct Candidates {
    hits: Vec<FusedHit>,
    exhausted: bool,
}

impl Corpus {
    /// Runs every query of `params`; one list of hits per query, best first (grouped:
    /// documents best first, each document's hits one after the other).
    pub async fn search(self: &Arc<Self>, params: SearchParams) -> Result<Vec<Vec<Hit>>> {
        let rerank = self.validate_search(&params)?;
        // In hybrid mode the keyword side needs no vector: it starts at once and runs
        // while the query is embedded and its vector side searched (measured on PostgreSQL
        // at 10,000 documents: hybrid p50 1.88 x vector with the sides after the embedding,
        // its keyword side alone as slow as the vector one).
        let mut keyword_sides: Vec<KeywordSide> =
            params.queries.iter().map(|query| self.start_keyword_side(&params, query, rerank)).collect();
        let vectors = if params.mode == SearchMode::Keyword {
            vec![Vec::new(); params.queries.len()]
        } else {
            self.query_vectors(&params.queries).await?
        };
        let mut results = Vec::with_capacity(vectors.len());
        for ((query, vector), keyword_side) in params.queries.iter().zip(&vectors).zip(&mut keyword_sides) {
            let mut sides = Sides { vector, keyword: keyword_side };
            let ranked = match params.group_size {
                None => self.ranked_chunks(&params, query, &mut sides, rerank).await?,
                Some(group_size) => self.ranked_documents(&params, query, &mut sides, group_size, rerank).await?,
            };
            let mut words = match query {
                Query::Text(text) if params.highlight => Some(QueryWords::of(text)),
                _ => None,
            };
            results.push(ranked.into_iter().map(|ranked| ranked.into_hit(&params, words.as_mut())).collect());
        }
        Ok(results)
    }

    /// Hybrid mode: starts the query's keyword side as a task of its own (the store's
    /// search of one query; a request's queries run side by side, as its vector sides
    /// are embedded in one batch). None in other modes.
    fn start_keyword_side(&self, params: &SearchParams, query: &Query, rerank: bool) -> KeywordSide {
        let (SearchMode::Hybrid, Query::Text(text)) = (params.mode, query) else { return KeywordSide::None };
        let (store, text, filter) = (self.store.clone(), text.clone(), params.filter.clone());
        let count = hybrid_depth(params, self.rerank_pool(rerank));
        let HitContent { with_text, with_metadata, with_vector } = self.side_content(page_content(params, rerank));
        KeywordSide::Running(AbortOnDrop(tokio::spawn(async move {
            let query = KeywordQuery { text: &text, count, filter: &filter, with_text, with_metadata, with_vector };
            store.keyword_search(query).await
        })))
    }

    /// What each side of a hybrid search brings for a page carrying `page`: no text or
    /// metadata (on Weaviate, the text of 2 x 20 candidates from every shard), which
    /// the page gets after fusion, unless the store's rows hold them anyway.
    fn side_content(&self, page: HitContent) -> HitContent {
        if self.store.ranks_with_content() {
            page
        } else {
            HitContent { with_text: false, with_metadata: false, ..page }
        }
    }

    /// The candidates the rerank scorer re-scores, when reranking.
    fn rerank_pool(&self, rerank: bool) -> Option<usize> {
        rerank.then_some(self.settings.rerank_candidates)
    }

    /// The page of chunks, best first.
    async fn ranked_chunks(
        &self,
        params: &SearchParams,
        query: &Query,
        sides: &mut Sides<'_>,
        rerank: bool,
    ) -> Result<Vec<Ranked>> {
        let wanted = params.offset + params.top_k;
        // The cross-encoder re-scores a wider pool, from which the final page is cut.
        let pool = wanted.max(self.rerank_pool(rerank).unwrap_or(0));
        let candidates = self.candidates(params, query, sides, pool, rerank).await?;
        let ranked = self.reranked(query, candidates.hits, rerank).await?;
        Ok(ranked.into_iter().skip(params.offset).take(params.top_k).collect())
    }

    /// The page of documents, each with its best `group_size` chunks. Asks the store
    /// for more chunks until they hold enough documents, each of the page's documents
    /// with its `group_size` best chunks (or all it has), or the store has no more: a
    /// page is never short while the index holds more matching documents (up to
    /// [`grouping::MAX_GROUPED_CANDIDATES`] chunks deep).
    async fn ranked_documents(
        &self,
        params: &SearchParams,
        query: &Query,
        sides: &mut Sides<'_>,
        group_size: usize,
        rerank: bool,
    ) -> Result<Vec<Ranked>> {
        let documents = params.offset + params.top_k;
        let mut pool = grouping::first_candidates(documents, group_size);
        if rerank {
            pool = pool.max(self.settings.rerank_candidates).min(grouping::MAX_GROUPED_CANDIDATES);
        }
        loop {
            let candidates = self.candidates(params, query, sides, pool, rerank).await?;
            let exhausted = candidates.exhausted;
            let ranked = self.reranked(query, candidates.hits, rerank).await?;
            let groups = grouping::group_by_document(ranked, |r| r.candidate.hit.document_id.as_str(), group_size);
            let page = &groups[params.offset.min(groups.len())..documents.min(groups.len())];
            let wants_more = !exhausted
                && (groups.len() < documents
                    || (group_size > 1 && self.has_incomplete_group(page, group_size).await?));
            match grouping::more_candidates(pool) {
                Some(more) if wants_more => pool = more,
                _ => return Ok(groups.into_iter().skip(params.offset).take(params.top_k).flatten().collect()),
            }
        }
    }

    /// Whether a document of `page` brought fewer than `group_size` chunks while it has
    /// more: its other chunks rank past the candidates asked for so far.
    async fn has_incomplete_group(&self, page: &[Vec<Ranked>], group_size: usize) -> Result<bool> {
        let short: Vec<&Vec<Ranked>> = page.iter().filter(|group| group.len() < group_size).collect();
        if short.is_empty() {
            return Ok(false);
        }
        let ids: Vec<String> = short.iter().map(|group| group[0].candidate.hit.document_id.clone()).collect();
        let records = self.store.documents(ids).await?;
        Ok(short.iter().zip(records).any(|(group, record)| record.is_some_and(|r| r.chunks.len() > group.len())))
    }

    /// `candidates` in the rerank scorer's order with its scores, or as they are.
    async fn reranked(&self, query: &Query, candidates: Vec<FusedHit>, rerank: bool) -> Result<Vec<Ranked>> {
        if !rerank || candidates.is_empty() {
            return Ok(candidates.into_iter().map(|candidate| Ranked { candidate, rerank_score: None }).collect());
        }
        let texts: Vec<String> = candidates.iter().map(|c| c.hit.text.clone().unwrap_or_default()).collect();
        let Query::Text(query_text) = query else { unreachable!("validated: rerank needs text queries") };
        let reranked = self.reranker.rerank(query_text, &texts, RerankOptions::default()).await?;
        let mut slots: Vec<Option<FusedHit>> = candidates.into_iter().map(Some).collect();
        Ok(reranked
            .ranks
            .iter()
            .map(|rank| Ranked {
                candidate: slots[rank.index].take().expect("each index once"),
                rerank_score: Some(rank.score),
            })
            .collect())
    }

    /// The best `pool` chunks for one query by the request's mode, best first, with
    /// the threshold applied to the mode's score.
    async fn candidates(
        &self,
        params: &SearchParams,
        query: &Query,
        sides: &mut Sides<'_>,
        pool: usize,
        rerank: bool,
    ) -> Result<Candidates> {
        let vector = sides.vector;
        let page_content = page_content(params, rerank);
        let side_content = self.side_content(page_content);
        let sides_carry_content = side_content == page_content;
        let by_vector = |count: usize, score_threshold: Option<f32>, content: HitContent| StoreQuery {
            vector,
            count,
            score_threshold,
            filter: &params.filter,
            with_text: content.with_text,
            with_metadata: content.with_metadata,
            with_vector: content.with_vector,
        };
        let text = match query {
            Query::Text(text) => text.as_str(),
            Query::Vector(_) => "",
        };
        let above_threshold = |hit: &FusedHit| params.score_threshold.is_none_or(|threshold| hit.score >= threshold);
        Ok(match params.mode {
            SearchMode::Vector => {
                let hits = self.store.search(by_vector(pool, params.score_threshold, page_content)).await?;
                let exhausted = hits.len() < pool;
                let hits = hits
                    .into_iter()
                    .map(|hit| FusedHit { score: hit.score, vector_score: Some(hit.score), keyword_score: None, hit })
                    .collect();
                Candidates { hits, exhausted }
            }
            SearchMode::Keyword => {
                let hits = self.store.keyword_search(keyword_query(params, text, pool, page_content)).await?;
                let exhausted = hits.len() < pool;
                let hits = hits
                    .into_iter()
                    .map(|hit| FusedHit { score: hit.score, vector_score: None, keyword_score: Some(hit.score), hit })
                    .filter(above_threshold)
                    .collect();
                Candidates { hits, exhausted }
            }
            SearchMode::Hybrid => {
                let depth = hybrid_depth(params, self.rerank_pool(rerank));
                let count = pool.max(depth);
                let (by_vector, by_keyword) = futures::future::try_join(
                    self.store.search(by_vector(count, None, side_content)),
                    sides.keyword.hits(self.store.as_ref(), keyword_query(params, text, depth, side_content)),
                )
                .await?;
                let exhausted = by_vector.len() < count;
                let alpha = params.alpha.unwrap_or(DEFAULT_ALPHA);
                let mut fused = fusion::fuse(by_vector, by_keyword, alpha, params.fusion, depth);
                fused.retain(above_threshold);
                fused.truncate(pool);
                if !sides_carry_content {
                    self.store
                        .fill_content(fused.iter_mut().map(|fused| &mut fused.hit).collect(), page_content)
                        .await?;
                }
                Candidates { hits: fused, exhausted }
            }
        })
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
        if let Some(threshold) = params.score_threshold {
            // Cosines lie in [-1, 1]; BM25 and fused scores are not bounded the same way.
            let valid = match params.mode {
                SearchMode::Vector => (-1.0..=1.0).contains(&threshold),
                SearchMode::Keyword | SearchMode::Hybrid => threshold.is_finite(),
            };
            if !valid {
                return Err(Error::invalid(
                    "score_threshold",
                    format!("must be between -1 and 1 in vector mode (a finite number otherwise), not {threshold}"),
                ));
            }
        }
        if let Some(size) = params.group_size
            && !(1..=grouping::MAX_GROUP_SIZE).contains(&size)
        {
            return Err(Error::invalid(
                "group_size",
                format!("must be between 1 and {}, not {size}", grouping::MAX_GROUP_SIZE),
            ));
        }
        if let Some(alpha) = params.alpha
            && !(0.0..=1.0).contains(&alpha)
        {
            return Err(Error::invalid("alpha", format!("must be between 0 and 1, not {alpha}")));
        }
        if params.mode != SearchMode::Vector
            && let Some(index) = params.queries.iter().position(|q| matches!(q, Query::Vector(_)))
        {
            return Err(Error::invalid(
                format!("queries[{index}]"),
                "is a vector; keyword and hybrid modes need text queries",
            ));
        }
        params.filter.validate("filter")?;
        let dim = self.engine.info()?.dim;
        // The model's input limit, in every mode: a query a vector search would refuse
        // is refused by keyword search too (which reads at most its first 256
        // distinct terms, so its cost stays bounded below the limit).
        let max_chars = self.engine.limits().max_input_chars;
        for (index, query) in params.queries.iter().enumerate() {
            match query {
                Query::Text(text) if text.trim().is_empty() => {
                    return Err(Error::invalid(format!("queries[{index}].text"), "is empty"));
                }
                Query::Text(text) if text.len() > max_chars && text.chars().count() > max_chars => {
                    return Err(Error::invalid(
                        format!("queries[{index}].text"),
                        format!("is longer than the limit of {max_chars} characters"),
                    ));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn page(top_k: usize, group_size: Option<usize>) -> SearchParams {
        SearchParams {
            queries: vec![Query::Text("q".into())],
            top_k,
            score_threshold: None,
            offset: 0,
            filter: Filter::default(),
            include_text: true,
            include_metadata: false,
            include_vectors: false,
            rerank: None,
            max_top_k: 1000,
            mode: SearchMode::Hybrid,
            alpha: None,
            fusion: Fusion::default(),
            group_size,
            highlight: false,
        }
    }

    #[test]
    fn each_hybrid_side_ranks_the_larger_of_its_candidates_the_page_and_the_rerank_pool() {
        assert_eq!(hybrid_depth(&page(10, None), None), HYBRID_CANDIDATES);
        // Reranked: the scorer's 50 candidates come from both sides' best 50.
        assert_eq!(hybrid_depth(&page(10, None), Some(50)), 50);
        assert_eq!(hybrid_depth(&page(10, Some(3)), None), 30);
        assert_eq!(hybrid_depth(&page(100, None), Some(50)), 100);
    }

    #[test]
    fn the_depth_ignores_the_offset_so_that_pages_of_one_ranking_agree() {
        let mut later = page(10, None);
        later.offset = 40;
        assert_eq!(hybrid_depth(&later, None), hybrid_depth(&page(10, None), None));
    }
}
