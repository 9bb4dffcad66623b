//! The HTTP routes and the router that holds them.

pub mod collections;
pub mod docs;
pub mod embed;
pub mod health;
pub mod openai;
pub mod rerank;
pub mod v1;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::error::ApiError;
use crate::metrics::{HttpMetrics, track};
use crate::state::{AppState, GatewaySettings};
use crate::upstream::Upstream;

/// Every HTTP route over `upstream`. Requests matching no route get a JSON 404, or
/// gRPC's UNIMPLEMENTED when they carry a gRPC content type: on the server's port this
/// router sits beside the gRPC services, and an unknown gRPC method must still look
/// like gRPC to the caller.
pub fn router<U: Upstream>(upstream: Arc<U>, settings: GatewaySettings) -> Router {
    router_with_metrics(upstream, settings, Arc::new(HttpMetrics::default()))
}

/// [`router`], recording into `metrics` (shared with the gRPC side of the port).
pub fn router_with_metrics<U: Upstream>(
    upstream: Arc<U>,
    settings: GatewaySettings,
    metrics: Arc<HttpMetrics>,
) -> Router {
    let state = AppState { upstream, metrics: metrics.clone(), settings: Arc::new(settings.clone()) };
    let mut router = Router::new()
        .route("/v1/ingest", post(v1::ingest::<U>))
        .route("/v1/jobs/{job_id}", get(v1::get_job::<U>))
        .route("/v1/search", post(v1::search::<U>))
        .route("/v1/documents/{id}", get(v1::get_document::<U>))
        .route("/v1/collections", post(collections::create::<U>).get(collections::list::<U>))
        .route("/v1/collections/{name}", get(collections::describe::<U>).delete(collections::delete::<U>))
        .route("/v1/collections/{name}/ingest", post(collections::ingest::<U>))
        .route("/v1/collections/{name}/jobs/{job_id}", get(collections::get_job::<U>))
        .route("/v1/collections/{name}/search", post(collections::search::<U>))
        .route("/v1/collections/{name}/documents/{id}", get(collections::get_document::<U>))
        .route("/v1/embeddings", post(openai::embeddings::<U>))
        .route("/embed", post(embed::embed::<U>))
        .route("/rerank", post(rerank::tei::<U>))
        .route("/v1/rerank", post(rerank::cohere_v1::<U>))
        .route("/v2/rerank", post(rerank::cohere_v2::<U>))
        .route("/healthz", get(health::healthz::<U>))
        .route("/readyz", get(health::readyz::<U>))
        .route("/openapi.json", get(docs::openapi))
        .route("/", get(docs::search_page));
    if settings.serve_metrics {
        router = router.route("/metrics", get(docs::metrics_text::<U>));
    }
    router
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(settings.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(metrics, track))
        .with_state(state)
}

async fn not_found(request: Request) -> Response {
    let is_grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if is_grpc {
        let path = request.uri().path().to_string();
        return tonic::Status::unimplemented(format!("no such method: {path}"))
            .into_http::<axum::body::Body>()
            .into_response();
    }
    ApiError::not_found(format!("no route for {} {}", request.method(), request.uri().path())).into_response()
}
