//! Conversions between `embedwire.v1` messages and the server's domain types, and the
//! one mapping from [`Error`] to a gRPC status. Handlers stay thin: they call these
//! and the engine, nothing else.

pub mod rerank;
pub mod search;

use embedwire_proto::v1::{
    EmbedRequest, EmbedResponse, EmbeddingDtype, InfoResponse, Limits, RecallProbe, StoreInfo, StoreNode,
    TokenizedInput, Usage,
};

use crate::index::recall::Probe;
use crate::store::{HnswSearch, StoreDescription, StoreHealth};
use embedwire_proto::{transport, vectors};

use crate::backend::RawEmbeddings;
use crate::engine::{EmbedOptions, Embeddings, RequestLimits};
use crate::error::{Error, Result};
use crate::lanes::Admission;
use crate::model::{ModelInfo, Pooling, Precision, TokenizedText};

/// Every dtype Embed can return, for Info.
const SUPPORTED_DTYPES: [EmbeddingDtype; 5] = [
    EmbeddingDtype::Float32,
    EmbeddingDtype::Float16,
    EmbeddingDtype::Int8,
    EmbeddingDtype::Ubinary,
    EmbeddingDtype::Float32List,
];

impl From<Error> for tonic::Status {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            Error::InvalidArgument(_) => tonic::Status::invalid_argument(message),
            Error::ResourceExhausted(_) => tonic::Status::resource_exhausted(message),
            Error::Overloaded { retry_after, .. } => overloaded_status(message, retry_after),
            Error::OutOfRange(_) => tonic::Status::out_of_range(message),
            Error::Unavailable(_) => {
                // Answered by this server (it is up): see the constant.
                let mut status = tonic::Status::unavailable(message);
                transport::set_unavailable_cause(&mut status, "server");
                status
            }
            Error::Cancelled => tonic::Status::cancelled(message),
            Error::NotFound(_) => tonic::Status::not_found(message),
            Error::AlreadyExists(_) => tonic::Status::already_exists(message),
            Error::FailedPrecondition(_) => tonic::Status::failed_precondition(message),
            Error::Model(_) | Error::Config(_) | Error::Storage(_) | Error::Upstream(_) => {
                tonic::Status::internal(message)
            }
        }
    }
}

/// An upstream's error status as our error, keeping its meaning for the caller.
pub fn error_from_upstream(status: tonic::Status) -> Error {
    let message = status.message().to_string();
    match status.code() {
        tonic::Code::InvalidArgument => Error::InvalidArgument(message),
        tonic::Code::ResourceExhausted => match transport::retry_pushback(&status) {
            Some(retry_after) => Error::Overloaded { reason: message, retry_after },
            None => Error::ResourceExhausted(message),
        },
        tonic::Code::OutOfRange => Error::OutOfRange(message),
        tonic::Code::Unavailable => Error::Unavailable(message),
        tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => Error::Cancelled,
        _ => Error::Upstream(format!("{:?}: {message}", status.code())),
    }
}

/// RESOURCE_EXHAUSTED with the retry hint (`grpc-retry-pushback-ms`).
fn overloaded_status(message: String, retry_after: std::time::Duration) -> tonic::Status {
    let mut status = tonic::Status::resource_exhausted(message);
    transport::set_retry_pushback(&mut status, retry_after);
    status
}

/// tonic reports a request over the decoding limit as OUT_OF_RANGE; gRPC's own
/// implementations, and this server's contract, say RESOURCE_EXHAUSTED.
pub fn oversized_message_status(status: tonic::Status) -> tonic::Status {
    if is_oversized_message(status.code(), status.message()) {
        tonic::Status::resource_exhausted(format!("request too large: {}", status.message()))
    } else {
        status
    }
}

/// Whether a status is tonic's "decoded message length too large".
pub fn is_oversized_message(code: tonic::Code, message: &str) -> bool {
    code == tonic::Code::OutOfRange && message.contains("message length too large")
}

/// The request's dtype, or INVALID_ARGUMENT for a value the proto does not define.
pub fn dtype_of(request: &EmbedRequest) -> Result<EmbeddingDtype> {
    EmbeddingDtype::try_from(request.dtype)
        .map(vectors::effective_dtype)
        .map_err(|_| Error::invalid("dtype", format!("unknown value {}", request.dtype)))
}

/// The request's options with the documented defaults filled in.
pub fn embed_options(request: &EmbedRequest) -> EmbedOptions {
    EmbedOptions {
        normalize: request.normalize.unwrap_or(true),
        truncate: request.truncate.unwrap_or(true),
        dimensions: request.dimensions.map(|d| d as usize),
        ..EmbedOptions::default()
    }
}

/// Encodes finished vectors as `dtype`.
pub fn embed_response(embeddings: Embeddings, dtype: EmbeddingDtype) -> EmbedResponse {
    let count = embeddings.token_counts.len();
    let prompt_tokens: u32 = embeddings.token_counts.iter().sum();
    let (bytes, encoded) = if vectors::effective_dtype(dtype) == EmbeddingDtype::Float32 {
        // FLOAT32 is the values' own memory: handing the vector over saves a 4-byte-
        // per-value allocation and copy on every answer (and, with the transport's
        // own buffer, kept the allocator from returning pages it faulted in again).
        (vectors::f32_rows_into_bytes(embeddings.values), vectors::EncodedRows::default())
    } else {
        let mut encoded = vectors::encode_rows(&embeddings.values, embeddings.dim, dtype);
        (std::mem::take(&mut encoded.bytes).into(), encoded)
    };
    EmbedResponse {
        dim: embeddings.dim as u32,
        count: count as u32,
        dtype: dtype as i32,
        embeddings: bytes,
        row_scales: encoded.row_scales,
        values: encoded.values,
        usage: Some(Usage { prompt_tokens, total_tokens: prompt_tokens }),
        token_counts: embeddings.token_counts,
        model: embeddings.model_id,
    }
}

/// An upstream's FLOAT32 response as raw vectors, checked against what was asked.
pub fn raw_embeddings_from_wire(response: EmbedResponse, count: usize, dim: usize) -> Result<RawEmbeddings> {
    let values = vectors::decode_rows(&response.embeddings, &[], &[], count, dim, EmbeddingDtype::Float32)
        .map_err(|e| Error::Upstream(e.to_string()))?;
    Ok(RawEmbeddings { values, token_counts: response.token_counts, timing: Default::default() })
}

/// One tokenization on the wire.
pub fn tokenized_to_wire(tokenized: TokenizedText) -> TokenizedInput {
    TokenizedInput {
        count: tokenized.ids.len() as u32,
        ids: tokenized.ids,
        truncated: tokenized.truncated,
        untruncated_count: tokenized.untruncated_count as u32,
    }
}

/// One tokenization from an upstream.
pub fn tokenized_from_wire(input: TokenizedInput) -> TokenizedText {
    TokenizedText { ids: input.ids, truncated: input.truncated, untruncated_count: input.untruncated_count as usize }
}

/// The Info answer.
pub fn info_response(
    info: &ModelInfo,
    backend: &str,
    limits: RequestLimits,
    batch: (usize, usize),
    max_request_bytes: usize,
) -> InfoResponse {
    InfoResponse {
        model: info.model_id.clone(),
        dim: info.dim as u32,
        max_input_tokens: info.max_input_tokens as u32,
        pooling: info.pooling.name().to_string(),
        backend: backend.to_string(),
        dtypes: SUPPORTED_DTYPES.iter().map(|d| *d as i32).collect(),
        limits: Some(Limits {
            max_inputs_per_request: saturate(limits.max_inputs_per_request),
            max_request_bytes: saturate(max_request_bytes),
            max_in_flight_inputs: saturate(limits.max_in_flight_inputs),
            max_batch_size: saturate(batch.0),
            max_batch_tokens: saturate(batch.1),
            max_input_chars: saturate(limits.max_input_chars),
            // Set with the rerank engine, once loaded.
            max_rerank_texts: 0,
            // Set by `set_admission` where the server admits calls itself.
            ..Default::default()
        }),
        version: env!("CARGO_PKG_VERSION").to_string(),
        store: None,
        precision: info.precision.name().to_string(),
        rerank_scorer: String::new(),
    }
}

/// The admission rule in Info's limits.
pub fn set_admission(limits: &mut Limits, admission: Admission) {
    match admission {
        Admission::Off => {}
        Admission::Calls(calls) => limits.max_interactive_calls = saturate(calls),
        Admission::QueueTime(bound) => limits.max_queue_ms = u32::try_from(bound.as_millis()).unwrap_or(u32::MAX),
    }
    limits.admission = admission.describe();
}

/// The store part of Info.
pub fn store_info(description: &StoreDescription, health: &StoreHealth, hnsw: Option<HnswSearch>) -> StoreInfo {
    StoreInfo {
        kind: description.kind.to_string(),
        shared: description.shared,
        index_id: description.index_id.clone(),
        healthy: health.healthy,
        nodes: health
            .nodes
            .iter()
            .map(|node| StoreNode { name: node.name.clone(), address: node.address.clone(), healthy: node.healthy })
            .collect(),
        hnsw: hnsw.map(hnsw_search_to_wire),
    }
}

/// How an HNSW index searches, on the wire (0 for what is not known or not set).
pub fn hnsw_search_to_wire(hnsw: HnswSearch) -> embedwire_proto::v1::HnswSearch {
    embedwire_proto::v1::HnswSearch {
        ef_search: u32::try_from(hnsw.ef_search).unwrap_or(u32::MAX),
        target_recall: hnsw.target_recall.unwrap_or_default(),
        estimated_recall: hnsw.estimated_recall.unwrap_or_default(),
        measured_at_vectors: hnsw.measured_at_vectors,
        probe: match hnsw.probe {
            None => RecallProbe::Unspecified,
            Some(Probe::StoredVectors) => RecallProbe::StoredVectors,
            Some(Probe::RecentQueries) => RecallProbe::RecentQueries,
        } as i32,
    }
}

/// An upstream's Info as the model it serves.
pub fn model_info_from_wire(info: InfoResponse) -> Result<ModelInfo> {
    let pooling = match info.pooling.as_str() {
        "cls" => Pooling::Cls,
        "mean" => Pooling::Mean,
        other => return Err(Error::Upstream(format!("unknown pooling {other:?}"))),
    };
    Ok(ModelInfo {
        model_id: info.model,
        dim: info.dim as usize,
        max_input_tokens: info.max_input_tokens as usize,
        pooling,
        // An upstream older than the precision field runs fp32.
        precision: if info.precision == "int8" { Precision::Int8 } else { Precision::Fp32 },
    })
}

fn saturate(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Response metadata naming the precision the model ran at
/// (`x-embedwire-precision: fp32|int8`), so no caller mistakes int8 vectors for the
/// reference ones.
pub fn add_precision_metadata(metadata: &mut tonic::metadata::MetadataMap, precision: Precision) {
    metadata.insert(PRECISION_METADATA, tonic::metadata::MetadataValue::from_static(precision.name()));
}

/// The response metadata key of [`add_precision_metadata`].
pub const PRECISION_METADATA: &str = "x-embedwire-precision";

/// Response metadata saying where an Embed call's time went, in milliseconds (as TEI's
/// `x-queue-time` / `x-inference-time` headers do): `x-embedwire-queue-ms` (waiting
/// for the first batch), `x-embedwire-inference-ms` (model time of its batches) and
/// `x-embedwire-total-ms` (the whole call inside the server).
pub fn add_timing_metadata(
    metadata: &mut tonic::metadata::MetadataMap,
    timing: crate::batcher::BatchTiming,
    total: std::time::Duration,
) {
    let entries = [
        ("x-embedwire-queue-ms", timing.queue),
        ("x-embedwire-inference-ms", timing.inference),
        ("x-embedwire-total-ms", total),
    ];
    for (name, duration) in entries {
        if let Ok(value) = format!("{:.3}", duration.as_secs_f64() * 1e3).parse() {
            metadata.insert(name, value);
        }
    }
}
