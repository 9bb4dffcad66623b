//! Collections: separate indexes on one server (or one shared store), each with its
//! own documents, jobs and settings. [`Client::collection`] gives a client acting on
//! one; these calls create, list and delete them (creating and deleting need an
//! admin key when the server has keys).

use embedwire_proto::v1 as pb;

use crate::client::Client;
use crate::error::Result;
use crate::policy::Hedge;
use crate::pool::Route;

/// The vector index of a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollectionIndex {
    Exact,
    Hnsw,
}

/// A new collection's settings; what is left None takes the server's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectionSettings {
    /// Longest chunk, in model tokens.
    pub chunk_tokens: Option<u32>,
    /// Tokens each chunk repeats from the one before.
    pub chunk_overlap_tokens: Option<u32>,
    pub index: Option<CollectionIndex>,
    /// Whether keyword and hybrid search are possible.
    pub keyword_index: Option<bool>,
}

/// A collection as the server describes it (its settings all filled in).
#[derive(Debug, Clone, PartialEq)]
pub struct Collection {
    pub name: String,
    pub chunk_tokens: u32,
    pub chunk_overlap_tokens: u32,
    pub index: CollectionIndex,
    pub keyword_index: bool,
    /// Unix seconds.
    pub created_at: f64,
}

impl Collection {
    fn from_proto(collection: pb::Collection) -> Self {
        let settings = collection.settings.unwrap_or_default();
        Collection {
            index: if settings.index() == pb::CollectionIndex::Hnsw {
                CollectionIndex::Hnsw
            } else {
                CollectionIndex::Exact
            },
            name: collection.name,
            chunk_tokens: settings.chunk_tokens.unwrap_or_default(),
            chunk_overlap_tokens: settings.chunk_overlap_tokens.unwrap_or_default(),
            keyword_index: settings.keyword_index.unwrap_or_default(),
            created_at: collection.created_at,
        }
    }
}

impl CollectionSettings {
    fn into_proto(self) -> pb::CollectionSettings {
        let index = match self.index {
            None => pb::CollectionIndex::Unspecified,
            Some(CollectionIndex::Exact) => pb::CollectionIndex::Exact,
            Some(CollectionIndex::Hnsw) => pb::CollectionIndex::Hnsw,
        };
        pb::CollectionSettings {
            chunk_tokens: self.chunk_tokens,
            chunk_overlap_tokens: self.chunk_overlap_tokens,
            index: index as i32,
            keyword_index: self.keyword_index,
        }
    }
}

impl Client {
    /// Creates an empty collection; ALREADY_EXISTS if the name is taken. Sent once
    /// (no retry after it was sent: a retry could find its own creation).
    pub async fn create_collection(&self, name: &str, settings: CollectionSettings) -> Result<Collection> {
        let request = pb::CreateCollectionRequest { name: name.to_string(), settings: Some(settings.into_proto()) };
        let caller = &self.inner.caller;
        let reply = caller
            .unary(Route::Primary, Hedge::Never, |backend| {
                let request = caller.request(request.clone());
                async move { Ok(backend.collections().create_collection(request).await?.into_inner()) }
            })
            .await?;
        Ok(Collection::from_proto(reply.collection.unwrap_or_default()))
    }

    /// The collections the key reaches, by name (the default one is not listed).
    pub async fn list_collections(&self) -> Result<Vec<Collection>> {
        let caller = &self.inner.caller;
        let reply = caller
            .unary(Route::Primary, Hedge::Allowed, |backend| {
                let request = caller.request(pb::ListCollectionsRequest {});
                async move { Ok(backend.collections().list_collections(request).await?.into_inner()) }
            })
            .await?;
        Ok(reply.collections.into_iter().map(Collection::from_proto).collect())
    }

    /// Deletes a collection with its documents, jobs and vectors; returns how many
    /// documents it held.
    pub async fn delete_collection(&self, name: &str) -> Result<u64> {
        let request = pb::DeleteCollectionRequest { name: name.to_string() };
        let caller = &self.inner.caller;
        let reply = caller
            .unary(Route::Primary, Hedge::Never, |backend| {
                let request = caller.request(request.clone());
                async move { Ok(backend.collections().delete_collection(request).await?.into_inner()) }
            })
            .await?;
        Ok(reply.deleted_documents)
    }
}
