//! `embedwire.v1.CollectionService`: create, list and delete collections.

use std::sync::{Arc, OnceLock};

use embedwire_gateway_http::access::Grant;
use embedwire_proto::v1::collection_service_server::CollectionService;
use embedwire_proto::v1::{
    Collection, CollectionIndex, CollectionSettings, CreateCollectionRequest, CreateCollectionResponse,
    DeleteCollectionRequest, DeleteCollectionResponse, ListCollectionsRequest, ListCollectionsResponse,
};
use tonic::{Request, Response, Status};

use crate::collections::{CollectionRecord, CollectionRequest, Collections};
use crate::error::{Error, Result};

/// The CollectionService handlers; the collections appear once the model has loaded.
pub struct CollectionApi {
    collections: Arc<OnceLock<Arc<Collections>>>,
}

impl CollectionApi {
    pub fn new(collections: Arc<OnceLock<Arc<Collections>>>) -> Self {
        CollectionApi { collections }
    }

    fn collections(&self) -> Result<&Arc<Collections>> {
        self.collections.get().ok_or_else(|| Error::Unavailable("the index is still loading; retry shortly".into()))
    }
}

fn request_from_wire(settings: Option<CollectionSettings>) -> Result<CollectionRequest> {
    let settings = settings.unwrap_or_default();
    let hnsw = match CollectionIndex::try_from(settings.index) {
        Ok(CollectionIndex::Unspecified) => None,
        Ok(CollectionIndex::Exact) => Some(false),
        Ok(CollectionIndex::Hnsw) => Some(true),
        Err(_) => return Err(Error::invalid("settings.index", format!("{} is not a CollectionIndex", settings.index))),
    };
    Ok(CollectionRequest {
        chunk_tokens: settings.chunk_tokens.map(|n| n as usize),
        chunk_overlap_tokens: settings.chunk_overlap_tokens.map(|n| n as usize),
        hnsw,
        keyword_index: settings.keyword_index,
    })
}

/// A collection record as the API describes it.
pub fn collection_to_wire(record: &CollectionRecord) -> Collection {
    Collection {
        name: record.name.clone(),
        settings: Some(CollectionSettings {
            chunk_tokens: Some(record.chunk_tokens as u32),
            chunk_overlap_tokens: Some(record.chunk_overlap_tokens as u32),
            index: if record.hnsw { CollectionIndex::Hnsw } else { CollectionIndex::Exact } as i32,
            keyword_index: Some(record.keyword_index),
        }),
        created_at: record.created_at,
    }
}

#[tonic::async_trait]
impl CollectionService for CollectionApi {
    async fn create_collection(
        &self,
        request: Request<CreateCollectionRequest>,
    ) -> Result<Response<CreateCollectionResponse>, Status> {
        let request = request.into_inner();
        let settings = request_from_wire(request.settings)?;
        let record = self.collections()?.create(&request.name, settings).await?;
        Ok(Response::new(CreateCollectionResponse { collection: Some(collection_to_wire(&record)) }))
    }

    async fn list_collections(
        &self,
        request: Request<ListCollectionsRequest>,
    ) -> Result<Response<ListCollectionsResponse>, Status> {
        // A key sees the collections it reaches, no others.
        let grant = Grant::of(request.extensions());
        let collections = self
            .collections()?
            .list()
            .await?
            .iter()
            .filter(|record| grant.is_none_or(|grant| grant.reaches(&record.name)))
            .map(collection_to_wire)
            .collect();
        Ok(Response::new(ListCollectionsResponse { collections }))
    }

    async fn delete_collection(
        &self,
        request: Request<DeleteCollectionRequest>,
    ) -> Result<Response<DeleteCollectionResponse>, Status> {
        let deleted_documents = self.collections()?.delete(&request.into_inner().name).await?;
        Ok(Response::new(DeleteCollectionResponse { deleted_documents }))
    }
}
