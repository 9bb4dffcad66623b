//! The upstream of the in-process deployment: the server's own service handlers,
//! called as plain async functions on the same port's HTTP requests.
//!
//! Answers name the server's own index: the `x-embedwire-index` metadata of the
//! handler's response when it sets one, else the index id of its `Info`.

use std::sync::{Arc, OnceLock};

use embedwire_proto::v1::collection_service_server::CollectionService;
use embedwire_proto::v1::embed_service_server::EmbedService;
use embedwire_proto::v1::rerank_service_server::RerankService;
use embedwire_proto::v1::search_service_server::SearchService;
use embedwire_proto::v1::{
    CreateCollectionRequest, CreateCollectionResponse, DeleteCollectionRequest, DeleteCollectionResponse, EmbedRequest,
    EmbedResponse, GetDocumentsRequest, GetDocumentsResponse, GetIndexStatsRequest, GetIndexStatsResponse,
    GetJobRequest, GetJobResponse, InfoRequest, InfoResponse, IngestRequest, IngestResponse, ListCollectionsRequest,
    ListCollectionsResponse, RerankRequest, RerankResponse, SearchRequest, SearchResponse,
};
use tonic::{Request, Response, Status};

use crate::upstream::{DocumentCount, HealthReport, IN_PROCESS, Origin, Readiness, Served, StoreStatus, Upstream};

/// Tells whether the server has loaded its model and index.
pub type ReadinessProbe = Arc<dyn Fn() -> Readiness + Send + Sync>;

/// The server's handlers behind the HTTP routes.
pub struct InProcessUpstream<E, S, R, C> {
    embed: Arc<E>,
    search: Arc<S>,
    rerank: Arc<R>,
    collections: Arc<C>,
    readiness: ReadinessProbe,
    /// The index id from Info, once Info reported a store (it does not change while
    /// the process runs).
    index_id: OnceLock<String>,
}

impl<E: EmbedService, S: SearchService, R: RerankService, C: CollectionService> InProcessUpstream<E, S, R, C> {
    /// Routes calls to `embed`, `search`, `rerank` and `collections`, the same handler
    /// objects the gRPC server uses.
    pub fn new(embed: Arc<E>, search: Arc<S>, rerank: Arc<R>, collections: Arc<C>, readiness: ReadinessProbe) -> Self {
        InProcessUpstream { embed, search, rerank, collections, readiness, index_id: OnceLock::new() }
    }

    /// The store as Info reports it now.
    async fn store(&self) -> StoreStatus {
        let info = self.info().await.ok();
        let store = StoreStatus::from_wire(info.as_ref().and_then(|i| i.store.as_ref()), IN_PROCESS);
        if info.is_some_and(|i| i.store.is_some()) {
            let _ = self.index_id.set(store.index_id.clone());
        }
        store
    }

    /// `response` with the index it came from.
    async fn served<T>(&self, response: Response<T>) -> Served<T> {
        let fallback = match self.index_id.get() {
            Some(id) => id.clone(),
            None => self.store().await.index_id,
        };
        let origin = Origin::from_metadata(response.metadata(), fallback, IN_PROCESS);
        Served { value: response.into_inner(), origin }
    }
}

impl<E: EmbedService, S: SearchService, R: RerankService, C: CollectionService> Upstream
    for InProcessUpstream<E, S, R, C>
{
    async fn embed(&self, request: EmbedRequest) -> Result<Response<EmbedResponse>, Status> {
        self.embed.embed(Request::new(request)).await
    }

    async fn rerank(&self, request: RerankRequest) -> Result<Response<RerankResponse>, Status> {
        self.rerank.rerank(Request::new(request)).await
    }

    async fn info(&self) -> Result<InfoResponse, Status> {
        self.embed.info(Request::new(InfoRequest {})).await.map(Response::into_inner)
    }

    async fn ingest(&self, request: IngestRequest) -> Result<Served<IngestResponse>, Status> {
        let response = self.search.ingest(Request::new(request)).await?;
        Ok(self.served(response).await)
    }

    async fn get_job(&self, collection: String, job_id: String) -> Result<Served<GetJobResponse>, Status> {
        let response = self.search.get_job(Request::new(GetJobRequest { job_id, collection })).await?;
        Ok(self.served(response).await)
    }

    async fn search(&self, request: SearchRequest) -> Result<Served<SearchResponse>, Status> {
        let response = self.search.search(Request::new(request)).await?;
        Ok(self.served(response).await)
    }

    async fn get_documents(&self, request: GetDocumentsRequest) -> Result<Served<GetDocumentsResponse>, Status> {
        let response = self.search.get_documents(Request::new(request)).await?;
        Ok(self.served(response).await)
    }

    async fn index_stats(&self, collection: String) -> Result<Served<GetIndexStatsResponse>, Status> {
        let response = self.search.get_index_stats(Request::new(GetIndexStatsRequest { collection })).await?;
        Ok(self.served(response).await)
    }

    async fn create_collection(
        &self,
        request: CreateCollectionRequest,
    ) -> Result<Served<CreateCollectionResponse>, Status> {
        let response = self.collections.create_collection(Request::new(request)).await?;
        Ok(self.served(response).await)
    }

    async fn list_collections(&self) -> Result<Served<ListCollectionsResponse>, Status> {
        let response = self.collections.list_collections(Request::new(ListCollectionsRequest {})).await?;
        Ok(self.served(response).await)
    }

    async fn delete_collection(&self, name: String) -> Result<Served<DeleteCollectionResponse>, Status> {
        let response = self.collections.delete_collection(Request::new(DeleteCollectionRequest { name })).await?;
        Ok(self.served(response).await)
    }

    /// One server, one index: degraded when its store is unhealthy or misses a node.
    /// The count is what the store vouches for (never a failed count read as 0).
    async fn health(&self) -> HealthReport {
        let readiness = (self.readiness)();
        let store = self.store().await;
        let document_count = match readiness.ready {
            true => match self.index_stats(String::new()).await {
                Ok(stats) => DocumentCount::from_stats(&stats.value),
                Err(status) => DocumentCount::unknown(format!("counting failed: {}", status.message())),
            },
            false => DocumentCount::unknown(readiness.detail.clone()),
        };
        let degraded = (!store.healthy).then(|| format!("store {} ({}) unreachable", store.index_id, store.kind));
        let store_nodes_missing = store.missing_nodes_detail();
        HealthReport { readiness, document_count, store, upstreams: None, degraded, store_nodes_missing }
    }

    /// Nothing: the server's metrics are a collector in the HTTP layer's registry
    /// ([`crate::metrics::HttpMetrics::register_collector`]).
    fn metrics_text(&self) -> String {
        String::new()
    }
}
