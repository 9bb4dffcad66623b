//! gRPC service implementations: thin handlers that convert with `wire` and call the
//! engine.
//!
//! # Layout
//! - [`collections`]: `embedwire.v1.CollectionService` (create, list, delete).
//! - [`embed`]: `embedwire.v1.EmbedService` (Embed, EmbedStream, Tokenize, Info).
//! - [`embed_zero_copy`]: unary Embed framed by hand, so the vectors are not copied.
//! - [`rerank`]: `embedwire.v1.RerankService` (Rerank, RerankStream).
//! - [`search`]: `embedwire.v1.SearchService` (ingest, jobs, documents, search).

pub mod collections;
pub mod embed;
pub mod embed_zero_copy;
pub mod rerank;
pub mod search;

use std::future::Future;

use embedwire_proto::v1::StreamError;
use futures::{Stream, StreamExt};
use tonic::{Status, Streaming};

use crate::error::Error;

/// The answers to a request stream, in request order: up to `read_ahead` messages
/// are worked on at once (so their inputs batch together) and nothing else buffers,
/// so when the client stops reading, HTTP/2 flow control stops the answers, the
/// buffer stops pulling requests, and the client's sends block. A message the
/// transport could not read ends the stream with its status.
pub(crate) fn answer_in_order<M, A, F, Fut>(
    requests: Streaming<M>,
    read_ahead: usize,
    answer: F,
) -> impl Stream<Item = Result<A, Status>> + Send + 'static
where
    M: Send + 'static,
    A: Send + 'static,
    F: Fn(M) -> Fut + Send + 'static,
    Fut: Future<Output = A> + Send + 'static,
{
    requests
        .map(move |message| {
            let answer = message.map(&answer);
            async move {
                match answer {
                    Ok(answer) => Ok(answer.await),
                    Err(status) => Err(crate::wire::oversized_message_status(status)),
                }
            }
        })
        .buffered(read_ahead)
}

/// One stream message's failure, reported in-band (the stream goes on).
pub(crate) fn stream_error(error: Error) -> StreamError {
    let status = Status::from(error);
    StreamError { code: status.code() as i32, message: status.message().to_string() }
}
