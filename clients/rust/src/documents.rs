//! Stored documents: fetch by id, delete by id and/or metadata filter.

use std::collections::HashMap;

use embedwire_proto::v1 as pb;

use crate::Client;
use crate::error::Result;
use crate::policy::Hedge;
use crate::pool::Route;
use crate::search::{ChunkSpan, Filter};

/// A document as the server stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDocument {
    pub id: String,
    /// The text, normalized (NFC, runs of whitespace folded).
    pub text: String,
    pub metadata: HashMap<String, String>,
    /// The chunks the text was split into, in order.
    pub chunks: Vec<ChunkSpan>,
    /// When this version was indexed, in Unix seconds (0 while pending).
    pub indexed_at: f64,
}

/// The documents found and the ids that were not.
#[derive(Debug, Clone, PartialEq)]
pub struct Documents {
    /// Found documents, in request order.
    pub found: Vec<StoredDocument>,
    pub missing_ids: Vec<String>,
}

impl Client {
    /// Fetches documents by id.
    pub async fn get_documents<I, S>(&self, ids: I) -> Result<Documents>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let ids = ids.into_iter().map(Into::into).collect();
        let request = pb::GetDocumentsRequest { ids, collection: self.collection.to_string() };
        let caller = &self.inner.caller;
        let response = caller
            .unary(Route::Primary, Hedge::Allowed, |backend| {
                let request = caller.request(request.clone());
                async move { Ok(backend.search().get_documents(request).await?.into_inner()) }
            })
            .await?;
        let found = response
            .documents
            .into_iter()
            .map(|document| StoredDocument {
                id: document.id,
                text: document.text,
                metadata: document.metadata,
                chunks: document.chunks.into_iter().map(ChunkSpan::from).collect(),
                indexed_at: document.indexed_at,
            })
            .collect();
        Ok(Documents { found, missing_ids: response.missing_ids })
    }

    /// Deletes the documents with these ids and those matching `filter` (at least
    /// one of the two must select something); returns how many were deleted.
    /// Durable when it returns.
    pub async fn delete_documents(&self, ids: Vec<String>, filter: Option<&Filter>) -> Result<u32> {
        let filter = filter.map(Filter::to_proto);
        let request = pb::DeleteDocumentsRequest { ids, filter, collection: self.collection.to_string() };
        let caller = &self.inner.caller;
        let response = caller
            .unary(Route::Primary, Hedge::Never, |backend| {
                let request = caller.request(request.clone());
                async move { Ok(backend.search().delete_documents(request).await?.into_inner()) }
            })
            .await?;
        Ok(response.deleted_count)
    }
}
