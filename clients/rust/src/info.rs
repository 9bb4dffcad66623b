//! What a server serves ([`Client::info`], [`Client::index_stats`]) and whether each
//! server is up ([`Client::health`], over the standard gRPC health service).

use embedwire_proto::v1 as pb;
use futures::future::join_all;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;

pub use embedwire_proto::v1::Limits;

use crate::Client;
use crate::error::{Error, Result, display_address};
use crate::policy::Hedge;
use crate::pool::Route;

/// The model and the limits of a server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    /// Model id, e.g. sentence-transformers/all-MiniLM-L6-v2.
    pub model: String,
    /// Dimensions of its vectors.
    pub dim: u32,
    /// Longest input the model sees, in tokens.
    pub max_input_tokens: u32,
    /// "mean" or "cls".
    pub pooling: String,
    /// "onnx", "pseudo" or "remote".
    pub backend: String,
    /// Encodings Embed can return, e.g. FLOAT32, INT8.
    pub dtypes: Vec<String>,
    /// Request limits.
    pub limits: Limits,
    /// Server version.
    pub version: String,
    /// What Rerank scores with: `cross-encoder:<model>` or `bi-encoder:<model>`.
    pub rerank_scorer: String,
}

/// Counts of a server's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexStats {
    pub document_count: u64,
    pub chunk_count: u64,
    /// Stored vectors (identical chunks share one).
    pub unique_vector_count: u64,
    /// Stored but not indexed yet.
    pub pending_documents: u64,
    /// "exact" or "hnsw".
    pub index_kind: String,
    /// Whether the counts are exact now. A shared store that cannot count exactly
    /// (one of its nodes is missing) reports its last exact counts instead.
    pub counts_exact: bool,
    /// How long ago the counts were exact, when they are the last exact ones.
    pub counts_age: Option<std::time::Duration>,
    /// Why the counts are not exact now (None when they are).
    pub counts_detail: Option<String>,
}

/// A server's answer to a health check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthStatus {
    /// Ready: the model is loaded.
    Serving,
    /// Up, but not ready (loading, or shutting down).
    NotServing,
    /// Any other status.
    Unknown,
}

impl HealthStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Serving => "SERVING",
            HealthStatus::NotServing => "NOT_SERVING",
            HealthStatus::Unknown => "UNKNOWN",
        }
    }
}

/// The health of one server.
#[derive(Debug)]
pub struct ServerHealth {
    /// As given, without `http://`.
    pub address: String,
    /// Its answer, or why there was none.
    pub status: Result<HealthStatus>,
}

impl Client {
    /// The served model and the server's limits (from any server).
    pub async fn info(&self) -> Result<ServerInfo> {
        let caller = &self.inner.caller;
        let info = caller
            .unary(Route::Balanced, Hedge::Allowed, |backend| {
                let request = caller.request(pb::InfoRequest {});
                async move { Ok(backend.embed().info(request).await?.into_inner()) }
            })
            .await?;
        let dtypes = info
            .dtypes
            .iter()
            .filter_map(|dtype| pb::EmbeddingDtype::try_from(*dtype).ok())
            .map(|dtype| dtype.as_str_name().trim_start_matches("EMBEDDING_DTYPE_").to_string())
            .collect();
        Ok(ServerInfo {
            model: info.model,
            dim: info.dim,
            max_input_tokens: info.max_input_tokens,
            pooling: info.pooling,
            backend: info.backend,
            dtypes,
            limits: info.limits.unwrap_or_default(),
            version: info.version,
            rerank_scorer: info.rerank_scorer,
        })
    }

    /// The counts of the (primary) server's index: of this client's collection.
    pub async fn index_stats(&self) -> Result<IndexStats> {
        let caller = &self.inner.caller;
        let collection = self.collection.to_string();
        let stats = caller
            .unary(Route::Primary, Hedge::Allowed, |backend| {
                let request = caller.request(pb::GetIndexStatsRequest { collection: collection.clone() });
                async move { Ok(backend.search().get_index_stats(request).await?.into_inner()) }
            })
            .await?;
        Ok(IndexStats {
            document_count: stats.document_count,
            chunk_count: stats.chunk_count,
            unique_vector_count: stats.unique_vector_count,
            pending_documents: stats.pending_documents,
            counts_exact: matches!(stats.counts_accuracy(), pb::CountAccuracy::Exact | pb::CountAccuracy::Unspecified),
            counts_age: (stats.counts_accuracy() == pb::CountAccuracy::LastExact)
                .then(|| std::time::Duration::from_millis(stats.counts_age_ms)),
            counts_detail: (!stats.counts_detail.is_empty()).then(|| stats.counts_detail.clone()),
            index_kind: stats.index_kind,
        })
    }

    /// Asks every server, at once and without retries, whether it is serving.
    pub async fn health(&self) -> Vec<ServerHealth> {
        let caller = &self.inner.caller;
        let checks = caller.pool.backends().iter().map(|backend| async move {
            let request = caller.request(HealthCheckRequest { service: String::new() });
            let status = match backend.health().check(request).await {
                Ok(response) => Ok(match ServingStatus::try_from(response.into_inner().status) {
                    Ok(ServingStatus::Serving) => HealthStatus::Serving,
                    Ok(ServingStatus::NotServing) => HealthStatus::NotServing,
                    _ => HealthStatus::Unknown,
                }),
                Err(status) => Err(Error::from_status(status, &backend.address, caller.timeout)),
            };
            ServerHealth { address: display_address(&backend.address), status }
        });
        join_all(checks).await
    }
}
