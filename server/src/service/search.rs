//! `embedwire.v1.SearchService`.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use embedwire_proto::v1::search_service_server::SearchService;
use embedwire_proto::v1::{
    DeleteDocumentsRequest, DeleteDocumentsResponse, GetDocumentsRequest, GetDocumentsResponse, GetIndexStatsRequest,
    GetIndexStatsResponse, GetJobRequest, GetJobResponse, IngestRequest, IngestResponse, IngestStreamRequest,
    IngestStreamResponse, QueryResult, SearchRequest, SearchResponse, SearchStreamRequest, SearchStreamResponse,
    WatchJobRequest, WatchJobResponse,
};
use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use tokio::sync::watch;

use embedwire_gateway_http::access::Grant;

use crate::collections::Collections;
use crate::corpus::Corpus;
use crate::error::{Error, Result};
use crate::store::JobRecord;
use crate::wire;
use crate::wire::search as convert;

/// Hits per SearchStream message when the request does not say.
const DEFAULT_PAGE_SIZE: usize = 100;

/// The SearchService handlers; the collections appear once the model has loaded.
pub struct SearchApi {
    collections: Arc<OnceLock<Arc<Collections>>>,
}

impl SearchApi {
    /// Handlers over the collections the server installs once loaded.
    pub fn new(collections: Arc<OnceLock<Arc<Collections>>>) -> Self {
        SearchApi { collections }
    }

    /// The collection a request names (empty: the default one), if the request's key
    /// reaches it.
    async fn corpus(&self, grant: Option<&Grant>, collection: &str) -> Result<Arc<Corpus>, Status> {
        Grant::check(grant, collection)?;
        let collections = self
            .collections
            .get()
            .ok_or_else(|| Error::Unavailable("the index is still loading; retry shortly".into()))?;
        Ok(collections.corpus(collection).await?)
    }

    /// A response naming the index it came from (`x-embedwire-index`), so a client
    /// or gateway can tell when a failover put it on another index, and the model's
    /// precision (`x-embedwire-precision`).
    fn tagged<T>(&self, corpus: &Corpus, message: T) -> Response<T> {
        let mut response = Response::new(message);
        if let Ok(value) = corpus.store_description().index_id.parse() {
            response.metadata_mut().insert(INDEX_METADATA, value);
        }
        wire::add_precision_metadata(response.metadata_mut(), corpus.model_precision());
        response
    }
}

/// The response metadata key naming the index that answered.
pub const INDEX_METADATA: &str = "x-embedwire-index";

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl SearchService for SearchApi {
    async fn ingest(&self, request: Request<IngestRequest>) -> Result<Response<IngestResponse>, Status> {
        let grant = Grant::of(request.extensions()).cloned();
        let request = request.into_inner();
        let corpus = self.corpus(grant.as_ref(), &request.collection).await?;
        let documents = corpus.prepare_documents(convert::documents_from_wire(request.documents), "documents")?;
        let document_ids = documents.iter().map(|d| d.id.clone()).collect();
        let job = corpus.ingest(documents).await?;
        Ok(self.tagged(&corpus, IngestResponse { job: Some(convert::job_to_wire(&job)), document_ids }))
    }

    /// Each message is stored durably before the next is read, so memory holds one
    /// message at a time whatever the size of the load.
    async fn ingest_stream(
        &self,
        request: Request<Streaming<IngestStreamRequest>>,
    ) -> Result<Response<IngestStreamResponse>, Status> {
        let grant = Grant::of(request.extensions()).cloned();
        let mut inbound = request.into_inner();
        // The first message names the collection; the others may repeat it.
        let mut target: Option<(String, Arc<Corpus>)> = None;
        let mut job = None;
        let mut received = 0u32;
        let mut index = 0usize;
        while let Some(message) = inbound.next().await {
            let message = message.map_err(wire::oversized_message_status)?;
            if target.is_none() {
                target = Some((message.collection.clone(), self.corpus(grant.as_ref(), &message.collection).await?));
            }
            let (collection, corpus) = target.as_ref().expect("chosen by the first message");
            if !message.collection.is_empty() && message.collection != *collection {
                let field = format!("messages[{index}].collection");
                let error = format!("{} differs from the stream's collection {collection:?}", message.collection);
                return Err(Error::invalid(field, error).into());
            }
            let field = format!("messages[{index}].documents");
            index += 1;
            let documents = corpus.prepare_documents(convert::documents_from_wire(message.documents), &field)?;
            if documents.is_empty() {
                continue;
            }
            let job_id = match &job {
                Some(id) => id,
                None => job.insert(corpus.open_stream_job().await?.id),
            };
            received += documents.len() as u32;
            corpus.append_to_stream_job(job_id, documents).await?;
        }
        let (Some(job_id), Some((_, corpus))) = (job, target) else {
            return Err(Error::invalid("documents", "the stream carried no document").into());
        };
        let job = corpus.close_stream_job(&job_id).await?;
        Ok(self.tagged(
            &corpus,
            IngestStreamResponse { job: Some(convert::job_to_wire(&job)), received_documents: received },
        ))
    }

    async fn get_job(&self, request: Request<GetJobRequest>) -> Result<Response<GetJobResponse>, Status> {
        let grant = Grant::of(request.extensions()).cloned();
        let request = request.into_inner();
        let corpus = self.corpus(grant.as_ref(), &request.collection).await?;
        let job = corpus.job(&request.job_id).await?;
        Ok(self.tagged(&corpus, GetJobResponse { job: Some(convert::job_to_wire(&job)) }))
    }

    type WatchJobStream = BoxStream<WatchJobResponse>;

    async fn watch_job(&self, request: Request<WatchJobRequest>) -> Result<Response<Self::WatchJobStream>, Status> {
        let grant = Grant::of(request.extensions()).cloned();
        let request = request.into_inner();
        let corpus = self.corpus(grant.as_ref(), &request.collection).await?;
        let updates = corpus.watch_job(&request.job_id).await?;
        Ok(self.tagged(&corpus, job_updates(updates)))
    }

    async fn get_documents(
        &self,
        request: Request<GetDocumentsRequest>,
    ) -> Result<Response<GetDocumentsResponse>, Status> {
        let grant = Grant::of(request.extensions()).cloned();
        let GetDocumentsRequest { ids, collection } = request.into_inner();
        let corpus = self.corpus(grant.as_ref(), &collection).await?;
        if ids.is_empty() {
            return Err(Error::invalid("ids", "must name at least one document").into());
        }
        let found = corpus.get_documents(ids).await?;
        let mut response = GetDocumentsResponse::default();
        for (id, record) in found {
            match record {
                Some(record) => response.documents.push(convert::stored_document_to_wire(id, record)),
                None => response.missing_ids.push(id),
            }
        }
        Ok(self.tagged(&corpus, response))
    }

    async fn delete_documents(
        &self,
        request: Request<DeleteDocumentsRequest>,
    ) -> Result<Response<DeleteDocumentsResponse>, Status> {
        let grant = Grant::of(request.extensions()).cloned();
        let request = request.into_inner();
        let corpus = self.corpus(grant.as_ref(), &request.collection).await?;
        let filter = convert::filter_from_wire(request.filter, "filter")?;
        if request.ids.is_empty() && filter.is_empty() {
            return Err(Error::invalid("ids", "give ids or a filter to delete").into());
        }
        filter.validate("filter")?;
        let filter = (!filter.is_empty()).then_some(filter);
        let deleted = corpus.delete(request.ids, filter).await?;
        Ok(self.tagged(&corpus, DeleteDocumentsResponse { deleted_count: deleted as u32 }))
    }

    async fn search(&self, request: Request<SearchRequest>) -> Result<Response<SearchResponse>, Status> {
        let started = Instant::now();
        let grant = Grant::of(request.extensions()).cloned();
        let request = request.into_inner();
        let corpus = self.corpus(grant.as_ref(), &request.collection).await?;
        let (params, dtype) = convert::search_from_wire(request, corpus.settings().max_top_k)?;
        let results = corpus.search(params).await?;
        let results = results
            .into_iter()
            .map(|hits| QueryResult { hits: hits.into_iter().map(|h| convert::hit_to_wire(h, dtype)).collect() })
            .collect();
        Ok(self.tagged(&corpus, SearchResponse { results, took_ms: started.elapsed().as_secs_f64() * 1000.0 }))
    }

    type SearchStreamStream = BoxStream<SearchStreamResponse>;

    async fn search_stream(
        &self,
        request: Request<SearchStreamRequest>,
    ) -> Result<Response<Self::SearchStreamStream>, Status> {
        let grant = Grant::of(request.extensions()).cloned();
        let request = request.into_inner();
        let search = request.search.ok_or_else(|| Error::invalid("search", "is missing"))?;
        let corpus = self.corpus(grant.as_ref(), &search.collection).await?;
        let page_size = if request.page_size == 0 { DEFAULT_PAGE_SIZE } else { request.page_size as usize };
        let (params, dtype) = convert::search_from_wire(search, corpus.settings().max_stream_top_k)?;
        let results = corpus.search(params).await?;
        // Pages are encoded as the client reads them; the hits themselves are held.
        let pages = results.into_iter().enumerate().flat_map(move |(query_index, hits)| {
            let mut pages = Vec::new();
            let mut hits = hits.into_iter().peekable();
            while hits.peek().is_some() {
                let page: Vec<_> = hits.by_ref().take(page_size).collect();
                pages.push((query_index, page));
            }
            pages
        });
        let stream = futures::stream::iter(pages).map(move |(query_index, hits)| {
            Ok(SearchStreamResponse {
                query_index: query_index as u32,
                hits: hits.into_iter().map(|h| convert::hit_to_wire(h, dtype)).collect(),
            })
        });
        Ok(self.tagged(&corpus, Box::pin(stream)))
    }

    async fn get_index_stats(
        &self,
        request: Request<GetIndexStatsRequest>,
    ) -> Result<Response<GetIndexStatsResponse>, Status> {
        let grant = Grant::of(request.extensions()).cloned();
        let corpus = self.corpus(grant.as_ref(), &request.into_inner().collection).await?;
        let stats = corpus.stats().await?;
        let wire = convert::index_stats_to_wire(stats, corpus.index_kind_name(), corpus.hnsw_search());
        Ok(self.tagged(&corpus, wire))
    }
}

/// Streams a job's state now and after each change, ending after a finished state.
/// Changes that happen while the client is slow to read are merged: it gets the
/// latest state, never a backlog.
fn job_updates(mut updates: watch::Receiver<JobRecord>) -> BoxStream<WatchJobResponse> {
    let first = updates.borrow_and_update().clone();
    let stream = futures::stream::unfold((Some(first), updates, false), |(next, mut updates, ended)| async move {
        if ended {
            return None;
        }
        let job = match next {
            Some(job) => job,
            None => {
                updates.changed().await.ok()?;
                updates.borrow_and_update().clone()
            }
        };
        let finished = job.is_finished();
        Some((Ok(WatchJobResponse { job: Some(convert::job_to_wire(&job)) }), (None, updates, finished)))
    });
    Box::pin(stream)
}
