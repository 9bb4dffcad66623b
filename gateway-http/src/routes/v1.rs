//! The routes of the existing gateways' contract (shared/http-api.md), with exactly
//! their shapes and defaults: `POST /v1/ingest`, `GET /v1/jobs/{job_id}`,
//! `POST /v1/search`. Extensions are optional fields old clients never see unless
//! they ask (`filter`, `score_threshold`, `citations`, `rerank`) or can ignore
//! (`document_ids`, `failed_documents`, and `rerank_score` and `vector_score` on hits
//! the server's cross-encoder reordered, whose `score` is then the rerank score).
//! Every answer names the index and upstream it came from in the `x-embedwire-index`
//! and `x-embedwire-upstream` headers.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::response::Response;
use embedwire_proto::v1::{
    self as wire, Condition, Document, Filter, IngestRequest, Job, JobStatus, SearchQuery, SearchRequest, StringSet,
    condition, search_query,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::encoding::json_response;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::state::AppState;
use crate::upstream::{Served, Upstream};

/// `top_k` when the request leaves it out, as in the existing gateways.
pub const DEFAULT_TOP_K: u32 = 5;

/// `POST /v1/ingest` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct IngestBody {
    /// Documents to add or replace (by id).
    pub documents: Vec<IngestDocument>,
}

/// One document to ingest.
#[derive(Debug, Deserialize, ToSchema)]
pub struct IngestDocument {
    /// Its id; missing or null: the server assigns a UUID. An existing id is replaced.
    #[serde(default)]
    pub id: Option<String>,
    /// The text; long texts are split into overlapping chunks.
    pub text: String,
    /// String metadata, returned with search results and usable in filters.
    #[serde(default)]
    pub metadata: Option<HashMap<String, String>>,
}

/// A job, as `POST /v1/ingest` and `GET /v1/jobs/{job_id}` return it.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobBody {
    pub job_id: String,
    /// `pending`, `running`, `completed` or `failed`.
    pub status: &'static str,
    pub total_documents: u32,
    /// Documents stored durably and searchable.
    pub processed_documents: u32,
    /// Why the job failed; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Unix time in seconds.
    pub started_at: f64,
    /// Unix time in seconds; null until the job ends.
    pub finished_at: Option<f64>,
    /// Extension: documents that could not be indexed.
    pub failed_documents: u32,
    /// Extension (ingest only): the id of every document, in request order, including
    /// the ones the server assigned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_ids: Option<Vec<String>>,
    /// Extension: why the job cannot progress right now while the server retries it
    /// (too few store replicas reachable, say); absent while it progresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Extension: Unix time in seconds since when the job has been retrying; absent while
    /// it progresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retrying_since: Option<f64>,
}

/// `POST /v1/search` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SearchBody {
    /// The query text.
    pub query: String,
    /// Results wanted (default 5).
    #[serde(default)]
    pub top_k: Option<u32>,
    /// Extension: a metadata filter.
    #[serde(default)]
    pub filter: Option<FilterBody>,
    /// Extension: drop results scoring below this.
    #[serde(default)]
    pub score_threshold: Option<f32>,
    /// Extension: add each result's chunk and character offsets in its document.
    #[serde(default)]
    pub citations: bool,
    /// Extension: reorder the best hits with the server's rerank scorer (`true`) or
    /// keep the vector order (`false`). Left out: the server's default, which is to
    /// rerank when it has a cross-encoder.
    #[serde(default)]
    pub rerank: Option<bool>,
    /// Extension: how chunks are found: `"vector"` (by meaning, the default),
    /// `"keyword"` (BM25 over their words) or `"hybrid"` (both, fused). When set, every
    /// result carries `vector_score` and `keyword_score` from the sides that found it.
    #[serde(default)]
    #[schema(example = "hybrid")]
    pub mode: Option<String>,
    /// Extension: the vector side's weight in hybrid mode, 0 to 1 (default 0.5).
    #[serde(default)]
    pub alpha: Option<f32>,
    /// Extension: how hybrid mode merges the rankings: `"relative_score"` (each side's
    /// scores scaled to [0, 1], weighted, added: the default) or `"rrf"` (reciprocal
    /// rank).
    #[serde(default)]
    #[schema(example = "relative_score")]
    pub fusion: Option<String>,
    /// Extension: `"document"` ranks documents, each by its best chunk: `top_k` counts
    /// documents and each brings its best `group_size` chunks, one after the other;
    /// `"none"` (the default) ranks chunks.
    #[serde(default)]
    #[schema(example = "document")]
    pub group_by: Option<String>,
    /// Extension: chunks per document when grouped, 1 to 100 (default 1).
    #[serde(default)]
    pub group_size: Option<u32>,
    /// Extension: mark each result's words that match the query's (lower-cased,
    /// stemmed, stop words left out) in `highlights`.
    #[serde(default)]
    pub highlight: bool,
}

/// A metadata filter: every `must` condition holds, at least one `should` condition
/// holds (when there are any), no `must_not` condition holds.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct FilterBody {
    #[serde(default)]
    pub must: Vec<ConditionBody>,
    #[serde(default)]
    pub should: Vec<ConditionBody>,
    #[serde(default)]
    pub must_not: Vec<ConditionBody>,
}

/// One condition on a metadata key: `equals` a value or is `any_of` several.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ConditionBody {
    pub key: String,
    #[serde(default)]
    pub equals: Option<String>,
    #[serde(default)]
    pub any_of: Option<Vec<String>>,
}

/// `POST /v1/search` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchReply {
    /// Best first.
    pub results: Vec<SearchResult>,
    /// Time spent on the request, embedding the query included.
    pub took_ms: f64,
}

/// One result: a chunk of a document.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResult {
    /// The document's id.
    pub id: String,
    /// Cosine similarity (the vectors are L2-normalized); in keyword mode the BM25
    /// score, in hybrid mode the fused score; for reranked hits, the rerank score,
    /// which orders them.
    pub score: f32,
    /// Extension, for reranked hits only: the rerank scorer's score (equal to `score`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank_score: Option<f32>,
    /// Extension, for reranked hits, and for every hit the vector side found when the
    /// request sets `mode`: the cosine similarity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_score: Option<f32>,
    /// Extension, when the request sets `mode`: the BM25 score, for hits the keyword
    /// side found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword_score: Option<f32>,
    /// The chunk's text.
    pub text: String,
    pub metadata: HashMap<String, String>,
    /// Extension, when `citations` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub citation: Option<Citation>,
    /// Extension, when `highlight` is set: the words of `text` that match the query's,
    /// in order, as offsets in the document (like `citation`: subtract its
    /// `start_char` to mark them in `text`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub highlights: Option<Vec<Highlight>>,
}

/// A stretch of a document's text, in Unicode code points.
#[derive(Debug, Serialize, ToSchema)]
pub struct Highlight {
    pub start_char: u32,
    pub end_char: u32,
}

/// Where a result's text sits in its document.
#[derive(Debug, Serialize, ToSchema)]
pub struct Citation {
    /// The chunk's position among the document's chunks.
    pub chunk_index: u32,
    /// Offset of the chunk's first character (Unicode code points) in the stored text.
    pub start_char: u32,
    /// Offset one past its last character.
    pub end_char: u32,
}

/// Ingest documents; answers at once with the job.
#[utoipa::path(post, path = "/v1/ingest", request_body = IngestBody,
    responses(
        (status = 200, body = JobBody, headers(
            ("x-embedwire-index" = String, description = "The index that answered"),
            ("x-embedwire-upstream" = String, description = "The upstream that holds it: its address, or in-process"))),
        (status = 400, body = crate::error::ErrorDetail)))]
pub async fn ingest<U: Upstream>(
    State(state): State<AppState<U>>,
    JsonBody(body): JsonBody<IngestBody>,
) -> Result<Response, ApiError> {
    ingest_into(&state, String::new(), body).await
}

/// Ingests `body` into `collection` (empty: the default).
pub async fn ingest_into<U: Upstream>(
    state: &AppState<U>,
    collection: String,
    body: IngestBody,
) -> Result<Response, ApiError> {
    let documents = body
        .documents
        .into_iter()
        .map(|d| Document { id: d.id.unwrap_or_default(), text: d.text, metadata: d.metadata.unwrap_or_default() })
        .collect();
    let Served { value: reply, origin } = state.upstream.ingest(IngestRequest { documents, collection }).await?;
    let job = reply.job.ok_or_else(|| missing("job"))?;
    let mut body = job_body(job);
    body.document_ids = Some(reply.document_ids);
    let mut response = json_response(&body);
    origin.write_headers(response.headers_mut());
    Ok(response)
}

/// A job's progress.
#[utoipa::path(get, path = "/v1/jobs/{job_id}", params(("job_id" = String, Path)),
    responses(
        (status = 200, body = JobBody, headers(
            ("x-embedwire-index" = String, description = "The index that answered"),
            ("x-embedwire-upstream" = String, description = "The upstream that holds it: its address, or in-process"))),
        (status = 404, body = crate::error::ErrorDetail)))]
pub async fn get_job<U: Upstream>(
    State(state): State<AppState<U>>,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    job_of(&state, String::new(), job_id).await
}

/// Job `job_id` of `collection` (empty: the default).
pub async fn job_of<U: Upstream>(
    state: &AppState<U>,
    collection: String,
    job_id: String,
) -> Result<Response, ApiError> {
    let Served { value: reply, origin } = state.upstream.get_job(collection, job_id).await?;
    let mut response = json_response(&job_body(reply.job.ok_or_else(|| missing("job"))?));
    origin.write_headers(response.headers_mut());
    Ok(response)
}

/// Semantic search over the ingested documents.
#[utoipa::path(post, path = "/v1/search", request_body = SearchBody,
    responses(
        (status = 200, body = SearchReply, headers(
            ("x-embedwire-index" = String, description = "The index that answered"),
            ("x-embedwire-upstream" = String, description = "The upstream that holds it: its address, or in-process"))),
        (status = 400, body = crate::error::ErrorDetail)))]
pub async fn search<U: Upstream>(
    State(state): State<AppState<U>>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Result<Response, ApiError> {
    search_in(&state, String::new(), body).await
}

/// Searches `collection` (empty: the default) with `body`.
pub async fn search_in<U: Upstream>(
    state: &AppState<U>,
    collection: String,
    body: SearchBody,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let citations = body.citations;
    let mode_named = body.mode.is_some();
    let mode = match body.mode.as_deref() {
        None | Some("vector") => wire::SearchMode::Vector,
        Some("keyword") => wire::SearchMode::Keyword,
        Some("hybrid") => wire::SearchMode::Hybrid,
        Some(other) => {
            return Err(ApiError::invalid(
                "mode",
                format!("must be \"vector\", \"keyword\" or \"hybrid\", not {other:?}"),
            ));
        }
    };
    let fusion = match body.fusion.as_deref() {
        None => wire::Fusion::Unspecified,
        Some("rrf") => wire::Fusion::ReciprocalRank,
        Some("relative_score") => wire::Fusion::RelativeScore,
        Some(other) => {
            return Err(ApiError::invalid("fusion", format!("must be \"rrf\" or \"relative_score\", not {other:?}")));
        }
    };
    let group_by = match body.group_by.as_deref() {
        None | Some("none") => wire::GroupBy::Unspecified,
        Some("document") => wire::GroupBy::Document,
        Some(other) => {
            return Err(ApiError::invalid("group_by", format!("must be \"document\" or \"none\", not {other:?}")));
        }
    };
    let highlight = body.highlight;
    let request = SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Text(body.query)) }],
        top_k: Some(body.top_k.unwrap_or(DEFAULT_TOP_K)),
        score_threshold: body.score_threshold,
        filter: body.filter.map(filter_to_wire).transpose()?,
        include_text: Some(true),
        include_metadata: Some(true),
        rerank: body.rerank,
        mode: if mode_named { mode as i32 } else { 0 },
        alpha: body.alpha,
        fusion: fusion as i32,
        group_by: group_by as i32,
        group_size: body.group_size,
        highlight,
        collection,
        ..SearchRequest::default()
    };
    let Served { value: reply, origin } =
        state.upstream.search(request).await.map_err(|status| {
            ApiError::from(status).renamed("queries[0].text", "query").renamed("queries[0]", "query")
        })?;
    let hits = reply.results.into_iter().next().map(|r| r.hits).unwrap_or_default();
    let results = hits
        .into_iter()
        .map(|hit| SearchResult {
            citation: citations.then(|| {
                let chunk = hit.chunk.unwrap_or_default();
                Citation { chunk_index: chunk.index, start_char: chunk.start_char, end_char: chunk.end_char }
            }),
            id: hit.document_id,
            score: hit.rerank_score.unwrap_or(hit.score),
            rerank_score: hit.rerank_score,
            // A request from before modes answers exactly as it did.
            vector_score: if mode_named { hit.vector_score } else { hit.rerank_score.and(hit.vector_score) },
            keyword_score: if mode_named { hit.keyword_score } else { None },
            highlights: highlight.then(|| {
                hit.highlights.iter().map(|h| Highlight { start_char: h.start_char, end_char: h.end_char }).collect()
            }),
            text: hit.text,
            metadata: hit.metadata,
        })
        .collect();
    let mut response = json_response(&SearchReply { results, took_ms: started.elapsed().as_secs_f64() * 1e3 });
    origin.write_headers(response.headers_mut());
    Ok(response)
}

/// `GET /v1/documents/{id}` answer: a stored document.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentBody {
    pub id: String,
    /// The text as stored (normalized); chunk and highlight offsets count in it.
    pub text: String,
    pub metadata: HashMap<String, String>,
    /// Its chunks, in order.
    pub chunks: Vec<Citation>,
    /// When this version was indexed, in Unix seconds.
    pub indexed_at: f64,
}

/// Extension: one stored document, as search results cite it (the search page
/// shows its first line as the result's title).
#[utoipa::path(get, path = "/v1/documents/{id}", params(("id" = String, Path)),
    responses(
        (status = 200, body = DocumentBody, headers(
            ("x-embedwire-index" = String, description = "The index that answered"),
            ("x-embedwire-upstream" = String, description = "The upstream that holds it: its address, or in-process"))),
        (status = 404, body = crate::error::ErrorDetail)))]
pub async fn get_document<U: Upstream>(
    State(state): State<AppState<U>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    document_of(&state, String::new(), id).await
}

/// Document `id` of `collection` (empty: the default).
pub async fn document_of<U: Upstream>(
    state: &AppState<U>,
    collection: String,
    id: String,
) -> Result<Response, ApiError> {
    let request = wire::GetDocumentsRequest { ids: vec![id.clone()], collection };
    let Served { value: reply, origin } = state.upstream.get_documents(request).await?;
    let document =
        reply.documents.into_iter().next().ok_or_else(|| ApiError::not_found(format!("id: no document {id:?}")))?;
    let chunks = document
        .chunks
        .into_iter()
        .map(|c| Citation { chunk_index: c.index, start_char: c.start_char, end_char: c.end_char })
        .collect();
    let body = DocumentBody {
        id: document.id,
        text: document.text,
        metadata: document.metadata,
        chunks,
        indexed_at: document.indexed_at,
    };
    let mut response = json_response(&body);
    origin.write_headers(response.headers_mut());
    Ok(response)
}

/// The job in the contract's shape.
pub fn job_body(job: Job) -> JobBody {
    let status = match job.status() {
        JobStatus::Pending | JobStatus::Unspecified => "pending",
        JobStatus::Running => "running",
        JobStatus::Completed => "completed",
        JobStatus::Failed => "failed",
    };
    JobBody {
        job_id: job.job_id,
        status,
        total_documents: job.total_documents,
        processed_documents: job.processed_documents,
        error: (!job.error.is_empty()).then_some(job.error),
        started_at: job.started_at,
        finished_at: job.finished_at,
        failed_documents: job.failed_documents,
        document_ids: None,
        last_error: (!job.last_error.is_empty()).then_some(job.last_error),
        retrying_since: job.retrying_since,
    }
}

fn filter_to_wire(filter: FilterBody) -> Result<Filter, ApiError> {
    let convert = |list: Vec<ConditionBody>, name: &str| -> Result<Vec<Condition>, ApiError> {
        list.into_iter()
            .enumerate()
            .map(|(index, c)| {
                let field = format!("filter.{name}[{index}]");
                let test = match (c.equals, c.any_of) {
                    (Some(value), None) => condition::Test::Equals(value),
                    (None, Some(values)) => condition::Test::AnyOf(StringSet { values }),
                    (Some(_), Some(_)) => return Err(ApiError::invalid(field, "has both equals and any_of; use one")),
                    (None, None) => return Err(ApiError::invalid(field, "needs equals or any_of")),
                };
                Ok(Condition { key: c.key, test: Some(test) })
            })
            .collect()
    };
    Ok(wire::Filter {
        must: convert(filter.must, "must")?,
        should: convert(filter.should, "should")?,
        must_not: convert(filter.must_not, "must_not")?,
    })
}

/// A 502 for an upstream answer without `field`.
pub(crate) fn missing(field: &str) -> ApiError {
    ApiError::with_status(
        axum::http::StatusCode::BAD_GATEWAY,
        tonic::Code::Internal,
        format!("the upstream answer has no {field}"),
    )
}
