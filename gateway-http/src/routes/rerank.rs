//! The rerank routes: three request and answer shapes over one `RerankService/Rerank`
//! call, so that clients written for other servers work by changing their base URL.
//!
//! - `POST /rerank`: Hugging Face text-embeddings-inference's shape (`query`, `texts`;
//!   a bare array of `{index, score, text?}` best first).
//! - `POST /v1/rerank`: Cohere's v1 and Jina's shape (`query`, `documents` as strings or
//!   `{text}` objects; `{id, model, results: [{index, relevance_score, document?}],
//!   usage, meta}`).
//! - `POST /v2/rerank`: Cohere's v2 shape (`{id, results: [{index, relevance_score}],
//!   meta}`), with `max_tokens_per_doc`.
//!
//! The scorer is the server's: its cross-encoder, or without one the embedding model
//! (cosine similarity of the query's and each text's vectors, in [-1, 1], not the
//! [0, 1] probability a cross-encoder gives). Every answer names it in the
//! `x-embedwire-scorer` header, and carries the server's timing
//! (`x-embedwire-*-ms`) and TEI's cost headers (`x-compute-tokens`, ...).
//!
//! `model` is accepted whatever it names, as OpenAI-, TEI- and Jina-compatible
//! servers do: the server has one scorer, and refusing the names clients have
//! hard-coded (`rerank-v3.5`) would only break them. The v1 answer reports the model
//! actually used.
//!
//! Errors come in embedwire's shape (`{"error": {"code", "message", "field"}}`), with
//! the server's field names replaced by the route's (`texts[2]` is `documents[2]` on
//! the Cohere routes). Too many texts for the server's `max_rerank_texts` is 413.

use std::hash::{BuildHasher, Hasher};

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use embedwire_proto::v1::{RerankRequest, RerankResponse, TruncationDirection};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use tonic::Code;
use utoipa::ToSchema;

use crate::encoding::{json_response, with_timing};
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::state::AppState;
use crate::upstream::Upstream;

/// Response header naming what scored the texts (`cross-encoder:<model id>` or
/// `bi-encoder:<model id>`), the only place the bare-array TEI answer has for it.
pub const SCORER_HEADER: &str = "x-embedwire-scorer";

/// `POST /rerank` body (text-embeddings-inference).
#[derive(Debug, Deserialize, ToSchema)]
pub struct TeiRerankBody {
    /// What the texts are judged against; must not be empty.
    pub query: String,
    /// The candidates: at least one, none empty, at most the server's
    /// `max_rerank_texts` (413 past it).
    pub texts: Vec<String>,
    /// Return the cross-encoder's logit instead of its sigmoid (default false). A
    /// bi-encoder's score is the cosine similarity either way.
    #[serde(default)]
    pub raw_scores: Option<bool>,
    /// Echo each text in its rank (default false).
    #[serde(default)]
    pub return_text: Option<bool>,
    /// Cut a (query, text) pair longer than the scorer's limit. Left out: the server's
    /// default, true. False: an over-long pair is a 400 naming `texts[i]`.
    #[serde(default)]
    pub truncate: Option<bool>,
    /// Which end of an over-long text is cut (default `right`).
    #[serde(default)]
    pub truncation_direction: Option<TruncationDirectionBody>,
}

/// The end of an over-long text that loses tokens. TEI spells them `Left` and
/// `Right`; both spellings are accepted.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TruncationDirectionBody {
    #[serde(alias = "Right")]
    Right,
    #[serde(alias = "Left")]
    Left,
}

/// One text's place in a `POST /rerank` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct TeiRank {
    /// The text's position in `texts`.
    pub index: u32,
    /// The text, when `return_text` was set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Relevance: higher is more relevant.
    pub score: f32,
}

/// `POST /v1/rerank` body (Cohere v1, Jina).
#[derive(Debug, Deserialize, ToSchema)]
pub struct CohereV1RerankBody {
    /// What the documents are judged against; must not be empty.
    pub query: String,
    /// The candidates: strings, or objects with a `text` string (other keys are
    /// ignored). At least one, none empty, at most the server's `max_rerank_texts`.
    pub documents: Vec<DocumentBody>,
    /// Keep only the n best results (at least 1; default: all).
    #[serde(default)]
    pub top_n: Option<u32>,
    /// Add each document's text to its result (default false, as in Cohere's API).
    #[serde(default)]
    pub return_documents: Option<bool>,
    /// Any model name; the answer names the model used.
    #[serde(default)]
    pub model: Option<String>,
}

/// `POST /v2/rerank` body (Cohere v2).
#[derive(Debug, Deserialize, ToSchema)]
pub struct CohereV2RerankBody {
    /// Any model name (Cohere requires one; here it may be left out).
    #[serde(default)]
    pub model: Option<String>,
    /// What the documents are judged against; must not be empty.
    pub query: String,
    /// The candidates: strings (objects with a `text` string are accepted too). At
    /// least one, none empty, at most the server's `max_rerank_texts`.
    pub documents: Vec<DocumentBody>,
    /// Keep only the n best results (at least 1; default: all).
    #[serde(default)]
    pub top_n: Option<u32>,
    /// Cut each document to this many of the scorer's tokens before pairing it with
    /// the query (at least 1; default: only the scorer's own limit).
    #[serde(default)]
    pub max_tokens_per_doc: Option<u32>,
}

/// A document to rerank: a string, or an object with a `text` string.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum DocumentBody {
    Text(String),
    Object(DocumentText),
}

impl DocumentBody {
    fn into_text(self) -> String {
        match self {
            DocumentBody::Text(text) | DocumentBody::Object(DocumentText { text }) => text,
        }
    }
}

/// A document as an object; the answer's `document` has the same shape.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DocumentText {
    /// The document's text.
    pub text: String,
}

// By hand instead of `#[serde(untagged)]`: untagged enums report only "did not match
// any variant", while this names `documents[1].text` for an object without a string
// `text` (the object is read through the same path-tracking deserializer).
impl<'de> Deserialize<'de> for DocumentBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DocumentVisitor;

        impl<'de> Visitor<'de> for DocumentVisitor {
            type Value = DocumentBody;

            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a string or an object with a `text` string")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<DocumentBody, E> {
                Ok(DocumentBody::Text(text.to_string()))
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<DocumentBody, E> {
                Ok(DocumentBody::Text(text))
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<DocumentBody, M::Error> {
                #[derive(Deserialize)]
                struct Object {
                    text: String,
                }
                let object = Object::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(DocumentBody::Object(DocumentText { text: object.text }))
            }
        }

        deserializer.deserialize_any(DocumentVisitor)
    }
}

/// `POST /v1/rerank` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct CohereV1Reply {
    /// An id for this answer (random, for the client's logs).
    pub id: String,
    /// The scorer's model id (whatever the request named).
    pub model: String,
    /// Best first; `top_n` of them when set.
    pub results: Vec<CohereV1Result>,
    /// Tokens the scorer read (Jina's field).
    pub usage: RerankUsage,
    /// Cohere's `meta`.
    pub meta: CohereMeta,
}

/// One document's place in a `POST /v1/rerank` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct CohereV1Result {
    /// The document's position in `documents`.
    pub index: u32,
    /// Relevance: higher is more relevant (a cross-encoder's probability in [0, 1];
    /// the bi-encoder's cosine similarity in [-1, 1]).
    pub relevance_score: f32,
    /// The document, when `return_documents` was set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<DocumentText>,
}

/// `POST /v2/rerank` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct CohereV2Reply {
    /// An id for this answer (random, for the client's logs).
    pub id: String,
    /// Best first; `top_n` of them when set.
    pub results: Vec<CohereV2Result>,
    /// Cohere's `meta`.
    pub meta: CohereMeta,
}

/// One document's place in a `POST /v2/rerank` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct CohereV2Result {
    /// The document's position in `documents`.
    pub index: u32,
    /// Relevance: higher is more relevant.
    pub relevance_score: f32,
}

/// Tokens counted by the scorer's tokenizer, special tokens included.
#[derive(Debug, Serialize, ToSchema)]
pub struct RerankUsage {
    pub total_tokens: u32,
}

/// Cohere's `meta`: the API version this shape follows and the tokens read. Nothing
/// is billed, so there is no `billed_units`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CohereMeta {
    pub api_version: ApiVersion,
    pub tokens: MetaTokens,
}

/// The Cohere API version a route follows.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiVersion {
    /// `1` or `2`.
    pub version: &'static str,
}

/// Tokens read (input) and written (output: always 0 for rerank).
#[derive(Debug, Serialize, ToSchema)]
pub struct MetaTokens {
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// Reranks texts (text-embeddings-inference's shape).
#[utoipa::path(post, path = "/rerank", request_body = TeiRerankBody,
    responses(
        (status = 200, body = Vec<TeiRank>, description = "Best first", headers(
            ("x-embedwire-scorer" = String, description = "cross-encoder:<model id> or bi-encoder:<model id>"))),
        (status = 400, body = crate::error::ErrorDetail, description = "A bad field, named in `field` (`texts[2]`)"),
        (status = 413, body = crate::error::ErrorDetail, description = "More texts than the server's max_rerank_texts"),
        (status = 429, body = crate::error::ErrorDetail, description = "The server is overloaded")))]
pub async fn tei<U: Upstream>(
    State(state): State<AppState<U>>,
    JsonBody(body): JsonBody<TeiRerankBody>,
) -> Result<Response, ApiError> {
    let direction = match body.truncation_direction {
        None => TruncationDirection::Unspecified,
        Some(TruncationDirectionBody::Right) => TruncationDirection::Right,
        Some(TruncationDirectionBody::Left) => TruncationDirection::Left,
    };
    let request = RerankRequest {
        query: body.query,
        texts: body.texts,
        truncate: body.truncate,
        raw_scores: body.raw_scores.unwrap_or(false),
        return_text: body.return_text.unwrap_or(false),
        truncation_direction: direction.into(),
        ..RerankRequest::default()
    };
    let (reply, metadata) = rerank(&state, request, &[]).await?;
    let ranks: Vec<TeiRank> =
        reply.ranks.iter().map(|r| TeiRank { index: r.index, text: r.text.clone(), score: r.score }).collect();
    Ok(decorate(json_response(&ranks), &reply, &metadata))
}

/// Reranks documents (Cohere's v1 and Jina's shape).
#[utoipa::path(post, path = "/v1/rerank", request_body = CohereV1RerankBody,
    responses(
        (status = 200, body = CohereV1Reply, headers(
            ("x-embedwire-scorer" = String, description = "cross-encoder:<model id> or bi-encoder:<model id>"))),
        (status = 400, body = crate::error::ErrorDetail, description = "A bad field, named in `field` (`documents[2]`)"),
        (status = 413, body = crate::error::ErrorDetail, description = "More documents than the server's max_rerank_texts"),
        (status = 429, body = crate::error::ErrorDetail, description = "The server is overloaded")))]
pub async fn cohere_v1<U: Upstream>(
    State(state): State<AppState<U>>,
    JsonBody(body): JsonBody<CohereV1RerankBody>,
) -> Result<Response, ApiError> {
    let return_documents = body.return_documents.unwrap_or(false);
    let request = RerankRequest {
        query: body.query,
        texts: body.documents.into_iter().map(DocumentBody::into_text).collect(),
        return_text: return_documents,
        top_n: at_least_one("top_n", body.top_n)?,
        ..RerankRequest::default()
    };
    let (reply, metadata) = rerank(&state, request, &[("texts", "documents")]).await?;
    let tokens = reply.usage.unwrap_or_default().total_tokens;
    let answer = CohereV1Reply {
        id: response_id(),
        model: reply.model.clone(),
        results: reply
            .ranks
            .iter()
            .map(|r| CohereV1Result {
                index: r.index,
                relevance_score: r.score,
                document: return_documents.then(|| DocumentText { text: r.text.clone().unwrap_or_default() }),
            })
            .collect(),
        usage: RerankUsage { total_tokens: tokens },
        meta: cohere_meta("1", tokens),
    };
    Ok(decorate(json_response(&answer), &reply, &metadata))
}

/// Reranks documents (Cohere's v2 shape).
#[utoipa::path(post, path = "/v2/rerank", request_body = CohereV2RerankBody,
    responses(
        (status = 200, body = CohereV2Reply, headers(
            ("x-embedwire-scorer" = String, description = "cross-encoder:<model id> or bi-encoder:<model id>"))),
        (status = 400, body = crate::error::ErrorDetail, description = "A bad field, named in `field` (`documents[2]`)"),
        (status = 413, body = crate::error::ErrorDetail, description = "More documents than the server's max_rerank_texts"),
        (status = 429, body = crate::error::ErrorDetail, description = "The server is overloaded")))]
pub async fn cohere_v2<U: Upstream>(
    State(state): State<AppState<U>>,
    JsonBody(body): JsonBody<CohereV2RerankBody>,
) -> Result<Response, ApiError> {
    let request = RerankRequest {
        query: body.query,
        texts: body.documents.into_iter().map(DocumentBody::into_text).collect(),
        top_n: at_least_one("top_n", body.top_n)?,
        max_tokens_per_text: at_least_one("max_tokens_per_doc", body.max_tokens_per_doc)?,
        ..RerankRequest::default()
    };
    let renames = [("texts", "documents"), ("max_tokens_per_text", "max_tokens_per_doc")];
    let (reply, metadata) = rerank(&state, request, &renames).await?;
    let tokens = reply.usage.unwrap_or_default().total_tokens;
    let answer = CohereV2Reply {
        id: response_id(),
        results: reply.ranks.iter().map(|r| CohereV2Result { index: r.index, relevance_score: r.score }).collect(),
        meta: cohere_meta("2", tokens),
    };
    Ok(decorate(json_response(&answer), &reply, &metadata))
}

/// The upstream's answer, or its error in the route's terms: `renames` maps the
/// server's field names to the route's, and too many texts (OUT_OF_RANGE) is a 413
/// naming the list.
async fn rerank<U: Upstream>(
    state: &AppState<U>,
    request: RerankRequest,
    renames: &[(&str, &str)],
) -> Result<(RerankResponse, tonic::metadata::MetadataMap), ApiError> {
    let answer = state.upstream.rerank(request).await.map_err(|status| route_error(status, renames))?;
    let metadata = answer.metadata().clone();
    Ok((answer.into_inner(), metadata))
}

/// An upstream error in a route's terms (see [`rerank`]).
fn route_error(status: tonic::Status, renames: &[(&str, &str)]) -> ApiError {
    let too_many = status.code() == Code::OutOfRange && status.message().starts_with("texts");
    let mut error = ApiError::from(status);
    if too_many {
        error.http_status = Some(StatusCode::PAYLOAD_TOO_LARGE);
        error.field = Some("texts".to_string());
    }
    renames.iter().fold(error, |error, (server, route)| error.renamed(server, route))
}

/// Cohere's `top_n` and `max_tokens_per_doc` start at 1; on the wire 0 means unset,
/// so a 0 here would silently mean "all" or "no limit".
fn at_least_one(field: &str, value: Option<u32>) -> Result<Option<u32>, ApiError> {
    match value {
        Some(0) => Err(ApiError::invalid(field, "must be at least 1")),
        other => Ok(other),
    }
}

fn cohere_meta(version: &'static str, tokens: u32) -> CohereMeta {
    CohereMeta { api_version: ApiVersion { version }, tokens: MetaTokens { input_tokens: tokens, output_tokens: 0 } }
}

/// The server's timing, the scorer, and text-embeddings-inference's cost headers
/// (`x-compute-characters`, `x-compute-tokens`, `x-total-time`, `x-tokenization-time`,
/// `x-queue-time`, `x-inference-time`; times in milliseconds, as TEI sends them).
fn decorate(response: Response, reply: &RerankResponse, metadata: &tonic::metadata::MetadataMap) -> Response {
    let mut response = with_timing(response, metadata);
    let headers = response.headers_mut();
    if let Ok(scorer) = HeaderValue::from_str(&reply.scorer) {
        headers.insert(SCORER_HEADER, scorer);
    }
    if let Some(cost) = &reply.metadata {
        let ms = |ns: u64| HeaderValue::from(ns / 1_000_000);
        headers.insert("x-compute-characters", HeaderValue::from(cost.compute_chars));
        headers.insert("x-compute-tokens", HeaderValue::from(cost.compute_tokens));
        headers.insert("x-compute-time", ms(cost.inference_time_ns));
        headers.insert("x-total-time", ms(cost.total_time_ns));
        headers.insert("x-tokenization-time", ms(cost.tokenization_time_ns));
        headers.insert("x-queue-time", ms(cost.queue_time_ns));
        headers.insert("x-inference-time", ms(cost.inference_time_ns));
    }
    response
}

/// A random id in UUID v4 form, from std's randomly keyed SipHash (the crate needs
/// no random number generator for an id that only has to differ between answers).
fn response_id() -> String {
    let random = || {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
        );
        hasher.finish()
    };
    let (high, low) = (random(), random());
    let high = (high & 0xffff_ffff_ffff_0fff) | 0x4000; // version 4
    let low = (low & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000; // RFC 4122 variant
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xffff,
        low >> 48,
        low & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse;

    #[test]
    fn documents_are_strings_or_text_objects_and_errors_name_the_field() {
        let body: CohereV1RerankBody =
            parse(br#"{"query": "q", "documents": ["a", {"text": "b", "title": "ignored"}]}"#).unwrap();
        let texts: Vec<String> = body.documents.into_iter().map(DocumentBody::into_text).collect();
        assert_eq!(texts, ["a", "b"]);

        let error = parse::<CohereV1RerankBody>(br#"{"query": "q", "documents": ["a", {"title": "t"}]}"#).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("documents[1].text"), "{}", error.message);
        let error = parse::<CohereV1RerankBody>(br#"{"query": "q", "documents": ["a", {"text": 3}]}"#).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("documents[1].text"), "{}", error.message);
        let error = parse::<CohereV2RerankBody>(br#"{"query": "q", "documents": ["a", 7]}"#).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("documents[1]"), "{}", error.message);
        assert!(error.message.contains("a string or an object with a `text` string"), "{}", error.message);
    }

    #[test]
    fn truncation_direction_in_both_spellings() {
        for (spelling, expected) in [("left", "Left"), ("Left", "Left"), ("right", "Right"), ("Right", "Right")] {
            let body: TeiRerankBody =
                parse(format!(r#"{{"query": "q", "texts": ["a"], "truncation_direction": "{spelling}"}}"#).as_bytes())
                    .unwrap();
            assert_eq!(format!("{:?}", body.truncation_direction.unwrap()), expected);
        }
        let error =
            parse::<TeiRerankBody>(br#"{"query": "q", "texts": ["a"], "truncation_direction": "up"}"#).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("truncation_direction"));
    }

    #[test]
    fn server_errors_in_the_routes_terms() {
        let renames = [("texts", "documents"), ("max_tokens_per_text", "max_tokens_per_doc")];
        let error = route_error(tonic::Status::invalid_argument("texts[3]: is empty"), &renames);
        assert_eq!((error.field.as_deref(), error.message.as_str()), (Some("documents[3]"), "documents[3]: is empty"));
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);

        let status = tonic::Status::out_of_range("texts: has 9 texts, more than the limit of 4 per request");
        let error = route_error(status.clone(), &renames);
        assert_eq!(error.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(error.field.as_deref(), Some("documents"));
        assert!(error.message.starts_with("documents: has 9 texts"), "{}", error.message);
        let error = route_error(status, &[]);
        assert_eq!((error.status(), error.field.as_deref()), (StatusCode::PAYLOAD_TOO_LARGE, Some("texts")));

        let error = route_error(tonic::Status::invalid_argument("max_tokens_per_text: is odd"), &renames);
        assert_eq!(error.field.as_deref(), Some("max_tokens_per_doc"));
        let error = route_error(tonic::Status::resource_exhausted("overloaded"), &renames);
        assert_eq!((error.status(), error.field), (StatusCode::TOO_MANY_REQUESTS, None));
        let error = route_error(tonic::Status::unavailable("loading"), &renames);
        assert_eq!(error.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn ids_look_like_uuids_and_differ() {
        let (a, b) = (response_id(), response_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.as_bytes()[14], b'4', "{a}");
        assert!(matches!(a.as_bytes()[19], b'8' | b'9' | b'a' | b'b'), "{a}");
    }
}
