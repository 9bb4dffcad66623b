//! The encodings compared: the same texts embedded by the same server, answered as
//! gRPC `EmbedResponse` in each dtype or as HTTP bodies (OpenAI-style JSON floats,
//! base64, raw octet-stream, and the legacy `/embed` JSON). Each variant knows its
//! request and how a client decodes its answer into usable vectors; the load
//! workers decode every answer, as a real client would, so decoding is part of the
//! measured latency on both sides.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use base64::Engine;
use bytes::Bytes;
use embedwire_bench::closed_loop::Caller;
use embedwire_bench::http_client::HttpConnection;
use embedwire_bench::wire_count::{ByteCounters, CountingStream};
use embedwire_proto::v1::{EmbedRequest, EmbedResponse, EmbeddingDtype};
use embedwire_proto::vectors;
use http::{Method, Uri};
use hyper_util::rt::TokioIo;
use prost::Message;
use serde::Deserialize;
use tonic::transport::{Channel, Endpoint};

/// One way of getting the embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Grpc(EmbeddingDtype),
    /// POST /v1/embeddings, `encoding_format: float`.
    HttpJson,
    /// POST /v1/embeddings, `encoding_format: base64`.
    HttpBase64,
    /// POST /v1/embeddings with `Accept: application/octet-stream`.
    HttpOctet,
    /// POST /embed (the legacy contract), JSON floats.
    HttpEmbedJson,
}

/// Every variant, in table order.
pub const ALL: [Variant; 9] = [
    Variant::Grpc(EmbeddingDtype::Float32),
    Variant::Grpc(EmbeddingDtype::Float16),
    Variant::Grpc(EmbeddingDtype::Int8),
    Variant::Grpc(EmbeddingDtype::Ubinary),
    Variant::Grpc(EmbeddingDtype::Float32List),
    Variant::HttpJson,
    Variant::HttpBase64,
    Variant::HttpOctet,
    Variant::HttpEmbedJson,
];

impl Variant {
    /// The name in tables, CSV and file names.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Grpc(EmbeddingDtype::Float32 | EmbeddingDtype::Unspecified) => "grpc_float32",
            Variant::Grpc(EmbeddingDtype::Float16) => "grpc_float16",
            Variant::Grpc(EmbeddingDtype::Int8) => "grpc_int8",
            Variant::Grpc(EmbeddingDtype::Ubinary) => "grpc_ubinary",
            Variant::Grpc(EmbeddingDtype::Float32List) => "grpc_float32_list",
            Variant::HttpJson => "http_json_float",
            Variant::HttpBase64 => "http_json_base64",
            Variant::HttpOctet => "http_octet_stream",
            Variant::HttpEmbedJson => "http_embed_json",
        }
    }

    /// A longer description for the report.
    pub fn describe(self) -> &'static str {
        match self {
            Variant::Grpc(EmbeddingDtype::Float32 | EmbeddingDtype::Unspecified) => "gRPC Embed, FLOAT32 bytes",
            Variant::Grpc(EmbeddingDtype::Float16) => "gRPC Embed, FLOAT16 bytes",
            Variant::Grpc(EmbeddingDtype::Int8) => "gRPC Embed, INT8 bytes + row scales",
            Variant::Grpc(EmbeddingDtype::Ubinary) => "gRPC Embed, UBINARY (1 bit/dim)",
            Variant::Grpc(EmbeddingDtype::Float32List) => "gRPC Embed, FLOAT32_LIST (repeated float)",
            Variant::HttpJson => "HTTP /v1/embeddings, JSON floats",
            Variant::HttpBase64 => "HTTP /v1/embeddings, base64",
            Variant::HttpOctet => "HTTP /v1/embeddings, octet-stream",
            Variant::HttpEmbedJson => "HTTP /embed, JSON floats",
        }
    }

    pub fn is_grpc(self) -> bool {
        matches!(self, Variant::Grpc(_))
    }

    /// Parses a name as printed by [`Variant::name`].
    pub fn parse(name: &str) -> Option<Variant> {
        ALL.into_iter().find(|variant| variant.name() == name)
    }
}

/// What a decoded answer holds: the vectors as f32 (FLOAT16 and INT8 come back
/// approximately) or, for UBINARY, the packed bits as they are used (Hamming
/// distance works on them directly).
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    Floats { count: usize, dim: usize, values: Vec<f32> },
    Bits { count: usize, bytes_per_row: usize, bits: Vec<u8> },
}

impl Decoded {
    pub fn count(&self) -> usize {
        match self {
            Decoded::Floats { count, .. } | Decoded::Bits { count, .. } => *count,
        }
    }
}

/// The request body or message of a variant for `texts`.
#[derive(Debug, Clone)]
pub enum Request {
    Grpc(EmbedRequest),
    Http { path: &'static str, body: Bytes, accept: Option<&'static str> },
}

/// Builds the request of `variant` for `texts`.
pub fn request(variant: Variant, texts: &[String]) -> Request {
    let json = |value: serde_json::Value| Bytes::from(serde_json::to_vec(&value).expect("plain JSON"));
    match variant {
        Variant::Grpc(dtype) => {
            Request::Grpc(EmbedRequest { inputs: texts.to_vec(), dtype: dtype as i32, ..Default::default() })
        }
        Variant::HttpJson => Request::Http {
            path: "/v1/embeddings",
            body: json(serde_json::json!({"input": texts, "model": "bench", "encoding_format": "float"})),
            accept: None,
        },
        Variant::HttpBase64 => Request::Http {
            path: "/v1/embeddings",
            body: json(serde_json::json!({"input": texts, "model": "bench", "encoding_format": "base64"})),
            accept: None,
        },
        Variant::HttpOctet => Request::Http {
            path: "/v1/embeddings",
            body: json(serde_json::json!({"input": texts, "model": "bench"})),
            accept: Some("application/octet-stream"),
        },
        Variant::HttpEmbedJson => {
            Request::Http { path: "/embed", body: json(serde_json::json!({"texts": texts})), accept: None }
        }
    }
}

#[derive(Deserialize)]
struct FloatList {
    data: Vec<FloatItem>,
}

#[derive(Deserialize)]
struct FloatItem {
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct Base64List {
    data: Vec<Base64Item>,
}

#[derive(Deserialize)]
struct Base64Item {
    embedding: String,
}

#[derive(Deserialize)]
struct EmbedJson {
    embeddings: Vec<Vec<f32>>,
}

/// Rows of equal length flattened, or an error naming the odd one.
fn flatten(rows: impl IntoIterator<Item = Vec<f32>>) -> anyhow::Result<Decoded> {
    let mut values = Vec::new();
    let mut dim = None;
    let mut count = 0;
    for row in rows {
        anyhow::ensure!(*dim.get_or_insert(row.len()) == row.len(), "row {count} has {} values", row.len());
        values.extend_from_slice(&row);
        count += 1;
    }
    Ok(Decoded::Floats { count, dim: dim.unwrap_or(0), values })
}

/// Decodes an HTTP body of `variant` (headers give the octet-stream's shape).
pub fn decode_http(variant: Variant, body: &[u8], dim_header: Option<&str>) -> anyhow::Result<Decoded> {
    match variant {
        Variant::HttpJson => {
            flatten(serde_json::from_slice::<FloatList>(body)?.data.into_iter().map(|item| item.embedding))
        }
        Variant::HttpEmbedJson => flatten(serde_json::from_slice::<EmbedJson>(body)?.embeddings),
        Variant::HttpBase64 => {
            let list: Base64List = serde_json::from_slice(body)?;
            let engine = base64::engine::general_purpose::STANDARD;
            let rows: anyhow::Result<Vec<Vec<f32>>> = list
                .data
                .iter()
                .map(|item| Ok(vectors::f32_from_le_bytes(&engine.decode(&item.embedding).context("base64")?)))
                .collect();
            flatten(rows?)
        }
        Variant::HttpOctet => {
            let dim: usize = dim_header.context("no x-embedding-dimensions header")?.parse()?;
            anyhow::ensure!(dim > 0 && body.len() % (dim * 4) == 0, "{} bytes are not rows of {dim} f32", body.len());
            Ok(Decoded::Floats { count: body.len() / (dim * 4), dim, values: vectors::f32_from_le_bytes(body) })
        }
        Variant::Grpc(_) => anyhow::bail!("{} is not an HTTP variant", variant.name()),
    }
}

/// Decodes an `EmbedResponse` into vectors.
pub fn decode_grpc(response: &EmbedResponse) -> anyhow::Result<Decoded> {
    let (count, dim) = (response.count as usize, response.dim as usize);
    let dtype = vectors::effective_dtype(response.dtype());
    if dtype == EmbeddingDtype::Ubinary {
        let bytes_per_row = vectors::bytes_per_row(dtype, dim);
        anyhow::ensure!(
            response.embeddings.len() == count * bytes_per_row,
            "UBINARY answer of {} bytes",
            response.embeddings.len()
        );
        return Ok(Decoded::Bits { count, bytes_per_row, bits: response.embeddings.to_vec() });
    }
    let values = vectors::decode_rows(&response.embeddings, &response.row_scales, &response.values, count, dim, dtype)?;
    Ok(Decoded::Floats { count, dim, values })
}

/// Decodes the protobuf bytes of an `EmbedResponse` (what tonic does on receipt),
/// then its vectors.
pub fn decode_grpc_message(message: &[u8]) -> anyhow::Result<Decoded> {
    decode_grpc(&EmbedResponse::decode(message)?)
}

/// A gRPC channel whose bytes add to `counters`.
pub async fn grpc_channel(address: SocketAddr, counters: Arc<ByteCounters>) -> anyhow::Result<Channel> {
    let connector = tower::service_fn(move |_: Uri| {
        let counters = counters.clone();
        async move { CountingStream::connect(address, counters).await.map(TokioIo::new) }
    });
    let channel = Endpoint::from_shared(format!("http://{address}"))?
        // As the Rust client does (embedwire_client's transport): a 393 KB answer
        // then comes as one DATA frame instead of 25 frames of the 16 KB default,
        // each of which cost the server a writev.
        .max_frame_size(embedwire_proto::transport::MAX_FRAME_SIZE)
        .connect_with_connector(connector)
        .await
        .context("gRPC connection")?;
    Ok(channel)
}

/// The method every gRPC variant calls.
const EMBED_PATH: &str = "/embedwire.v1.EmbedService/Embed";

/// The generated client's codec for Embed, except that the request goes out as the
/// bytes it was encoded to once (see [`Transport::Grpc`]).
#[derive(Debug, Clone, Copy, Default)]
struct PreEncodedEmbed;

impl tonic::codec::Codec for PreEncodedEmbed {
    type Encode = Bytes;
    type Decode = EmbedResponse;
    type Encoder = PreEncodedEmbed;
    type Decoder = tonic_prost::ProstDecoder<EmbedResponse>;

    fn encoder(&mut self) -> Self::Encoder {
        PreEncodedEmbed
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

impl tonic::codec::Encoder for PreEncodedEmbed {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

/// What one call answered, for the single-call probe.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP body, or the protobuf bytes of the gRPC message.
    pub body: Vec<u8>,
    /// x-embedding-dimensions, for octet-stream.
    pub dim_header: Option<String>,
    pub decoded: Decoded,
}

/// One worker of a variant: its own connection, the same request every call, every
/// answer decoded and its row count checked.
pub struct VariantCaller {
    transport: Transport,
    /// Vectors each answer must hold: one per text.
    expected: usize,
}

enum Transport {
    /// The request's protobuf bytes, encoded once, as the HTTP variants send one JSON
    /// body serialized once: only the answers differ between the variants, so only
    /// they should cost the client differently.
    Grpc {
        client: tonic::client::Grpc<Channel>,
        request: Bytes,
    },
    Http {
        connection: HttpConnection,
        variant: Variant,
        path: &'static str,
        body: Bytes,
        accept: Option<&'static str>,
    },
}

/// An answer as received, before decoding.
enum Raw {
    Grpc(EmbedResponse),
    Http(embedwire_bench::http_client::HttpResponse),
}

impl VariantCaller {
    /// A worker with a fresh connection counted in `counters`.
    pub async fn connect(
        variant: Variant,
        texts: &[String],
        address: SocketAddr,
        counters: Arc<ByteCounters>,
    ) -> anyhow::Result<Self> {
        let transport = match request(variant, texts) {
            Request::Grpc(request) => {
                // The default 4 MiB limit is below a 1024-text FLOAT32_LIST answer.
                let client = tonic::client::Grpc::new(grpc_channel(address, counters).await?)
                    .max_decoding_message_size(64 << 20);
                Transport::Grpc { client, request: request.encode_to_vec().into() }
            }
            Request::Http { path, body, accept } => Transport::Http {
                connection: HttpConnection::open(address, counters).await?,
                variant,
                path,
                body,
                accept,
            },
        };
        Ok(VariantCaller { transport, expected: texts.len() })
    }

    /// One call, decoded, its row count checked.
    async fn fetch(&mut self) -> anyhow::Result<(Raw, Decoded)> {
        let (raw, decoded) = match &mut self.transport {
            Transport::Grpc { client, request } => {
                client.ready().await.context("gRPC connection")?;
                let path = http::uri::PathAndQuery::from_static(EMBED_PATH);
                let call = client.unary(tonic::Request::new(request.clone()), path, PreEncodedEmbed);
                let response = call.await.context("Embed")?.into_inner();
                let decoded = decode_grpc(&response)?;
                (Raw::Grpc(response), decoded)
            }
            Transport::Http { connection, variant, path, body, accept } => {
                let answer =
                    connection.send(Method::POST, path, Some((body.clone(), "application/json")), *accept).await?;
                answer.ensure_success()?;
                let decoded = decode_http(*variant, &answer.body, answer.header("x-embedding-dimensions"))?;
                (Raw::Http(answer), decoded)
            }
        };
        anyhow::ensure!(decoded.count() == self.expected, "{} vectors for {} inputs", decoded.count(), self.expected);
        Ok((raw, decoded))
    }

    /// One call, with the bytes that carried it (for the probe and the decode
    /// benchmarks).
    pub async fn answer(&mut self) -> anyhow::Result<Answer> {
        let (raw, decoded) = self.fetch().await?;
        Ok(match raw {
            Raw::Grpc(response) => Answer { body: response.encode_to_vec(), dim_header: None, decoded },
            Raw::Http(answer) => Answer {
                dim_header: answer.header("x-embedding-dimensions").map(str::to_string),
                body: answer.body.to_vec(),
                decoded,
            },
        })
    }
}

impl Caller for VariantCaller {
    async fn call(&mut self, _n: usize) -> anyhow::Result<()> {
        self.fetch().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_http_body_to_the_same_vectors() {
        let rows = [[0.5f32, -0.25, 1.0], [0.0, 2.0, -1.5]];
        let bytes: Vec<u8> = rows.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
        let floats =
            serde_json::json!({"data": rows.iter().map(|r| serde_json::json!({"embedding": r})).collect::<Vec<_>>()});
        let engine = base64::engine::general_purpose::STANDARD;
        let b64 = serde_json::json!({"data": rows.iter().map(|r| {
            let row: Vec<u8> = r.iter().flat_map(|v| v.to_le_bytes()).collect();
            serde_json::json!({"embedding": engine.encode(row)})
        }).collect::<Vec<_>>()});
        let expected = Decoded::Floats { count: 2, dim: 3, values: rows.iter().flatten().copied().collect() };
        let json = |v: &serde_json::Value| serde_json::to_vec(v).unwrap();
        assert_eq!(decode_http(Variant::HttpJson, &json(&floats), None).unwrap(), expected);
        assert_eq!(decode_http(Variant::HttpBase64, &json(&b64), None).unwrap(), expected);
        assert_eq!(decode_http(Variant::HttpOctet, &bytes, Some("3")).unwrap(), expected);
        let legacy = serde_json::json!({"embeddings": rows});
        assert_eq!(decode_http(Variant::HttpEmbedJson, &json(&legacy), None).unwrap(), expected);
        assert!(decode_http(Variant::HttpOctet, &bytes, Some("5")).is_err(), "24 bytes are not rows of 5");
    }

    #[test]
    fn decodes_grpc_messages_of_every_dtype() {
        let values = [0.5f32, -0.25, 1.0, 0.0, 2.0, -1.5, 0.1, 0.2];
        for dtype in
            [EmbeddingDtype::Float32, EmbeddingDtype::Float16, EmbeddingDtype::Int8, EmbeddingDtype::Float32List]
        {
            let rows = vectors::encode_rows(&values, 4, dtype);
            let response = EmbedResponse {
                dim: 4,
                count: 2,
                dtype: dtype as i32,
                embeddings: rows.bytes.into(),
                row_scales: rows.row_scales,
                values: rows.values,
                ..Default::default()
            };
            let Decoded::Floats { count, dim, values: back } = decode_grpc_message(&response.encode_to_vec()).unwrap()
            else {
                panic!("{dtype:?} decoded to bits");
            };
            assert_eq!((count, dim), (2, 4));
            assert!(back.iter().zip(values).all(|(a, b)| (a - b).abs() < 0.02), "{dtype:?}: {back:?}");
        }
        let bits = vectors::encode_rows(&values, 8, EmbeddingDtype::Ubinary).bytes;
        let response = EmbedResponse {
            dim: 8,
            count: 1,
            dtype: EmbeddingDtype::Ubinary as i32,
            embeddings: bits.clone().into(),
            ..Default::default()
        };
        assert_eq!(decode_grpc(&response).unwrap(), Decoded::Bits { count: 1, bytes_per_row: 1, bits });
        assert_eq!(Variant::parse("http_octet_stream"), Some(Variant::HttpOctet));
    }
}
