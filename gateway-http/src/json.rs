//! The JSON body extractor of every route: malformed JSON, wrong types and missing
//! fields become a 400 whose message and `field` name the exact place
//! (`documents[1].text`), and a body over the limit becomes a 413. Any content type
//! is accepted: old clients (and `curl -d`) do not always send `application/json`.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A request body parsed as `T`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state).await.map_err(|rejection| {
            let status = rejection.status();
            let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "the request body is larger than the server's limit".to_string()
            } else {
                format!("the request body could not be read: {rejection}")
            };
            ApiError::with_status(status, tonic::Code::InvalidArgument, message)
        })?;
        parse(&bytes).map(JsonBody)
    }
}

/// Parses `bytes` as `T`, naming the field at fault on failure.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid("body", "is empty; expected a JSON object"));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let message = inner.to_string();
        let field = field_name(&path, &message);
        let problem =
            if inner.is_syntax() || inner.is_eof() { format!("is not valid JSON ({message})") } else { message };
        ApiError::invalid(field, strip_position(&problem))
    })
}

/// The full path of the field at fault: serde reports a missing field at its parent's
/// path (`documents[0]`) with the name only in the message (``missing field `text` ``).
fn field_name(path: &str, message: &str) -> String {
    let missing = message.strip_prefix("missing field `").and_then(|rest| rest.split('`').next());
    match (path, missing) {
        (".", Some(name)) => name.to_string(),
        (".", None) => "body".to_string(),
        (parent, Some(name)) => format!("{parent}.{name}"),
        (path, None) => path.to_string(),
    }
}

/// serde_json appends " at line 1 column 17"; keep it only for syntax errors, where
/// the position is the useful part.
fn strip_position(message: &str) -> String {
    if message.starts_with("is not valid JSON") {
        return message.to_string();
    }
    match message.rfind(" at line ") {
        Some(index) => message[..index].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Outer {
        documents: Vec<Inner>,
    }

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        text: String,
    }

    #[test]
    fn names_the_field_at_fault() {
        let error = parse::<Outer>(br#"{"documents": [{"text": "a"}, {"text": 3}]}"#).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("documents[1].text"));
        assert!(error.message.starts_with("documents[1].text: invalid type: integer `3`"), "{}", error.message);

        let error = parse::<Outer>(br#"{"documents": [{}]}"#).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("documents[0].text"));

        let error = parse::<Outer>(br#"{}"#).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("documents"));

        let error = parse::<Outer>(br#"{"documents": [}"#).unwrap_err();
        assert!(error.message.contains("not valid JSON"), "{}", error.message);

        let error = parse::<Outer>(b"  ").unwrap_err();
        assert_eq!(error.field.as_deref(), Some("body"));
    }
}
