//! What the HTTP layer says about itself: `GET /openapi.json` (generated from the
//! route definitions; a copy is kept in the repo, checked fresh by a test),
//! `GET /metrics` (Prometheus text) and `GET /` (the search page).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};
use utoipa::OpenApi;

use crate::routes::{collections, embed, health, openai, rerank, v1};
use crate::state::AppState;
use crate::upstream::Upstream;

/// The OpenAPI description of every HTTP route.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "embedwire HTTP API",
        description = "HTTP/JSON layer of embedwire: the /v1 routes of existing embedding gateways, OpenAI-compatible embeddings, reranking in the shapes of text-embeddings-inference (/rerank), Cohere v1 and Jina (/v1/rerank) and Cohere v2 (/v2/rerank), health, readiness and metrics. The same port also serves gRPC and gRPC-web."
    ),
    paths(
        v1::ingest,
        v1::get_job,
        v1::search,
        v1::get_document,
        collections::create,
        collections::list,
        collections::describe,
        collections::delete,
        collections::ingest,
        collections::get_job,
        collections::search,
        collections::get_document,
        embed::embed,
        openai::embeddings,
        rerank::tei,
        rerank::cohere_v1,
        rerank::cohere_v2,
        health::healthz,
        health::readyz,
        metrics_text
    ),
    components(schemas(crate::error::ErrorDetail))
)]
pub struct ApiDoc;

/// The OpenAPI document as pretty JSON (what `gateway-http/openapi.json` holds).
pub fn openapi_json() -> String {
    ApiDoc::openapi().to_pretty_json().expect("the OpenAPI document serializes") + "\n"
}

/// `GET /openapi.json`.
pub async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], openapi_json()).into_response()
}

/// Prometheus metrics: the HTTP layer's and the upstream's, as OpenMetrics when the
/// Accept header asks for it (Prometheus does), else as the classic text format.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text exposition format", content((String = "text/plain"), (String = "application/openmetrics-text")))))]
pub async fn metrics_text<U: Upstream>(State(state): State<AppState<U>>, headers: HeaderMap) -> Response {
    let mut text = state.metrics.render();
    text.push_str(&state.upstream.metrics_text());
    // prometheus-client encodes OpenMetrics, where `# TYPE x counter` describes the
    // sample `x_total`: only a scraper that parses OpenMetrics reads those as counters.
    let wants_openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    let content_type = if wants_openmetrics {
        text.push_str("# EOF\n");
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    };
    ([(header::CONTENT_TYPE, HeaderValue::from_static(content_type))], text).into_response()
}

/// `GET /`: a page where a person searches the index (plain HTML and JS, no build step).
pub async fn search_page() -> Html<&'static str> {
    Html(include_str!("../page/search.html"))
}
