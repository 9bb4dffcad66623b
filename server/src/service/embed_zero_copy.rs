//! `EmbedService/Embed` answered without tonic's copy of the vectors.
//!
//! tonic encodes every response message into one contiguous buffer before framing
//! it, which for a FLOAT32 answer copies the whole vector block once more per call
//! (393 KB for 256 texts of 384 dimensions): the one step the HTTP octet-stream route
//! does not pay, and what kept gRPC bytes slower than raw HTTP. This service frames
//! the answer itself: the gRPC prefix and the small fields in one chunk, then the
//! vector bytes, as they came from the encoder, as their own HTTP/2 data chunk.
//!
//! Only plain unary Embed calls take this path; every other method, and a request
//! with a `grpc-encoding` (which tonic answers as it always did), goes to tonic's
//! generated service unchanged. Handlers are shared: the answer is what
//! [`EmbedService::embed`] returns, metadata included.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use embedwire_proto::v1::embed_service_server::{EmbedService, EmbedServiceServer};
use embedwire_proto::v1::{EmbedRequest, EmbedResponse};
use http::{HeaderMap, HeaderValue, Request, Response, header};
use http_body::Frame;
use http_body_util::{BodyExt, Limited, StreamBody};
use prost::Message;
use tonic::body::Body;
use tonic::server::NamedService;
use tower::{Service, ServiceExt};

use super::embed::EmbedApi;
use crate::wire;

/// The one method this service answers itself.
pub const EMBED_PATH: &str = "/embedwire.v1.EmbedService/Embed";

/// Field number of `EmbedResponse.embeddings`, the bytes sent without a copy.
const EMBEDDINGS_FIELD: u32 = 4;

/// gRPC's message prefix: a compressed flag and a big-endian u32 length.
const PREFIX_BYTES: usize = 5;

/// Message size limits, as tonic's `max_{de,en}coding_message_size` apply them.
#[derive(Debug, Clone, Copy)]
pub struct MessageLimits {
    /// Largest request message (`--max-request-bytes`).
    pub max_request_bytes: usize,
    /// Largest response message (`--max-response-bytes`).
    pub max_response_bytes: usize,
}

/// `EmbedServiceServer` with unary Embed answered without copying the vectors.
#[derive(Clone)]
pub struct ZeroCopyEmbedService {
    api: Arc<EmbedApi>,
    /// Everything but plain unary Embed calls.
    generated: EmbedServiceServer<EmbedApi>,
    limits: MessageLimits,
}

impl ZeroCopyEmbedService {
    /// Wraps `generated` (built over the same `api`, with the same limits).
    pub fn new(api: Arc<EmbedApi>, generated: EmbedServiceServer<EmbedApi>, limits: MessageLimits) -> Self {
        ZeroCopyEmbedService { api, generated, limits }
    }
}

impl NamedService for ZeroCopyEmbedService {
    const NAME: &'static str = <EmbedServiceServer<EmbedApi> as NamedService>::NAME;
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl Service<Request<Body>> for ZeroCopyEmbedService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    /// Always ready: the generated service is driven to readiness per call (`oneshot`).
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if request.uri().path() != EMBED_PATH || is_compressed(request.headers()) {
            return Box::pin(self.generated.clone().oneshot(request));
        }
        let (api, limits) = (self.api.clone(), self.limits);
        Box::pin(async move {
            Ok(match answer(&api, request, limits).await {
                Ok(response) => response,
                Err(status) => status.into_http(),
            })
        })
    }
}

/// A `grpc-encoding` other than identity: tonic's own path decides about it.
fn is_compressed(headers: &HeaderMap) -> bool {
    headers.get("grpc-encoding").is_some_and(|encoding| encoding != "identity")
}

/// Reads, handles and frames one unary Embed call.
async fn answer(
    api: &EmbedApi,
    request: Request<Body>,
    limits: MessageLimits,
) -> Result<Response<Body>, tonic::Status> {
    let (parts, body) = request.into_parts();
    let message = read_message(body, limits.max_request_bytes).await?;
    let request = EmbedRequest::decode(message)
        .map_err(|e| tonic::Status::internal(format!("failed to decode the EmbedRequest: {e}")))?;
    let request = tonic::Request::from_http(Request::from_parts(parts, request));
    let (metadata, reply, _) = api.embed(request).await?.into_parts();
    let (head, vectors) = frame(reply, limits.max_response_bytes)?;

    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    // No empty chunk: hyper sends it as an empty DATA frame, and h2 clients (hyper's,
    // so tonic's) close a connection with GOAWAY ENHANCE_YOUR_CALM after 100 of them,
    // which a tonic client reports as RESOURCE_EXHAUSTED. A FLOAT32_LIST answer has
    // no vector bytes (its floats are in `values`).
    let data = [head, vectors].into_iter().filter(|chunk| !chunk.is_empty()).map(Frame::data);
    let frames = data.chain([Frame::trailers(trailers)]).map(Ok::<_, Infallible>);
    let body = StreamBody::new(futures::stream::iter(frames));
    let mut response = Response::new(Body::new(body));
    *response.headers_mut() = metadata.into_headers();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    Ok(response)
}

/// The one length-prefixed message of a unary request, within `limit` bytes.
async fn read_message(body: Body, limit: usize) -> Result<Bytes, tonic::Status> {
    // `found` is what tonic's message says; a body cut off at the limit only tells "more than".
    let too_large = |found: String| {
        wire::oversized_message_status(tonic::Status::out_of_range(format!(
            "Error, decoded message length too large: found {found} bytes, the limit is: {limit} bytes"
        )))
    };
    let bytes = Limited::new(body, limit + PREFIX_BYTES)
        .collect()
        .await
        .map_err(|e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
            Some(_) => too_large(format!("more than {limit}")),
            None => tonic::Status::cancelled(format!("reading the request: {e}")),
        })?
        .to_bytes();
    if bytes.len() < PREFIX_BYTES {
        return Err(tonic::Status::internal("the request holds no complete gRPC message"));
    }
    if bytes[0] != 0 {
        return Err(tonic::Status::unimplemented("a compressed message without grpc-encoding"));
    }
    let length = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
    if length > limit {
        return Err(too_large(length.to_string()));
    }
    if bytes.len() != PREFIX_BYTES + length {
        return Err(tonic::Status::internal("a unary request must hold exactly one gRPC message"));
    }
    Ok(bytes.slice(PREFIX_BYTES..))
}

/// The answer as two chunks: prefix plus every field but the vectors (encoded by
/// prost, so nothing is left out), then the vector bytes themselves. Protobuf lets
/// fields come in any order, so the vectors going last changes nothing for a reader.
fn frame(mut reply: EmbedResponse, limit: usize) -> Result<(Bytes, Bytes), tonic::Status> {
    let vectors = std::mem::take(&mut reply.embeddings);
    let vectors_field = if vectors.is_empty() {
        0
    } else {
        prost::encoding::key_len(EMBEDDINGS_FIELD)
            + prost::encoding::encoded_len_varint(vectors.len() as u64)
            + vectors.len()
    };
    let length = reply.encoded_len() + vectors_field;
    if length > limit {
        return Err(tonic::Status::resource_exhausted(format!(
            "response too large: {length} bytes, the limit is {limit} (--max-response-bytes); ask for fewer inputs or a smaller dtype"
        )));
    }
    let mut head = BytesMut::with_capacity(PREFIX_BYTES + length - vectors.len());
    head.put_u8(0);
    head.put_u32(length as u32);
    reply.encode(&mut head).map_err(|e| tonic::Status::internal(format!("encoding the answer: {e}")))?;
    if !vectors.is_empty() {
        prost::encoding::encode_key(EMBEDDINGS_FIELD, prost::encoding::WireType::LengthDelimited, &mut head);
        prost::encoding::encode_varint(vectors.len() as u64, &mut head);
    }
    Ok((head.freeze(), vectors))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> EmbedResponse {
        EmbedResponse {
            dim: 3,
            count: 2,
            dtype: 1,
            embeddings: Bytes::from((0u8..24).collect::<Vec<_>>()),
            row_scales: vec![0.5, 0.25],
            model: "m".into(),
            token_counts: vec![4, 5],
            ..Default::default()
        }
    }

    #[test]
    fn the_two_chunks_decode_to_the_same_message() {
        let (head, vectors) = frame(sample(), 1 << 20).unwrap();
        let whole = [head.as_ref(), vectors.as_ref()].concat();
        assert_eq!(whole[0], 0);
        let length = u32::from_be_bytes(whole[1..5].try_into().unwrap()) as usize;
        assert_eq!(length, whole.len() - PREFIX_BYTES);
        assert_eq!(EmbedResponse::decode(&whole[PREFIX_BYTES..]).unwrap(), sample());
        assert_eq!(length, sample().encoded_len());
    }

    #[test]
    fn an_answer_without_vectors_is_framed_too() {
        let reply = EmbedResponse { embeddings: Bytes::new(), values: vec![1.0, 2.0], ..sample() };
        let (head, vectors) = frame(reply.clone(), 1 << 20).unwrap();
        assert!(vectors.is_empty());
        assert_eq!(EmbedResponse::decode(&head[PREFIX_BYTES..]).unwrap(), reply);
    }

    #[test]
    fn an_answer_over_the_limit_is_refused_naming_the_flag() {
        let status = frame(sample(), 10).unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("--max-response-bytes"), "{}", status.message());
    }
}
