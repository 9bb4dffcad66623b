//! `POST /embed`, the embed-only contract of the existing split deployment:
//! `{"texts": [...]}` in, `{"embeddings": [[...], ...]}` out (384 L2-normalized
//! floats per text, in input order), or raw f32 bytes for `Accept: application/octet-stream`.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use embedwire_proto::v1::{EmbedRequest, EmbeddingDtype};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::encoding::{FloatRows, binary_response, json_response, wants_binary};
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
    let reply =
        state.upstream.embed(request).await.map_err(|status| ApiError::from(status).renamed("inputs", "texts"))?;
    if wants_binary(&headers) {
        return Ok(binary_response(reply.embeddings, reply.count, reply.dim));
    }
    #[derive(Serialize)]
    struct Reply<'a> {
        embeddings: FloatRows<'a>,
    }
    Ok(json_response(&Reply { embeddings: FloatRows { bytes: &reply.embeddings, dim: reply.dim as usize } }))
}
