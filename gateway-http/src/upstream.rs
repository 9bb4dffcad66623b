//! What the HTTP routes call: the embedwire.v1 services, either in the same process
//! ([`crate::InProcessUpstream`], no network hop) or over gRPC
//! ([`crate::GrpcUpstream`], the standalone gateway). Routes are written once against
//! this trait, so both deployments answer identically.

use std::future::Future;

use embedwire_proto::v1::{
    EmbedRequest, EmbedResponse, GetIndexStatsResponse, GetJobResponse, InfoResponse, IngestRequest, IngestResponse,
    SearchRequest, SearchResponse,
};
use tonic::Status;

/// Whether the services can take work, for `/readyz` and `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The model is loaded and the index open.
    pub ready: bool,
    /// Why not, when not ready.
    pub detail: String,
}

/// The embedwire.v1 calls the HTTP layer needs.
pub trait Upstream: Send + Sync + 'static {
    /// `EmbedService/Embed`, with the response metadata (the server's timing).
    fn embed(
        &self,
        request: EmbedRequest,
    ) -> impl Future<Output = Result<tonic::Response<EmbedResponse>, Status>> + Send;
    /// `EmbedService/Info`.
    fn info(&self) -> impl Future<Output = Result<InfoResponse, Status>> + Send;
    /// `SearchService/Ingest`.
    fn ingest(&self, request: IngestRequest) -> impl Future<Output = Result<IngestResponse, Status>> + Send;
    /// `SearchService/GetJob`.
    fn get_job(&self, job_id: String) -> impl Future<Output = Result<GetJobResponse, Status>> + Send;
    /// `SearchService/Search`.
    fn search(&self, request: SearchRequest) -> impl Future<Output = Result<SearchResponse, Status>> + Send;
    /// `SearchService/GetIndexStats`.
    fn index_stats(&self) -> impl Future<Output = Result<GetIndexStatsResponse, Status>> + Send;
    /// Whether the services are ready.
    fn readiness(&self) -> impl Future<Output = Readiness> + Send;
    /// Prometheus text the upstream adds to `/metrics` (the server's own counters).
    fn metrics_text(&self) -> String;
}
