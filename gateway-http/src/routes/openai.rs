//! `POST /v1/embeddings`, compatible with OpenAI's embeddings API, so the official
//! SDKs work by changing their base URL. Errors come in OpenAI's format.
//!
//! The `model` field is accepted whatever it names (the server has one model), and
//! the answer reports the model actually used. Token arrays as `input` are refused:
//! the server's tokenizer is not OpenAI's.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use embedwire_proto::v1::{EmbedRequest, EmbeddingDtype};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::encoding::{FloatRow, binary_response, json_response, row_bytes, wants_binary, with_timing};
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::state::AppState;
use crate::upstream::Upstream;

/// `POST /v1/embeddings` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EmbeddingsBody {
    /// A string or an array of strings.
    #[schema(value_type = Object)]
    pub input: serde_json::Value,
    /// Any model name; the answer names the model used.
    #[serde(default)]
    pub model: Option<String>,
    /// `float` (default) or `base64` (little-endian f32 bytes of each vector).
    #[serde(default)]
    pub encoding_format: Option<String>,
    /// Keep this many leading dimensions, then renormalize.
    #[serde(default)]
    pub dimensions: Option<u32>,
    /// Accepted and ignored.
    #[serde(default)]
    pub user: Option<String>,
}

/// `POST /v1/embeddings` answer.
#[derive(Serialize, ToSchema)]
pub struct EmbeddingsReply<'a> {
    /// Always `list`.
    pub object: &'static str,
    pub data: Vec<EmbeddingItem<'a>>,
    pub model: String,
    pub usage: UsageBody,
}

/// One embedding.
#[derive(Serialize, ToSchema)]
pub struct EmbeddingItem<'a> {
    /// Always `embedding`.
    pub object: &'static str,
    /// Position of its input.
    pub index: usize,
    /// Floats, or a base64 string of little-endian f32 bytes.
    #[schema(value_type = Object)]
    pub embedding: EmbeddingValue<'a>,
}

/// A vector as floats or base64.
#[derive(Serialize)]
#[serde(untagged)]
pub enum EmbeddingValue<'a> {
    Float(FloatRow<'a>),
    Base64(String),
}

/// Tokens counted by the server's tokenizer.
#[derive(Serialize, ToSchema)]
pub struct UsageBody {
    pub prompt_tokens: u32,
    pub total_tokens: u32,
}

/// An [`ApiError`] answered in OpenAI's error format.
pub struct OpenAiError(ApiError);

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        self.0.into_openai_response()
    }
}

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        OpenAiError(error)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Float,
    Base64,
}

/// Creates embeddings.
#[utoipa::path(post, path = "/v1/embeddings", request_body = EmbeddingsBody,
    responses((status = 200, body = EmbeddingsReply, description = "JSON; with Accept: application/octet-stream, raw little-endian f32 rows with x-embedding-count and x-embedding-dimensions headers"),
              (status = 400, description = "OpenAI error format: {\"error\": {\"message\", \"type\", \"param\", \"code\"}}")))]
pub async fn embeddings<U: Upstream>(
    State(state): State<AppState<U>>,
    headers: HeaderMap,
    body: Result<JsonBody<EmbeddingsBody>, ApiError>,
) -> Result<Response, OpenAiError> {
    let JsonBody(body) = body?;
    let inputs = inputs_of(body.input)?;
    let format = match body.encoding_format.as_deref() {
        None | Some("float") => Format::Float,
        Some("base64") => Format::Base64,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("must be \"float\" or \"base64\", not {other:?}"),
            )
            .into());
        }
    };
    if body.dimensions == Some(0) {
        return Err(ApiError::invalid("dimensions", "must be at least 1").into());
    }
    let request = EmbedRequest {
        inputs,
        dimensions: body.dimensions,
        dtype: EmbeddingDtype::Float32.into(),
        ..EmbedRequest::default()
    };
    let answer =
        state.upstream.embed(request).await.map_err(|status| ApiError::from(status).renamed("inputs", "input"))?;
    let metadata = answer.metadata().clone();
    let reply = answer.into_inner();
    if wants_binary(&headers) {
        return Ok(with_timing(binary_response(reply.embeddings, reply.count, reply.dim), &metadata));
    }
    let dim = reply.dim as usize;
    let data = (0..reply.count as usize)
        .map(|index| {
            let row = row_bytes(&reply.embeddings, dim, index);
            let embedding = match format {
                Format::Float => EmbeddingValue::Float(FloatRow(row)),
                Format::Base64 => EmbeddingValue::Base64(base64::engine::general_purpose::STANDARD.encode(row)),
            };
            EmbeddingItem { object: "embedding", index, embedding }
        })
        .collect();
    let usage = reply.usage.unwrap_or_default();
    let answer = EmbeddingsReply {
        object: "list",
        data,
        model: reply.model.clone(),
        usage: UsageBody { prompt_tokens: usage.prompt_tokens, total_tokens: usage.total_tokens },
    };
    Ok(with_timing(json_response(&answer), &metadata))
}

/// `input` as texts: a string, or an array of strings.
fn inputs_of(input: serde_json::Value) -> Result<Vec<String>, ApiError> {
    use serde_json::Value;
    match input {
        Value::String(text) => Ok(vec![text]),
        Value::Array(items) if items.first().is_some_and(|first| first.is_number() || first.is_array()) => {
            Err(ApiError::invalid(
                "input",
                "token arrays are not supported (the server tokenizes with its own model's tokenizer); send strings",
            ))
        }
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(index, item)| match item {
                Value::String(text) => Ok(text),
                other => {
                    Err(ApiError::invalid(format!("input[{index}]"), format!("must be a string, not {}", kind(&other))))
                }
            })
            .collect(),
        other => {
            Err(ApiError::invalid("input", format!("must be a string or an array of strings, not {}", kind(&other))))
        }
    }
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
