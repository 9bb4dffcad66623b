//! One mapping from gRPC status codes to HTTP statuses, and the two JSON error shapes:
//! embedwire's own `{"error": {"code", "message", "field"}}` for every route but the
//! OpenAI-compatible one, which answers in OpenAI's format so that its SDKs raise
//! their usual exceptions. A refusal with a retry hint (the gRPC status's
//! `grpc-retry-pushback-ms`) answers with `Retry-After` and `retry-after-ms` headers
//! in both shapes.

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tonic::Code;

/// Why a request failed, as the HTTP layer reports it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The gRPC code the failure corresponds to (the HTTP status follows from it).
    pub code: Code,
    /// What went wrong, naming the field at fault where there is one.
    pub message: String,
    /// The request field at fault (`documents[2].text`), when known.
    pub field: Option<String>,
    /// Overrides the status derived from `code` (413 for bodies over the limit,
    /// 415 for a wrong content type), which gRPC has no codes for.
    pub http_status: Option<StatusCode>,
    /// When the same request should work again (an overload refusal's hint), sent
    /// as `Retry-After` and `retry-after-ms`.
    pub retry_after: Option<Duration>,
}

/// The precise retry hint in milliseconds, beside `Retry-After`'s whole seconds,
/// which round a 50 ms hint up to a full second.
pub const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");

impl ApiError {
    /// A 400 naming `field`.
    pub fn invalid(field: impl Into<String>, problem: impl std::fmt::Display) -> Self {
        let field = field.into();
        ApiError {
            code: Code::InvalidArgument,
            message: format!("{field}: {problem}"),
            field: Some(field),
            http_status: None,
            retry_after: None,
        }
    }

    /// An error with an explicit HTTP status.
    pub fn with_status(status: StatusCode, code: Code, message: impl Into<String>) -> Self {
        ApiError { code, message: message.into(), field: None, http_status: Some(status), retry_after: None }
    }

    /// A 404 for a route or resource that does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError { code: Code::NotFound, message: message.into(), field: None, http_status: None, retry_after: None }
    }

    /// A refusal with a retry hint (RESOURCE_EXHAUSTED, HTTP 429 + `Retry-After`).
    pub fn refused(message: impl Into<String>, retry_after: Duration) -> Self {
        ApiError {
            code: Code::ResourceExhausted,
            message: message.into(),
            field: None,
            http_status: None,
            retry_after: Some(retry_after),
        }
    }

    /// The error with the server's name for a field (`inputs[2]`) replaced by the
    /// route's (`texts[2]`), in `field` and at the start of the message.
    pub fn renamed(mut self, server_prefix: &str, route_prefix: &str) -> Self {
        if let Some(field) = self.field.as_mut().filter(|f| f.starts_with(server_prefix)) {
            *field = format!("{route_prefix}{}", &field[server_prefix.len()..]);
        }
        if self.message.starts_with(server_prefix) {
            self.message = format!("{route_prefix}{}", &self.message[server_prefix.len()..]);
        }
        self
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        self.http_status.unwrap_or_else(|| http_status_of(self.code))
    }

    /// The body OpenAI's API would send (`{"error": {"message", "type", "param", "code"}}`).
    pub fn into_openai_response(self) -> Response {
        let status = self.status();
        let kind = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => "authentication_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            status if status.is_server_error() => "server_error",
            _ => "invalid_request_error",
        };
        let body = OpenAiErrorBody {
            error: OpenAiError { message: self.message, kind, param: self.field, code: openai_code(self.code) },
        };
        with_retry_headers((status, Json(body)).into_response(), self.retry_after)
    }
}

impl From<tonic::Status> for ApiError {
    /// The server's messages already name the field (`inputs[3]: is empty`); the part
    /// before the first colon is offered as `field` when it looks like one.
    fn from(status: tonic::Status) -> Self {
        let message = status.message().to_string();
        let field = (status.code() == Code::InvalidArgument).then(|| field_of(&message)).flatten();
        let retry_after = embedwire_proto::transport::retry_pushback(&status);
        ApiError { code: status.code(), message, field, http_status: None, retry_after }
    }
}

/// The one table from gRPC codes to HTTP statuses (the mapping gRPC gateways use).
pub fn http_status_of(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Cancelled => StatusCode::from_u16(499).expect("499 is a valid status"),
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `inputs[3]` from `inputs[3]: is empty`, if the prefix has no spaces.
fn field_of(message: &str) -> Option<String> {
    let (prefix, _) = message.split_once(": ")?;
    (!prefix.is_empty() && !prefix.contains(' ')).then(|| prefix.to_string())
}

fn openai_code(code: Code) -> Option<&'static str> {
    match code {
        Code::ResourceExhausted => Some("rate_limit_exceeded"),
        Code::NotFound => Some("not_found"),
        Code::Unauthenticated => Some("invalid_api_key"),
        _ => None,
    }
}

#[derive(Serialize)]
struct ErrorBody {
    error: ErrorDetail,
}

/// The JSON body of every error outside the OpenAI route.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// The gRPC status name (`INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`, ...).
    code: String,
    /// What went wrong.
    message: String,
    /// The request field at fault, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
}

#[derive(Serialize)]
struct OpenAiErrorBody {
    error: OpenAiError,
}

#[derive(Serialize)]
struct OpenAiError {
    message: String,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<String>,
    code: Option<&'static str>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body =
            ErrorBody { error: ErrorDetail { code: code_name(self.code), message: self.message, field: self.field } };
        with_retry_headers((status, Json(body)).into_response(), self.retry_after)
    }
}

/// `Retry-After` in whole seconds (RFC 9110 has no finer unit), rounded up so a
/// client that honors it never comes back early, and at least 1 (0 would invite an
/// immediate retry); `retry-after-ms` keeps the precise hint for clients that
/// read it.
fn with_retry_headers(mut response: Response, retry_after: Option<Duration>) -> Response {
    if let Some(retry_after) = retry_after {
        let millis = retry_after.as_nanos().div_ceil(1_000_000).max(1);
        let seconds = millis.div_ceil(1000);
        let headers = response.headers_mut();
        headers.insert(axum::http::header::RETRY_AFTER, HeaderValue::from(seconds as u64));
        headers.insert(RETRY_AFTER_MS, HeaderValue::from(millis as u64));
    }
    response
}

/// `INVALID_ARGUMENT` for `Code::InvalidArgument`: the names gRPC documents.
fn code_name(code: Code) -> String {
    let words = format!("{code:?}");
    let mut name = String::with_capacity(words.len() + 4);
    for (i, c) in words.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names_are_grpc_names() {
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::ResourceExhausted), "RESOURCE_EXHAUSTED");
        assert_eq!(code_name(Code::NotFound), "NOT_FOUND");
    }

    #[test]
    fn status_table() {
        assert_eq!(http_status_of(Code::InvalidArgument), StatusCode::BAD_REQUEST);
        assert_eq!(http_status_of(Code::Unauthenticated), StatusCode::UNAUTHORIZED);
        assert_eq!(http_status_of(Code::PermissionDenied), StatusCode::FORBIDDEN);
        assert_eq!(http_status_of(Code::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(http_status_of(Code::ResourceExhausted), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(http_status_of(Code::Unavailable), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(http_status_of(Code::DeadlineExceeded), StatusCode::GATEWAY_TIMEOUT);
    }

    #[test]
    fn a_refusals_hint_becomes_retry_after_headers() {
        let mut status = tonic::Status::resource_exhausted("busy");
        embedwire_proto::transport::set_retry_pushback(&mut status, Duration::from_millis(1_250));
        let response = ApiError::from(status).into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[axum::http::header::RETRY_AFTER], "2", "whole seconds, rounded up");
        assert_eq!(response.headers()[RETRY_AFTER_MS], "1250");

        let response = ApiError::refused("busy", Duration::from_millis(5)).into_openai_response();
        assert_eq!(response.headers()[axum::http::header::RETRY_AFTER], "1", "never 0");
        assert_eq!(response.headers()[RETRY_AFTER_MS], "5");

        let response = ApiError::from(tonic::Status::resource_exhausted("too big")).into_response();
        assert!(response.headers().get(axum::http::header::RETRY_AFTER).is_none(), "no hint, no header");
    }

    #[test]
    fn field_from_server_message() {
        let error = ApiError::from(tonic::Status::invalid_argument("inputs[3]: is empty"));
        assert_eq!(error.field.as_deref(), Some("inputs[3]"));
        let error = ApiError::from(tonic::Status::invalid_argument("the request is odd: yes"));
        assert_eq!(error.field, None);
    }
}
