//! `GET /healthz` (the contract's shape: always 200 while the process answers, with
//! whether the model is loaded) and `GET /readyz` (503 until the services can take
//! work, for load balancers and orchestrators).
//!
//! Both also say which index answers: `/healthz` adds the `store` of the index that
//! answers (and, in the standalone gateway, every upstream with its index), and turns
//! `status` to `degraded` when the index that held the documents cannot be reached
//! (a failover to another server's own index), when the index answering lacks
//! documents another upstream's index holds (after a failback: the `detail` gives
//! every upstream's document count), or the store is unhealthy everywhere; `/readyz`
//! then answers 503 with the reason. A store missing one of its nodes is `degraded`
//! on `/healthz` too (naming the node), but `/readyz` stays 200: it still serves.
//!
//! `document_count` is never a partial count: exact now, or the last exact count
//! with its age (`document_count_exact: false`), or `null` when none is known.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::state::AppState;
use crate::upstream::{StoreStatus, Upstream, UpstreamStatus};

/// `GET /healthz` answer.
#[derive(Serialize, ToSchema)]
pub struct HealthReply {
    /// `ok` while the process answers with every store node there; `degraded` when
    /// answers may lack documents or the store misses a node (see `detail`).
    pub status: &'static str,
    pub model_loaded: bool,
    /// Documents in the index that answers: exact now, or the last exact count (see
    /// `document_count_exact`); `null` when no exact count is known (never a
    /// partial count).
    pub document_count: Option<u64>,
    /// Extension: whether `document_count` is exact now.
    pub document_count_exact: bool,
    /// Extension: seconds since `document_count` was exact, when it is not now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_count_age_secs: Option<f64>,
    /// Extension: why `document_count` is not exact now (a store node missing, the
    /// store's nodes counting differently, a failed count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_count_detail: Option<String>,
    /// Extension: why the status is `degraded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Extension: the store of the index that answers.
    pub store: StoreStatus,
    /// Extension (standalone gateway): every upstream and its index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstreams: Option<Vec<UpstreamStatus>>,
}

/// `GET /readyz` answer.
#[derive(Serialize, ToSchema)]
pub struct ReadyReply {
    pub ready: bool,
    /// Why not, when not ready.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Set when not ready because the index that held the data is unreachable (or the
    /// store is unhealthy), though the model is loaded.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
}

/// Liveness, with the model state, the document count and the index that answers.
#[utoipa::path(get, path = "/healthz", responses((status = 200, body = HealthReply)))]
pub async fn healthz<U: Upstream>(State(state): State<AppState<U>>) -> Json<HealthReply> {
    let health = state.upstream.health().await;
    let problems: Vec<String> = [health.degraded, health.store_nodes_missing].into_iter().flatten().collect();
    let count = health.document_count;
    Json(HealthReply {
        status: if problems.is_empty() { "ok" } else { "degraded" },
        model_loaded: health.readiness.ready,
        document_count: count.value,
        document_count_exact: count.exact,
        document_count_age_secs: count.age.map(|age| age.as_secs_f64()),
        document_count_detail: count.detail,
        detail: (!problems.is_empty()).then(|| problems.join("; ")),
        store: health.store,
        upstreams: health.upstreams,
    })
}

/// Readiness: 200 once the model and index are loaded, 503 before, and 503 while the
/// index that held the data is unreachable.
#[utoipa::path(get, path = "/readyz", responses((status = 200, body = ReadyReply), (status = 503, body = ReadyReply)))]
pub async fn readyz<U: Upstream>(State(state): State<AppState<U>>) -> Response {
    let health = state.upstream.health().await;
    let reply = match (health.readiness.ready, health.degraded) {
        (true, None) => ReadyReply { ready: true, detail: health.readiness.detail, degraded: false },
        (true, Some(reason)) => ReadyReply { ready: false, detail: format!("degraded: {reason}"), degraded: true },
        (false, _) => ReadyReply { ready: false, detail: health.readiness.detail, degraded: false },
    };
    let status = if reply.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(reply)).into_response()
}
