//! The upstream of the in-process deployment: the server's own service handlers,
//! called as plain async functions on the same port's HTTP requests.

use std::sync::Arc;

use embedwire_proto::v1::embed_service_server::EmbedService;
use embedwire_proto::v1::search_service_server::SearchService;
use embedwire_proto::v1::{
    EmbedRequest, EmbedResponse, GetIndexStatsRequest, GetIndexStatsResponse, GetJobRequest, GetJobResponse,
    InfoRequest, InfoResponse, IngestRequest, IngestResponse, SearchRequest, SearchResponse,
};
use tonic::{Request, Response, Status};

use crate::upstream::{Readiness, Upstream};

/// Tells whether the server has loaded its model and index.
pub type ReadinessProbe = Arc<dyn Fn() -> Readiness + Send + Sync>;
/// Renders the server's own counters as Prometheus text.
pub type MetricsRenderer = Arc<dyn Fn() -> String + Send + Sync>;

/// The server's handlers behind the HTTP routes.
pub struct InProcessUpstream<E, S> {
    embed: Arc<E>,
    search: Arc<S>,
    readiness: ReadinessProbe,
    metrics: MetricsRenderer,
}

impl<E: EmbedService, S: SearchService> InProcessUpstream<E, S> {
    /// Routes calls to `embed` and `search`, the same handler objects the gRPC server uses.
    pub fn new(embed: Arc<E>, search: Arc<S>, readiness: ReadinessProbe, metrics: MetricsRenderer) -> Self {
        InProcessUpstream { embed, search, readiness, metrics }
    }
}

impl<E: EmbedService, S: SearchService> Upstream for InProcessUpstream<E, S> {
    async fn embed(&self, request: EmbedRequest) -> Result<Response<EmbedResponse>, Status> {
        self.embed.embed(Request::new(request)).await
    }

    async fn info(&self) -> Result<InfoResponse, Status> {
        self.embed.info(Request::new(InfoRequest {})).await.map(Response::into_inner)
    }

    async fn ingest(&self, request: IngestRequest) -> Result<IngestResponse, Status> {
        self.search.ingest(Request::new(request)).await.map(Response::into_inner)
    }

    async fn get_job(&self, job_id: String) -> Result<GetJobResponse, Status> {
        self.search.get_job(Request::new(GetJobRequest { job_id })).await.map(Response::into_inner)
    }

    async fn search(&self, request: SearchRequest) -> Result<SearchResponse, Status> {
        self.search.search(Request::new(request)).await.map(Response::into_inner)
    }

    async fn index_stats(&self) -> Result<GetIndexStatsResponse, Status> {
        self.search.get_index_stats(Request::new(GetIndexStatsRequest {})).await.map(Response::into_inner)
    }

    async fn readiness(&self) -> Readiness {
        (self.readiness)()
    }

    fn metrics_text(&self) -> String {
        (self.metrics)()
    }
}
