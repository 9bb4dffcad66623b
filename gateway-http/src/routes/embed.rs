//! `POST /embed`, the embed-only contract of the existing split deployment:
//! `{"texts": [...]}` in, `{"embeddings": [[...], ...]}` out (384 L2-normalized
//! floats per text, in input order), or raw f32 bytes for `Accept: application/octet-stream`.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use embedwire_proto::v1::{EmbedRequest, EmbeddingDtype};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::encoding::{FloatRows, binary_response, json_response, wants_binary, with_timing};
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::state::AppState;
use crate::upstream::Upstream;

/// `POST /embed` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EmbedBody {
    /// Texts to embed.
    pub texts: Vec<String>,
}

/// `POST /embed` answer (JSON).
#[derive(Serialize, ToSchema)]
pub struct EmbedReply {
    /// One vector per text, in input order.
    #[schema(value_type = Vec<Vec<f32>>)]
    pub embeddings: serde_json::Value,
}

/// Embeds texts.
#[utoipa::path(post, path = "/embed", request_body = EmbedBody,
    responses((status = 200, body = EmbedReply, description = "JSON floats; with Accept: application/octet-stream, raw little-endian f32 rows with x-embedding-count and x-embedding-dimensions headers"),
              (status = 400, body = crate::error::ErrorDetail)))]
pub async fn embed<U: Upstream>(
    State(state): State<AppState<U>>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<EmbedBody>,
) -> Result<Response, ApiError> {
    let request = EmbedRequest { inputs: body.texts, dtype: EmbeddingDtype::Float32.into(), ..EmbedRequest::default() };
    let answer =
        state.upstream.embed(request).await.map_err(|status| ApiError::from(status).renamed("inputs", "texts"))?;
    let metadata = answer.metadata().clone();
    let reply = answer.into_inner();
    if wants_binary(&headers) {
        return Ok(with_timing(binary_response(reply.embeddings, reply.count, reply.dim), &metadata));
    }
    #[derive(Serialize)]
    struct Reply<'a> {
        embeddings: FloatRows<'a>,
    }
    let body = Reply { embeddings: FloatRows { bytes: &reply.embeddings, dim: reply.dim as usize } };
    Ok(with_timing(json_response(&body), &metadata))
}
