//! What the HTTP routes call: the embedwire.v1 services, either in the same process
//! ([`crate::InProcessUpstream`], no network hop) or over gRPC
//! ([`crate::GrpcUpstream`], the standalone gateway). Routes are written once against
//! this trait, so both deployments answer identically.
//!
//! Stateful answers (ingest, jobs, search) come with their [`Origin`]: the index that
//! answered and the upstream that holds it. With embedded stores every server has an
//! index of its own, so a failover changes what a search can find; the origin makes
//! that visible on every answer, and [`HealthReport`] says when the index that held
//! the data cannot be reached.

use std::future::Future;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use embedwire_proto::v1::{
    CountAccuracy, CreateCollectionRequest, CreateCollectionResponse, DeleteCollectionResponse, EmbedRequest,
    EmbedResponse, GetDocumentsRequest, GetDocumentsResponse, GetIndexStatsResponse, GetJobResponse, InfoResponse,
    IngestRequest, IngestResponse, ListCollectionsResponse, RerankRequest, RerankResponse, SearchRequest,
    SearchResponse, StoreInfo,
};
use serde::Serialize;
use tonic::Status;
use utoipa::ToSchema;

/// HTTP response header (and gRPC response metadata, as servers send it) naming the
/// index an answer came from.
pub const INDEX_HEADER: &str = "x-embedwire-index";
/// HTTP response header naming the upstream an answer came from: its address, or
/// [`IN_PROCESS`].
pub const UPSTREAM_HEADER: &str = "x-embedwire-upstream";
/// The upstream name of the in-process deployment.
pub const IN_PROCESS: &str = "in-process";

/// Whether the services can take work, for `/readyz` and `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The model is loaded and the index open.
    pub ready: bool,
    /// Why not, when not ready.
    pub detail: String,
}

/// Where a stateful answer came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The index (`StoreInfo.index_id`): equal on servers sharing a store, one per
    /// server with embedded stores.
    pub index_id: String,
    /// The upstream's address, or [`IN_PROCESS`].
    pub upstream: String,
}

impl Origin {
    /// Adds [`INDEX_HEADER`] and [`UPSTREAM_HEADER`]. A value that is not a valid
    /// header (never the case for ids the server makes) is left out rather than
    /// failing the answer.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        for (name, value) in [(INDEX_HEADER, &self.index_id), (UPSTREAM_HEADER, &self.upstream)] {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(name, value);
            }
        }
    }

    /// The index named in a server's response metadata, else `fallback` (what the
    /// upstream's Info said), with `upstream` as the upstream.
    pub fn from_metadata(metadata: &tonic::metadata::MetadataMap, fallback: String, upstream: &str) -> Self {
        let index_id = metadata
            .get(INDEX_HEADER)
            .and_then(|value| value.to_str().ok())
            .filter(|value| !value.is_empty())
            .map_or(fallback, str::to_string);
        Origin { index_id, upstream: upstream.to_string() }
    }
}

/// An answer with its [`Origin`].
#[derive(Debug, Clone)]
pub struct Served<T> {
    pub value: T,
    pub origin: Origin,
}

/// The store that holds an index, as `/healthz` reports it (Info's `StoreInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct StoreStatus {
    /// `embedded` (the server's own files) or `weaviate`.
    pub kind: String,
    /// Whether other servers read and write the same index.
    pub shared: bool,
    /// The index's id: equal on every server sharing it.
    pub index_id: String,
    /// Whether the store can be reached now.
    pub healthy: bool,
    /// The store's nodes (empty for embedded).
    pub nodes: Vec<StoreNodeStatus>,
}

/// One node of a store cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct StoreNodeStatus {
    pub name: String,
    pub address: String,
    pub healthy: bool,
}

impl StoreStatus {
    /// Names of its nodes that are not healthy now (the server keeps every node it
    /// has known in the list, so a lost one shows here).
    pub fn missing_nodes(&self) -> Vec<&str> {
        self.nodes.iter().filter(|n| !n.healthy).map(|n| n.name.as_str()).collect()
    }

    /// Why the store is short of nodes, naming them; None when every node is there.
    pub fn missing_nodes_detail(&self) -> Option<String> {
        let missing = self.missing_nodes();
        (!missing.is_empty()).then(|| {
            format!(
                "store node {} of index {} missing ({} of {} nodes healthy)",
                missing.join(", "),
                self.index_id,
                self.nodes.len() - missing.len(),
                self.nodes.len()
            )
        })
    }

    /// Info's store, or for a server that does not report one (older servers) an
    /// embedded, unshared index named after the upstream: each server is its own index.
    pub fn from_wire(store: Option<&StoreInfo>, upstream: &str) -> Self {
        match store {
            Some(store) => StoreStatus {
                kind: store.kind.clone(),
                shared: store.shared,
                index_id: if store.index_id.is_empty() { upstream.to_string() } else { store.index_id.clone() },
                healthy: store.healthy,
                nodes: store
                    .nodes
                    .iter()
                    .map(|node| StoreNodeStatus {
                        name: node.name.clone(),
                        address: node.address.clone(),
                        healthy: node.healthy,
                    })
                    .collect(),
            },
            None => StoreStatus {
                kind: "embedded".into(),
                shared: false,
                index_id: upstream.to_string(),
                healthy: true,
                nodes: Vec::new(),
            },
        }
    }
}

/// One upstream of the standalone gateway, as `/healthz` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct UpstreamStatus {
    /// Its address.
    pub address: String,
    /// It answered the last health check with SERVING.
    pub healthy: bool,
    /// Its store's kind (`embedded`, `weaviate`).
    pub store_kind: String,
    /// The index it serves.
    pub index_id: String,
    /// Whether other servers share that index.
    pub shared: bool,
    /// Whether its store was reachable at the last check.
    pub store_healthy: bool,
    /// Documents in its index, when known (last seen while it answered): exact at
    /// the last probe, or the last exact count its server had then (see
    /// `document_count_exact`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_count: Option<u64>,
    /// Whether its server said `document_count` was exact at the last probe.
    pub document_count_exact: bool,
    /// Why its count is not exact (a store node missing, a failed count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_count_detail: Option<String>,
    /// Documents stored but not indexed yet at the last probe (a job is running).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_documents: Option<u64>,
    /// Documents the gateway ingested into another index while this one did not
    /// answer, and has not found in it since (absent when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_documents: Option<u64>,
    /// Whether ingest and search calls go to it now.
    pub answering: bool,
}

/// A document count as far as the index that answers can vouch for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentCount {
    /// The count: exact now, or the last exact one (`age` old); None when no exact
    /// count is known.
    pub value: Option<u64>,
    /// Whether `value` is exact now.
    pub exact: bool,
    /// How long ago `value` was exact, when it is not exact now.
    pub age: Option<Duration>,
    /// Why it is not exact now.
    pub detail: Option<String>,
}

impl DocumentCount {
    /// No count to vouch for, and why.
    pub fn unknown(detail: impl Into<String>) -> Self {
        DocumentCount { value: None, exact: false, age: None, detail: Some(detail.into()) }
    }

    /// The count of a GetIndexStats answer just received. A server that does not
    /// say (older ones: UNSPECIFIED) meant its counts as exact.
    pub fn from_stats(stats: &GetIndexStatsResponse) -> Self {
        let detail = (!stats.counts_detail.is_empty()).then(|| stats.counts_detail.clone());
        match stats.counts_accuracy() {
            CountAccuracy::Unspecified | CountAccuracy::Exact => {
                DocumentCount { value: Some(stats.document_count), exact: true, age: None, detail: None }
            }
            CountAccuracy::LastExact => DocumentCount {
                value: Some(stats.document_count),
                exact: false,
                age: Some(Duration::from_millis(stats.counts_age_ms)),
                detail,
            },
            CountAccuracy::Unknown => {
                DocumentCount::unknown(detail.unwrap_or_else(|| "the store has not counted exactly yet".into()))
            }
        }
    }
}

/// What `/healthz` and `/readyz` report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    /// Whether the model is loaded and some index can take work.
    pub readiness: Readiness,
    /// Documents in the index that answers, as far as it can vouch for them.
    pub document_count: DocumentCount,
    /// The store of the index that answers.
    pub store: StoreStatus,
    /// Every upstream (the standalone gateway only).
    pub upstreams: Option<Vec<UpstreamStatus>>,
    /// Why answers may be missing data: the index that held it cannot be reached, the
    /// store is unhealthy everywhere, or the answering index lacks documents another
    /// upstream's index holds (after a failback). `None` when all is well.
    pub degraded: Option<String>,
    /// Why the store serves with less than all of itself: the nodes it is missing.
    /// `/healthz` says `degraded`; `/readyz` stays ready (the store still answers).
    pub store_nodes_missing: Option<String>,
}

/// The embedwire.v1 calls the HTTP layer needs.
pub trait Upstream: Send + Sync + 'static {
    /// `EmbedService/Embed`, with the response metadata (the server's timing).
    fn embed(
        &self,
        request: EmbedRequest,
    ) -> impl Future<Output = Result<tonic::Response<EmbedResponse>, Status>> + Send;
    /// `RerankService/Rerank`, with the response metadata (the server's timing).
    /// Stateless like embed: any upstream answers.
    fn rerank(
        &self,
        request: RerankRequest,
    ) -> impl Future<Output = Result<tonic::Response<RerankResponse>, Status>> + Send;
    /// `EmbedService/Info`.
    fn info(&self) -> impl Future<Output = Result<InfoResponse, Status>> + Send;
    /// `SearchService/Ingest`.
    fn ingest(&self, request: IngestRequest) -> impl Future<Output = Result<Served<IngestResponse>, Status>> + Send;
    /// `SearchService/GetJob`: job `job_id` of `collection` (empty: the default).
    fn get_job(
        &self,
        collection: String,
        job_id: String,
    ) -> impl Future<Output = Result<Served<GetJobResponse>, Status>> + Send;
    /// `SearchService/Search`.
    fn search(&self, request: SearchRequest) -> impl Future<Output = Result<Served<SearchResponse>, Status>> + Send;
    /// `SearchService/GetDocuments`, from the upstream searches go to.
    fn get_documents(
        &self,
        request: GetDocumentsRequest,
    ) -> impl Future<Output = Result<Served<GetDocumentsResponse>, Status>> + Send;
    /// `SearchService/GetIndexStats` of `collection` (empty: the default).
    fn index_stats(
        &self,
        collection: String,
    ) -> impl Future<Output = Result<Served<GetIndexStatsResponse>, Status>> + Send;
    /// `CollectionService/CreateCollection`, where ingests go.
    fn create_collection(
        &self,
        request: CreateCollectionRequest,
    ) -> impl Future<Output = Result<Served<CreateCollectionResponse>, Status>> + Send;
    /// `CollectionService/ListCollections`: every collection (the route shows a key
    /// only those it reaches).
    fn list_collections(&self) -> impl Future<Output = Result<Served<ListCollectionsResponse>, Status>> + Send;
    /// `CollectionService/DeleteCollection`.
    fn delete_collection(
        &self,
        name: String,
    ) -> impl Future<Output = Result<Served<DeleteCollectionResponse>, Status>> + Send;
    /// Readiness, the index that answers and whether data went missing.
    fn health(&self) -> impl Future<Output = HealthReport> + Send;
    /// Prometheus text the upstream adds to `/metrics` (a gateway's routing gauges).
    fn metrics_text(&self) -> String;
}
