//! `embedwire.v1.RerankService`.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use embedwire_proto::v1::rerank_service_server::RerankService;
use embedwire_proto::v1::{
    RerankRequest, RerankResponse, RerankStreamRequest, RerankStreamResponse, rerank_stream_response,
};
use futures::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::batcher::{BatchTiming, Priority};
use crate::error::{Error, Result};
use crate::rerank::{RerankEngine, RerankOptions};
use crate::wire;

/// The RerankService handlers.
pub struct RerankApi {
    /// Set once the models are loaded; UNAVAILABLE before.
    engine: Arc<OnceLock<Arc<RerankEngine>>>,
    /// Requests of one stream worked on at once (`--stream-read-ahead`).
    stream_read_ahead: usize,
}

impl RerankApi {
    /// Handlers over the engine `engine` will hold.
    pub fn new(engine: Arc<OnceLock<Arc<RerankEngine>>>, stream_read_ahead: usize) -> Self {
        RerankApi { engine, stream_read_ahead }
    }
}

fn loaded(engine: &OnceLock<Arc<RerankEngine>>) -> Result<Arc<RerankEngine>> {
    engine.get().cloned().ok_or_else(|| Error::Unavailable("the models are still loading; retry shortly".into()))
}

/// Validates, reranks and encodes one request; also says where its time went.
async fn rerank_one(
    engine: &RerankEngine,
    request: &RerankRequest,
    priority: Priority,
) -> Result<(RerankResponse, BatchTiming)> {
    let started = Instant::now();
    let options = RerankOptions { priority, ..wire::rerank::rerank_options(request)? };
    let reranked = engine.rerank(&request.query, &request.texts, options).await?;
    let timing = reranked.timing;
    Ok((wire::rerank::rerank_response(request, reranked, started.elapsed()), timing))
}

/// Answers one stream message; its failure is reported in-band, tagged with its id.
async fn answer_stream_message(engine: &RerankEngine, message: RerankStreamRequest) -> RerankStreamResponse {
    let result = match &message.request {
        Some(request) => rerank_one(engine, request, Priority::Bulk).await.map(|(response, _)| response),
        None => Err(Error::invalid("request", "is missing")),
    };
    let result = match result {
        Ok(response) => rerank_stream_response::Result::Response(response),
        Err(error) => rerank_stream_response::Result::Error(super::stream_error(error)),
    };
    RerankStreamResponse { request_id: message.request_id, result: Some(result) }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<RerankStreamResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RerankService for RerankApi {
    async fn rerank(&self, request: Request<RerankRequest>) -> Result<Response<RerankResponse>, Status> {
        let started = Instant::now();
        let engine = loaded(&self.engine)?;
        let (reply, timing) = rerank_one(&engine, request.get_ref(), Priority::Interactive).await?;
        let mut response = Response::new(reply);
        wire::add_timing_metadata(response.metadata_mut(), timing, started.elapsed());
        Ok(response)
    }

    type RerankStreamStream = ResponseStream;

    /// As EmbedStream: answers in request order, `stream_read_ahead` at once (see
    /// [`super::answer_in_order`]); a stream's pairs take the bulk lane like an
    /// EmbedStream's texts: a producer wants throughput and flow control already
    /// paces it, so its requests are never refused for queue time.
    async fn rerank_stream(
        &self,
        request: Request<Streaming<RerankStreamRequest>>,
    ) -> Result<Response<Self::RerankStreamStream>, Status> {
        let engine = loaded(&self.engine)?;
        let responses = super::answer_in_order(request.into_inner(), self.stream_read_ahead, move |message| {
            let engine = engine.clone();
            async move { answer_stream_message(&engine, message).await }
        });
        Ok(Response::new(Box::pin(responses) as Self::RerankStreamStream))
    }
}
