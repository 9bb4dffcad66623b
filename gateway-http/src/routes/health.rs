//! `GET /healthz` (the contract's shape: always 200 while the process answers, with
//! whether the model is loaded) and `GET /readyz` (503 until the services can take
//! work, for load balancers and orchestrators).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::state::AppState;
use crate::upstream::Upstream;

/// `GET /healthz` answer.
#[derive(Serialize, ToSchema)]
pub struct HealthReply {
    /// `ok` while the process answers.
    pub status: &'static str,
    pub model_loaded: bool,
    /// Documents in the index.
    pub document_count: u64,
}

/// `GET /readyz` answer.
#[derive(Serialize, ToSchema)]
pub struct ReadyReply {
    pub ready: bool,
    /// Why not, when not ready.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// Liveness, with the model state and document count.
#[utoipa::path(get, path = "/healthz", responses((status = 200, body = HealthReply)))]
pub async fn healthz<U: Upstream>(State(state): State<AppState<U>>) -> Json<HealthReply> {
    let readiness = state.upstream.readiness().await;
    let document_count = match readiness.ready {
        true => state.upstream.index_stats().await.map(|stats| stats.document_count).unwrap_or(0),
        false => 0,
    };
    Json(HealthReply { status: "ok", model_loaded: readiness.ready, document_count })
}

/// Readiness: 200 once the model and index are loaded, 503 before.
#[utoipa::path(get, path = "/readyz", responses((status = 200, body = ReadyReply), (status = 503, body = ReadyReply)))]
pub async fn readyz<U: Upstream>(State(state): State<AppState<U>>) -> Response {
    let readiness = state.upstream.readiness().await;
    let status = if readiness.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(ReadyReply { ready: readiness.ready, detail: readiness.detail })).into_response()
}
