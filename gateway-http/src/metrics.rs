//! Prometheus metrics of the HTTP layer: requests by route, method and status, and a
//! latency histogram by route. The upstream adds its own (the server's batcher and
//! model counters) to the same `/metrics` page.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

/// Latency buckets in seconds, from half a millisecond to ten seconds.
const LATENCY_BUCKETS: [f64; 14] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];

/// The HTTP layer's counters.
pub struct HttpMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency =
            Family::<RouteLabels, Histogram>::new_with_constructor(|| Histogram::new(LATENCY_BUCKETS.iter().copied()));
        registry.register("embedwire_http_requests", "HTTP requests by route, method and status", requests.clone());
        registry.register(
            "embedwire_http_request_duration_seconds",
            "HTTP request latency by route, in seconds",
            latency.clone(),
        );
        HttpMetrics { registry, requests, latency }
    }
}

impl HttpMetrics {
    /// Counts one answered request.
    pub fn observe(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let labels = RequestLabels { route: route.to_string(), method: method.to_string(), status };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&RouteLabels { route: route.to_string() }).observe(seconds);
    }

    /// The Prometheus text exposition (without OpenMetrics' `# EOF`, so that the
    /// upstream's lines can follow).
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text.trim_end().trim_end_matches("# EOF").to_string()
    }
}

/// Middleware that times and counts every request under its route pattern (so
/// `/v1/jobs/{job_id}` is one series, not one per job).
pub async fn track(State(metrics): State<std::sync::Arc<HttpMetrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_string();
    let method = request.method().to_string();
    let response = next.run(request).await;
    metrics.observe(&route, &method, response.status().as_u16(), started.elapsed().as_secs_f64());
    response
}
