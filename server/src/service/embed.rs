//! `embedwire.v1.EmbedService`.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use embedwire_proto::v1::embed_service_server::EmbedService;
use embedwire_proto::v1::{
    EmbedRequest, EmbedResponse, EmbedStreamRequest, EmbedStreamResponse, InfoRequest, InfoResponse, TokenizeRequest,
    TokenizeResponse, embed_stream_response,
};
use futures::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::batcher::{BatchTiming, Priority};
use crate::corpus::Corpus;
use crate::engine::{EmbedOptions, EmbeddingEngine};
use crate::error::{Error, Result};
use crate::rerank::RerankEngine;
use crate::wire;

/// Settings the handlers report or apply beyond the engine's own.
#[derive(Debug, Clone, Copy)]
pub struct EmbedApiSettings {
    /// Backend name for Info.
    pub backend_name: &'static str,
    /// Batch size and token caps, for Info.
    pub batch: (usize, usize),
    /// Request size limit, for Info.
    pub max_request_bytes: usize,
    /// Requests of one stream worked on at once.
    pub stream_read_ahead: usize,
}

/// The EmbedService handlers.
pub struct EmbedApi {
    engine: Arc<EmbeddingEngine>,
    settings: EmbedApiSettings,
    /// The corpus, once loaded: Info reports its store.
    corpus: Arc<OnceLock<Arc<Corpus>>>,
    /// The rerank engine, once loaded: Info reports its scorer and limit.
    rerank: Arc<OnceLock<Arc<RerankEngine>>>,
}

impl EmbedApi {
    /// Handlers over `engine`.
    pub fn new(
        engine: Arc<EmbeddingEngine>,
        settings: EmbedApiSettings,
        corpus: Arc<OnceLock<Arc<Corpus>>>,
        rerank: Arc<OnceLock<Arc<RerankEngine>>>,
    ) -> Self {
        EmbedApi { engine, settings, corpus, rerank }
    }
}

/// Validates, embeds and encodes one request; also says where its time went.
async fn embed_timed(engine: &EmbeddingEngine, request: EmbedRequest) -> Result<(EmbedResponse, BatchTiming)> {
    embed_in_lane(engine, request, Priority::Interactive).await
}

/// [`embed_timed`] in a given lane.
async fn embed_in_lane(
    engine: &EmbeddingEngine,
    request: EmbedRequest,
    priority: Priority,
) -> Result<(EmbedResponse, BatchTiming)> {
    let dtype = wire::dtype_of(&request)?;
    let options = EmbedOptions { priority, ..wire::embed_options(&request) };
    let embeddings = engine.embed(request.inputs, options).await?;
    let timing = embeddings.timing;
    Ok((wire::embed_response(embeddings, dtype), timing))
}

/// One message of an EmbedStream, without the timing (stream answers have no
/// per-message metadata). Streams take the bulk lane: a stream is a producer that
/// wants throughput and keeps several messages in flight by design, and HTTP/2 flow
/// control already slows it to the model's pace, so refusing its messages for
/// queue time would only make it resend them.
async fn embed_one(engine: &EmbeddingEngine, request: EmbedRequest) -> Result<EmbedResponse> {
    Ok(embed_in_lane(engine, request, Priority::Bulk).await?.0)
}

/// Answers one stream message; its failure is reported in-band, tagged with its id.
async fn answer_stream_message(engine: &EmbeddingEngine, message: EmbedStreamRequest) -> EmbedStreamResponse {
    let result = match message.request {
        Some(request) => embed_one(engine, request).await,
        None => Err(Error::invalid("request", "is missing")),
    };
    let result = match result {
        Ok(response) => embed_stream_response::Result::Response(response),
        Err(error) => embed_stream_response::Result::Error(super::stream_error(error)),
    };
    EmbedStreamResponse { request_id: message.request_id, result: Some(result) }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<EmbedStreamResponse, Status>> + Send>>;

#[tonic::async_trait]
impl EmbedService for EmbedApi {
    async fn embed(&self, request: Request<EmbedRequest>) -> Result<Response<EmbedResponse>, Status> {
        let started = std::time::Instant::now();
        let (reply, timing) = embed_timed(&self.engine, request.into_inner()).await?;
        let mut response = Response::new(reply);
        wire::add_timing_metadata(response.metadata_mut(), timing, started.elapsed());
        wire::add_precision_metadata(response.metadata_mut(), self.engine.info()?.precision);
        Ok(response)
    }

    type EmbedStreamStream = ResponseStream;

    /// Answers in request order, `stream_read_ahead` at once (see
    /// [`super::answer_in_order`]).
    async fn embed_stream(
        &self,
        request: Request<Streaming<EmbedStreamRequest>>,
    ) -> Result<Response<Self::EmbedStreamStream>, Status> {
        let engine = self.engine.clone();
        let responses = super::answer_in_order(request.into_inner(), self.settings.stream_read_ahead, move |message| {
            let engine = engine.clone();
            async move { answer_stream_message(&engine, message).await }
        });
        let mut response = Response::new(Box::pin(responses) as Self::EmbedStreamStream);
        wire::add_precision_metadata(response.metadata_mut(), self.engine.info()?.precision);
        Ok(response)
    }

    async fn tokenize(&self, request: Request<TokenizeRequest>) -> Result<Response<TokenizeResponse>, Status> {
        let request = request.into_inner();
        let tokenized = self.engine.tokenize(request.inputs, request.truncate.unwrap_or(true)).await?;
        Ok(Response::new(TokenizeResponse { tokenized: tokenized.into_iter().map(wire::tokenized_to_wire).collect() }))
    }

    async fn info(&self, _request: Request<InfoRequest>) -> Result<Response<InfoResponse>, Status> {
        let info = self.engine.info()?;
        let mut response = wire::info_response(
            info,
            self.settings.backend_name,
            self.engine.limits(),
            self.settings.batch,
            self.settings.max_request_bytes,
        );
        if let (Some(admission), Some(limits)) = (self.engine.admission(), response.limits.as_mut()) {
            wire::set_admission(limits, admission);
        }
        if let Some(corpus) = self.corpus.get() {
            let health = corpus.store_health().await;
            response.store = Some(wire::store_info(corpus.store_description(), &health, corpus.hnsw_search()));
        }
        if let Some(rerank) = self.rerank.get() {
            response.rerank_scorer = rerank.scorer_name();
            if let Some(limits) = response.limits.as_mut() {
                limits.max_rerank_texts = u32::try_from(rerank.limits().max_texts).unwrap_or(u32::MAX);
            }
        }
        Ok(Response::new(response))
    }
}
