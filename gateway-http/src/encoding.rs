//! Turning the FLOAT32 bytes of an `EmbedResponse` into HTTP bodies: JSON float
//! arrays written straight from the bytes (no intermediate `Vec<Vec<f32>>`), base64
//! rows, or the bytes themselves for clients that accept `application/octet-stream`.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::ser::{Serialize, SerializeSeq, Serializer};

/// The media type of raw little-endian f32 rows.
pub const OCTET_STREAM: &str = "application/octet-stream";
/// Response header with the number of rows of a binary answer.
pub const COUNT_HEADER: &str = "x-embedding-count";
/// Response header with the values per row of a binary answer.
pub const DIMENSIONS_HEADER: &str = "x-embedding-dimensions";

/// True when the client lists `application/octet-stream` in Accept.
pub fn wants_binary(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|media| media.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case(OCTET_STREAM)))
}

/// The rows as a binary body: the bytes as the server encoded them, shape in headers.
pub fn binary_response(bytes: Bytes, count: u32, dim: u32) -> Response {
    let mut response = Response::new(Body::from(bytes));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(OCTET_STREAM));
    headers.insert(COUNT_HEADER, HeaderValue::from(count));
    headers.insert(DIMENSIONS_HEADER, HeaderValue::from(dim));
    response.into_response()
}

/// Row `index` of little-endian f32 rows of `dim` values.
pub fn row_bytes(bytes: &[u8], dim: usize, index: usize) -> &[u8] {
    let width = dim * 4;
    &bytes[index * width..(index + 1) * width]
}

/// One row serialized as a JSON array of numbers, read from its bytes.
pub struct FloatRow<'a>(pub &'a [u8]);

impl Serialize for FloatRow<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len() / 4))?;
        for chunk in self.0.chunks_exact(4) {
            seq.serialize_element(&f32::from_le_bytes(chunk.try_into().expect("chunks of 4")))?;
        }
        seq.end()
    }
}

/// Every row as a JSON array of arrays.
pub struct FloatRows<'a> {
    pub bytes: &'a [u8],
    pub dim: usize,
}

impl Serialize for FloatRows<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let rows = if self.dim == 0 { 0 } else { self.bytes.len() / (self.dim * 4) };
        let mut seq = serializer.serialize_seq(Some(rows))?;
        for index in 0..rows {
            seq.serialize_element(&FloatRow(row_bytes(self.bytes, self.dim, index)))?;
        }
        seq.end()
    }
}

/// A JSON body serialized into one buffer (serde_json writing into a `Vec`).
pub fn json_response(value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response(),
        Err(error) => crate::error::ApiError::with_status(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            tonic::Code::Internal,
            format!("could not encode the response: {error}"),
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_rows_round_trip() {
        let values = [0.1f32, -2.5, 3.0e-8, 1.0, 0.0, 7.25];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let json = serde_json::to_string(&FloatRows { bytes: &bytes, dim: 3 }).unwrap();
        let parsed: Vec<Vec<f32>> = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed, vec![values[..3].to_vec(), values[3..].to_vec()]);
    }

    #[test]
    fn accept_parsing() {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json, application/octet-stream;q=0.9"));
        assert!(wants_binary(&headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!wants_binary(&headers));
    }
}

/// The server's timing metadata (`x-embedwire-*-ms`) and model precision
/// (`x-embedwire-precision`) copied onto an HTTP answer.
pub fn with_timing(mut response: Response, metadata: &tonic::metadata::MetadataMap) -> Response {
    for name in ["x-embedwire-queue-ms", "x-embedwire-inference-ms", "x-embedwire-total-ms", "x-embedwire-precision"] {
        if let Some(value) = metadata.get(name).and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}
