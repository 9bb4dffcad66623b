//! Collections over HTTP: `/v1/collections` to create and list them,
//! `/v1/collections/{name}` to describe and delete one, and under it the routes of the
//! existing contract (`ingest`, `jobs/{job_id}`, `search`, `documents/{id}`) acting on
//! that collection, with the same shapes. `default` names the default collection,
//! the one the contract's own routes act on.
//!
//! Who may call what is the access layer's business ([`crate::access`]): it checks the
//! collection a path names against the key's scope before any handler runs. Listing
//! is the one place a handler looks at the key, to show it only what it reaches.

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::Response;
use embedwire_proto::v1::{Collection, CollectionIndex, CollectionSettings, CreateCollectionRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::access::{DEFAULT_COLLECTION, Grant};
use crate::encoding::json_response;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::routes::v1::{self, IngestBody, SearchBody};
use crate::state::AppState;
use crate::upstream::{Served, Upstream};

/// `POST /v1/collections` body: a name and settings; a setting left out takes the
/// server's.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateCollectionBody {
    /// 1 to 48 lower-case letters, digits and underscores, starting with a letter
    /// (not `default`).
    pub name: String,
    /// Longest chunk, in model tokens.
    #[serde(default)]
    pub chunk_tokens: Option<u32>,
    /// Tokens each chunk repeats from the one before.
    #[serde(default)]
    pub chunk_overlap_tokens: Option<u32>,
    /// The vector index: `"exact"` or `"hnsw"`.
    #[serde(default)]
    #[schema(example = "exact")]
    pub index: Option<String>,
    /// Whether keyword and hybrid search are possible (a BM25 index beside the vectors).
    #[serde(default)]
    pub keyword_index: Option<bool>,
}

/// A collection as created.
#[derive(Debug, Serialize, ToSchema)]
pub struct CollectionBody {
    pub name: String,
    pub chunk_tokens: u32,
    pub chunk_overlap_tokens: u32,
    /// `"exact"` or `"hnsw"`.
    pub index: &'static str,
    pub keyword_index: bool,
    /// Unix time in seconds.
    pub created_at: f64,
}

/// `GET /v1/collections` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct CollectionList {
    /// The named collections the key reaches, by name (the default collection is
    /// always there and not listed).
    pub collections: Vec<CollectionBody>,
}

/// `GET /v1/collections/{name}` answer: the collection and what it holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct CollectionStatsBody {
    pub name: String,
    /// Its settings; absent for the default collection, which has the server's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collection: Option<CollectionBody>,
    pub document_count: u64,
    pub chunk_count: u64,
    /// Documents stored but not indexed yet (a job is running).
    pub pending_documents: u64,
}

/// `DELETE /v1/collections/{name}` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeletedCollectionBody {
    /// Documents the collection held.
    pub deleted_documents: u64,
}

fn collection_body(collection: Collection) -> CollectionBody {
    let settings = collection.settings.unwrap_or_default();
    CollectionBody {
        name: collection.name,
        chunk_tokens: settings.chunk_tokens.unwrap_or_default(),
        chunk_overlap_tokens: settings.chunk_overlap_tokens.unwrap_or_default(),
        index: if settings.index() == CollectionIndex::Hnsw { "hnsw" } else { "exact" },
        keyword_index: settings.keyword_index.unwrap_or_default(),
        created_at: collection.created_at,
    }
}

/// Extension: creates an empty collection (admin keys only).
#[utoipa::path(post, path = "/v1/collections", request_body = CreateCollectionBody,
    responses(
        (status = 200, body = CollectionBody),
        (status = 400, body = crate::error::ErrorDetail),
        (status = 403, body = crate::error::ErrorDetail),
        (status = 409, body = crate::error::ErrorDetail)))]
pub async fn create<U: Upstream>(
    State(state): State<AppState<U>>,
    JsonBody(body): JsonBody<CreateCollectionBody>,
) -> Result<Response, ApiError> {
    let index = match body.index.as_deref() {
        None => CollectionIndex::Unspecified,
        Some("exact") => CollectionIndex::Exact,
        Some("hnsw") => CollectionIndex::Hnsw,
        Some(other) => return Err(ApiError::invalid("index", format!("must be \"exact\" or \"hnsw\", not {other:?}"))),
    };
    let settings = CollectionSettings {
        chunk_tokens: body.chunk_tokens,
        chunk_overlap_tokens: body.chunk_overlap_tokens,
        index: index as i32,
        keyword_index: body.keyword_index,
    };
    let request = CreateCollectionRequest { name: body.name, settings: Some(settings) };
    let Served { value: reply, origin } = state
        .upstream
        .create_collection(request)
        .await
        .map_err(|status| ApiError::from(status).renamed("settings.index", "index"))?;
    let collection = reply.collection.ok_or_else(|| v1::missing("collection"))?;
    let mut response = json_response(&collection_body(collection));
    origin.write_headers(response.headers_mut());
    Ok(response)
}

/// Extension: the collections this key reaches.
#[utoipa::path(get, path = "/v1/collections", responses((status = 200, body = CollectionList)))]
pub async fn list<U: Upstream>(
    State(state): State<AppState<U>>,
    grant: Option<Extension<Grant>>,
) -> Result<Response, ApiError> {
    let Served { value: reply, origin } = state.upstream.list_collections().await?;
    let collections = reply
        .collections
        .into_iter()
        .filter(|collection| grant.as_ref().is_none_or(|grant| grant.reaches(&collection.name)))
        .map(collection_body)
        .collect();
    let mut response = json_response(&CollectionList { collections });
    origin.write_headers(response.headers_mut());
    Ok(response)
}

/// Extension: a collection's settings and counts (`default`: the default collection).
#[utoipa::path(get, path = "/v1/collections/{name}", params(("name" = String, Path)),
    responses((status = 200, body = CollectionStatsBody), (status = 404, body = crate::error::ErrorDetail)))]
pub async fn describe<U: Upstream>(
    State(state): State<AppState<U>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let Served { value: stats, origin } = state.upstream.index_stats(name.clone()).await?;
    let collection = match name.as_str() {
        DEFAULT_COLLECTION => None,
        _ => state
            .upstream
            .list_collections()
            .await?
            .value
            .collections
            .into_iter()
            .find(|collection| collection.name == name)
            .map(collection_body),
    };
    let body = CollectionStatsBody {
        name,
        collection,
        document_count: stats.document_count,
        chunk_count: stats.chunk_count,
        pending_documents: stats.pending_documents,
    };
    let mut response = json_response(&body);
    origin.write_headers(response.headers_mut());
    Ok(response)
}

/// Extension: deletes a collection with its documents, jobs and vectors (admin keys
/// only).
#[utoipa::path(delete, path = "/v1/collections/{name}", params(("name" = String, Path)),
    responses(
        (status = 200, body = DeletedCollectionBody),
        (status = 403, body = crate::error::ErrorDetail),
        (status = 404, body = crate::error::ErrorDetail)))]
pub async fn delete<U: Upstream>(
    State(state): State<AppState<U>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let Served { value: reply, origin } = state.upstream.delete_collection(name).await?;
    let mut response = json_response(&DeletedCollectionBody { deleted_documents: reply.deleted_documents });
    origin.write_headers(response.headers_mut());
    Ok(response)
}

/// `POST /v1/ingest` into the collection.
#[utoipa::path(post, path = "/v1/collections/{name}/ingest", params(("name" = String, Path)),
    request_body = IngestBody,
    responses((status = 200, body = v1::JobBody), (status = 400, body = crate::error::ErrorDetail),
        (status = 404, body = crate::error::ErrorDetail)))]
pub async fn ingest<U: Upstream>(
    State(state): State<AppState<U>>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<IngestBody>,
) -> Result<Response, ApiError> {
    v1::ingest_into(&state, name, body).await
}

/// `GET /v1/jobs/{job_id}` of the collection: a job of another collection is not
/// found here.
#[utoipa::path(get, path = "/v1/collections/{name}/jobs/{job_id}",
    params(("name" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, body = v1::JobBody), (status = 404, body = crate::error::ErrorDetail)))]
pub async fn get_job<U: Upstream>(
    State(state): State<AppState<U>>,
    Path((name, job_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    v1::job_of(&state, name, job_id).await
}

/// `POST /v1/search` in the collection.
#[utoipa::path(post, path = "/v1/collections/{name}/search", params(("name" = String, Path)),
    request_body = SearchBody,
    responses((status = 200, body = v1::SearchReply), (status = 400, body = crate::error::ErrorDetail),
        (status = 404, body = crate::error::ErrorDetail)))]
pub async fn search<U: Upstream>(
    State(state): State<AppState<U>>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Result<Response, ApiError> {
    v1::search_in(&state, name, body).await
}

/// `GET /v1/documents/{id}` of the collection.
#[utoipa::path(get, path = "/v1/collections/{name}/documents/{id}",
    params(("name" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = v1::DocumentBody), (status = 404, body = crate::error::ErrorDetail)))]
pub async fn get_document<U: Upstream>(
    State(state): State<AppState<U>>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    v1::document_of(&state, name, id).await
}
