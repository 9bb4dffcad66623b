//! Microbenchmarks on one answer's worth of real vectors: the server's encode step
//! for each variant, run in-process with the server's own code (embedwire-proto's
//! dtype encodings and prost for gRPC; embedwire-gateway-http's reply types and
//! serializers for HTTP), and the client's decode of the captured answer (Rust).
//! Each is repeated for a fixed time and its median kept: a single 256-text call
//! takes well under a millisecond to encode, too little to time once.

use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use embedwire_gateway_http::encoding::{FloatRow, FloatRows, binary_response, row_bytes};
use embedwire_gateway_http::routes::openai::{EmbeddingItem, EmbeddingValue, EmbeddingsReply, UsageBody};
use embedwire_proto::v1::{EmbedResponse, EmbeddingDtype};
use embedwire_proto::vectors;
use prost::Message;
use serde::Serialize;

use crate::variants::{self, Answer, Variant};

/// The median time of `work`, repeated for about `time` (at least 5 times).
pub fn median_time<T>(time: Duration, mut work: impl FnMut() -> T) -> Duration {
    let mut samples = Vec::new();
    let started = Instant::now();
    while samples.len() < 5 || started.elapsed() < time {
        let one = Instant::now();
        std::hint::black_box(work());
        samples.push(one.elapsed());
    }
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// What the server's encode step produces for `variant` from `values` (rows of
/// `dim` floats, as the model hands them over): its size in bytes.
pub fn server_encode(variant: Variant, values: &[f32], dim: usize) -> usize {
    let count = values.len() / dim;
    match variant {
        Variant::Grpc(dtype) => {
            let rows = vectors::encode_rows(values, dim, dtype);
            let response = EmbedResponse {
                dim: dim as u32,
                count: count as u32,
                dtype: vectors::effective_dtype(dtype) as i32,
                embeddings: rows.bytes.into(),
                row_scales: rows.row_scales,
                values: rows.values,
                ..Default::default()
            };
            response.encode_to_vec().len()
        }
        // The HTTP layer gets FLOAT32 bytes from the embed service, then writes them.
        Variant::HttpJson | Variant::HttpBase64 => {
            let bytes = vectors::encode_rows(values, dim, EmbeddingDtype::Float32).bytes;
            let data = (0..count)
                .map(|index| {
                    let row = row_bytes(&bytes, dim, index);
                    let embedding = if variant == Variant::HttpJson {
                        EmbeddingValue::Float(FloatRow(row))
                    } else {
                        EmbeddingValue::Base64(base64::engine::general_purpose::STANDARD.encode(row))
                    };
                    EmbeddingItem { object: "embedding", index, embedding }
                })
                .collect();
            let reply = EmbeddingsReply {
                object: "list",
                data,
                model: "bench".into(),
                usage: UsageBody { prompt_tokens: 0, total_tokens: 0 },
            };
            serde_json::to_vec(&reply).map_or(0, |body| body.len())
        }
        Variant::HttpEmbedJson => {
            #[derive(Serialize)]
            struct Reply<'a> {
                embeddings: FloatRows<'a>,
            }
            let bytes = vectors::encode_rows(values, dim, EmbeddingDtype::Float32).bytes;
            serde_json::to_vec(&Reply { embeddings: FloatRows { bytes: &bytes, dim } }).map_or(0, |body| body.len())
        }
        Variant::HttpOctet => {
            let bytes = Bytes::from(vectors::encode_rows(values, dim, EmbeddingDtype::Float32).bytes);
            let length = bytes.len();
            drop(binary_response(bytes, count as u32, dim as u32));
            length
        }
    }
}

/// The client's decode of a captured answer, as the load workers do it.
pub fn client_decode(variant: Variant, answer: &Answer) -> anyhow::Result<usize> {
    let decoded = if variant.is_grpc() {
        variants::decode_grpc_message(&answer.body)?
    } else {
        variants::decode_http(variant, &answer.body, answer.dim_header.as_deref())?
    };
    Ok(decoded.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_sizes_follow_the_dtypes() {
        let values: Vec<f32> = (0..2 * 384).map(|i| ((i as f32) * 0.37).sin() / 20.0).collect();
        let size = |variant| server_encode(variant, &values, 384);
        let float32 = size(Variant::Grpc(EmbeddingDtype::Float32));
        assert!((2 * 384 * 4..2 * 384 * 4 + 32).contains(&float32), "{float32}");
        assert!(size(Variant::Grpc(EmbeddingDtype::Float16)) < float32 / 2 + 32);
        assert!(size(Variant::Grpc(EmbeddingDtype::Ubinary)) < 2 * 48 + 32);
        assert_eq!(size(Variant::HttpOctet), 2 * 384 * 4);
        assert!(size(Variant::HttpJson) > 2 * float32, "JSON floats take more than twice the bytes");
        let base64 = size(Variant::HttpBase64);
        assert!(base64 > float32 * 4 / 3 && base64 < float32 * 3 / 2, "{base64}");
    }
}
