//! Prometheus metrics of the HTTP layer: requests by route, method and status, and a
//! latency histogram by route. The in-process server registers a collector of its own
//! metrics (batcher, model, rerank, index) in the same registry, so `/metrics` is one
//! encoding; a gateway's upstream appends its routing gauges to the page.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::collector::Collector;
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

/// The HTTP layer's counters, and those of gRPC calls on the same port.
pub struct HttpMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    rpcs: Family<RpcLabels, Counter>,
    rpc_latency: Family<MethodLabels, Histogram>,
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
        let rpcs = Family::<RpcLabels, Counter>::default();
        let rpc_latency =
            Family::<MethodLabels, Histogram>::new_with_constructor(|| Histogram::new(LATENCY_BUCKETS.iter().copied()));
        registry.register("embedwire_grpc_requests", "gRPC calls by method and status code", rpcs.clone());
        registry.register(
            "embedwire_grpc_request_duration_seconds",
            "gRPC call latency by method (to the end of the response), in seconds",
            rpc_latency.clone(),
        );
        HttpMetrics { registry, requests, latency, rpcs, rpc_latency }
    }
}

impl HttpMetrics {
    /// Adds `collector`'s metrics to the page, encoded after the HTTP layer's.
    pub fn register_collector(&mut self, collector: Box<dyn Collector>) {
        self.registry.register_collector(collector);
    }

    /// Counts one answered request.
    pub fn observe(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let labels = RequestLabels { route: route.to_string(), method: method.to_string(), status };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&RouteLabels { route: route.to_string() }).observe(seconds);
    }

    /// Counts one finished gRPC call.
    pub fn observe_rpc(&self, method: &str, code: tonic::Code, seconds: f64) {
        let code = format!("{code:?}");
        self.rpcs.get_or_create(&RpcLabels { method: method.to_string(), code }).inc();
        self.rpc_latency.get_or_create(&MethodLabels { method: method.to_string() }).observe(seconds);
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

/// A tower layer that counts gRPC (and gRPC-web) calls by method and status code and
/// times them to the end of their response (the status of a successful call travels
/// in the trailers, after the last message).
#[derive(Clone)]
pub struct GrpcMetricsLayer {
    metrics: std::sync::Arc<HttpMetrics>,
}

impl GrpcMetricsLayer {
    pub fn new(metrics: std::sync::Arc<HttpMetrics>) -> Self {
        GrpcMetricsLayer { metrics }
    }
}

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics { inner, metrics: self.metrics.clone() }
    }
}

/// The service [`GrpcMetricsLayer`] builds.
#[derive(Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
    metrics: std::sync::Arc<HttpMetrics>,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = http::Response<axum::body::Body>;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        use futures::FutureExt;
        let is_grpc = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"));
        let observation = is_grpc.then(|| Observation {
            metrics: self.metrics.clone(),
            method: request.uri().path().to_string(),
            started: Instant::now(),
        });
        self.inner
            .call(request)
            .map(move |result| {
                result.map(|response| match observation {
                    None => response.map(axum::body::Body::new),
                    Some(observation) => {
                        // A trailers-only answer (most errors) has its status in the headers.
                        let code = grpc_code(response.headers());
                        let (parts, body) = response.into_parts();
                        let body = ObservedBody { inner: Box::pin(body), observation: Some(observation), code };
                        http::Response::from_parts(parts, axum::body::Body::new(body))
                    }
                })
            })
            .boxed()
    }
}

struct Observation {
    metrics: std::sync::Arc<HttpMetrics>,
    method: String,
    started: Instant,
}

fn grpc_code(headers: &http::HeaderMap) -> Option<tonic::Code> {
    headers.get("grpc-status").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<i32>().ok()).map(tonic::Code::from)
}

/// A response body that records its call when the trailers pass (or when it is
/// dropped early: the client went away, counted as CANCELLED).
struct ObservedBody<B> {
    inner: std::pin::Pin<Box<B>>,
    observation: Option<Observation>,
    code: Option<tonic::Code>,
}

impl<B> ObservedBody<B> {
    fn record(&mut self, code: tonic::Code) {
        if let Some(observation) = self.observation.take() {
            observation.metrics.observe_rpc(&observation.method, code, observation.started.elapsed().as_secs_f64());
        }
    }
}

impl<B> Drop for ObservedBody<B> {
    fn drop(&mut self) {
        let code = self.code.unwrap_or(tonic::Code::Cancelled);
        self.record(code);
    }
}

impl<B> http_body::Body for ObservedBody<B>
where
    B: http_body::Body<Data = bytes::Bytes>,
{
    type Data = bytes::Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = self.inner.as_mut().poll_frame(cx);
        match &polled {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref()
                    && let Some(code) = grpc_code(trailers)
                {
                    self.code = Some(code);
                    self.record(code);
                }
            }
            std::task::Poll::Ready(None) => {
                let code = self.code.unwrap_or(tonic::Code::Ok);
                self.record(code);
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
