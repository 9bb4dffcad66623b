//! Storing documents: [`Client::ingest`] for a batch in one call, and
//! [`Client::ingest_stream`] for a bulk load of any size from any `Stream` (or
//! iterator, via [`Client::ingest_iter`]), sent as one IngestStream call whose
//! messages carry a bounded number of documents each. Both return at once with a
//! job; embedding and indexing run on the server (see [`crate::jobs`]).
//!
//! Ingest is not hedged (a duplicate would be a second job). It is retried after
//! UNAVAILABLE or RESOURCE_EXHAUSTED: documents with an id are upserts, so a retry
//! is harmless; documents without one could be stored twice if a retried call had
//! in fact arrived, so give ids when that matters. A stream is never retried (it is
//! consumed as it is sent).

use std::collections::HashMap;

use embedwire_proto::v1 as pb;
use futures::{Stream, StreamExt};

use crate::Client;
use crate::error::{Error, Result};
use crate::jobs::Job;
use crate::policy::Hedge;
use crate::pool::Route;

/// Documents per IngestStream message: large enough that per-message overhead
/// vanishes, small enough to stay far below the server's limit (1000 by default)
/// and its message size limit for documents of a few KB.
pub const DOCUMENTS_PER_MESSAGE: usize = 256;

/// A text to index, with metadata to filter on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Document {
    /// Empty: the server assigns a UUID. An existing id is replaced (upsert).
    pub id: String,
    pub text: String,
    pub metadata: HashMap<String, String>,
}

impl Document {
    /// A document with a server-assigned id.
    pub fn new(text: impl Into<String>) -> Self {
        Document { text: text.into(), ..Default::default() }
    }

    /// Sets the id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Adds a metadata pair.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    fn into_proto(self) -> pb::Document {
        pb::Document { id: self.id, text: self.text, metadata: self.metadata }
    }
}

/// What Ingest answers.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestReceipt {
    /// The job that embeds and indexes the documents.
    pub job: Job,
    /// The documents' ids in request order, assigned ones included.
    pub document_ids: Vec<String>,
}

/// What IngestStream answers once every streamed document is on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamReceipt {
    /// The job that embeds and indexes the documents.
    pub job: Job,
    /// Documents the server received and stored.
    pub received_documents: u32,
}

impl Client {
    /// Stores `documents` (at most the server's per-request limit) in one call.
    pub async fn ingest(&self, documents: Vec<Document>) -> Result<IngestReceipt> {
        let request = pb::IngestRequest {
            documents: documents.into_iter().map(Document::into_proto).collect(),
            collection: self.collection.to_string(),
        };
        let caller = &self.inner.caller;
        let (address, response) = caller
            .unary(Route::Primary, Hedge::Never, |backend| {
                let request = caller.request(request.clone());
                async move {
                    let response = backend.search().ingest(request).await?;
                    Ok((backend.address.clone(), response.into_inner()))
                }
            })
            .await?;
        let job = Job::from_response(response.job, &address)?;
        Ok(IngestReceipt { job, document_ids: response.document_ids })
    }

    /// Stores every document of `documents` as one job, streaming them in messages
    /// of up to [`DOCUMENTS_PER_MESSAGE`] (fewer when the stream has no more ready).
    /// Returns when the server has stored them all.
    /// The call has no deadline: a bulk load takes as long as it takes.
    pub async fn ingest_stream<S>(&self, documents: S) -> Result<StreamReceipt>
    where
        S: Stream<Item = Document> + Send + 'static,
    {
        let collection = self.collection.to_string();
        let messages = documents.ready_chunks(DOCUMENTS_PER_MESSAGE).map(move |chunk| pb::IngestStreamRequest {
            documents: chunk.into_iter().map(Document::into_proto).collect(),
            collection: collection.clone(),
        });
        let pool = &self.inner.caller.pool;
        let backend = pool.pick(Route::Primary);
        let response = pool.observe(&backend, backend.search().ingest_stream(messages).await);
        let response = response.map_err(|status| Error::from_status(status, &backend.address, None))?.into_inner();
        let job = Job::from_response(response.job, &backend.address)?;
        Ok(StreamReceipt { job, received_documents: response.received_documents })
    }

    /// [`Client::ingest_stream`] from an iterator (consumed as it is sent, on the
    /// transport's task, so it should not block for long per item).
    pub async fn ingest_iter<I>(&self, documents: I) -> Result<StreamReceipt>
    where
        I: IntoIterator<Item = Document>,
        I::IntoIter: Send + 'static,
    {
        self.ingest_stream(futures::stream::iter(documents)).await
    }
}
