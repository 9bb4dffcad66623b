//! API keys and per-key rate limits, as one tower layer in front of everything a port
//! serves (gRPC, gRPC-web and HTTP/JSON alike), so no route can forget to check.
//!
//! Keys travel as `authorization: Bearer KEY` (gRPC metadata or HTTP header). Only
//! BLAKE3 hashes of the keys are kept, and a presented key is compared with every one
//! of them in constant time (`blake3::Hash`'s equality), so neither timing nor a
//! memory dump gives a key away. Health and readiness stay open for probes; the
//! metrics page is open or keyed by a setting. Read-only keys can embed and search but
//! not ingest or delete.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::IntoResponse;
use futures::FutureExt;
use futures::future::BoxFuture;
use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::{HeaderValue, Request, Response, header};
use tonic::Code;
use tower::{Layer, Service};

use crate::error::ApiError;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Embed, search, read jobs and documents.
    ReadOnly,
    /// Everything, ingest and delete included.
    ReadWrite,
}

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    Open,
    AnyKey,
    ReadWriteKey,
}

/// The configured keys.
#[derive(Default)]
pub struct ApiKeys {
    keys: Vec<(blake3::Hash, Role)>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.keys.len())
    }
}

impl ApiKeys {
    /// Keys from flags and from a file with one key per line (`KEY` or
    /// `KEY read-only`; blank lines and `#` comments skipped).
    pub fn load(read_write: &[String], read_only: &[String], file: Option<&Path>) -> Result<Self, String> {
        let mut keys = ApiKeys::default();
        for key in read_write {
            keys.add(key, Role::ReadWrite)?;
        }
        for key in read_only {
            keys.add(key, Role::ReadOnly)?;
        }
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--api-keys-file {}: {e}", path.display()))?;
            for (number, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let mut words = line.split_whitespace();
                let key = words.next().unwrap_or_default();
                let role = match words.next() {
                    None | Some("read-write") => Role::ReadWrite,
                    Some("read-only") => Role::ReadOnly,
                    Some(other) => {
                        return Err(format!(
                            "--api-keys-file {} line {}: role {other:?} is not read-only or read-write",
                            path.display(),
                            number + 1
                        ));
                    }
                };
                keys.add(key, role)?;
            }
        }
        Ok(keys)
    }

    fn add(&mut self, key: &str, role: Role) -> Result<(), String> {
        let key = key.trim();
        if key.len() < 16 {
            return Err("API keys must have at least 16 characters".into());
        }
        if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("API keys cannot contain spaces or control characters".into());
        }
        self.keys.push((blake3::hash(key.as_bytes()), role));
        Ok(())
    }

    /// No keys: authentication is off.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The index and role of `presented`, comparing against every key.
    pub fn find(&self, presented: &str) -> Option<(usize, Role)> {
        let hash = blake3::hash(presented.as_bytes());
        let mut found = None;
        for (index, (key, role)) in self.keys.iter().enumerate() {
            // No early exit: the time taken does not depend on which key matched.
            if *key == hash {
                found = Some((index, *role));
            }
        }
        found
    }
}

/// Requests per second and burst allowed per key, as governor's quota.
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    quota: Quota,
}

impl RateLimit {
    /// `per_second` requests a second (fractions too: 0.01 is one per 100 s) after a
    /// first `burst` at once. Governor counts whole requests, so a fractional burst is
    /// rounded down; a rate faster than one request per nanosecond is refused.
    pub fn new(per_second: f64, burst: f64) -> Result<Self, String> {
        let one_per_period = Duration::try_from_secs_f64(1.0 / per_second)
            .ok()
            .and_then(Quota::with_period)
            .ok_or_else(|| format!("a rate limit of {per_second} requests per second cannot be kept"))?;
        // `as` saturates: a burst past u32::MAX is u32::MAX.
        let burst = NonZeroU32::new(burst.floor() as u32).ok_or("a rate limit's burst must be at least 1")?;
        Ok(RateLimit { quota: one_per_period.allow_burst(burst) })
    }
}

/// The access rules of one port.
#[derive(Debug)]
pub struct AccessPolicy {
    pub keys: ApiKeys,
    /// `/metrics` without a key.
    pub metrics_open: bool,
    /// Per-key request rate; `None`: unlimited.
    pub rate_limit: Option<RateLimit>,
}

impl AccessPolicy {
    /// What `path` needs.
    pub fn requirement(&self, method: &http::Method, path: &str) -> Requirement {
        if self.keys.is_empty() {
            return Requirement::Open;
        }
        match path {
            "/healthz" | "/readyz" | "/" | "/openapi.json" => Requirement::Open,
            "/metrics" if self.metrics_open => Requirement::Open,
            "/v1/ingest" if method == http::Method::POST => Requirement::ReadWriteKey,
            "/embedwire.v1.SearchService/Ingest"
            | "/embedwire.v1.SearchService/IngestStream"
            | "/embedwire.v1.SearchService/DeleteDocuments" => Requirement::ReadWriteKey,
            path if path.starts_with("/grpc.health.v1.Health/") => Requirement::Open,
            _ => Requirement::AnyKey,
        }
    }
}

/// The layer that enforces an [`AccessPolicy`].
#[derive(Clone)]
pub struct AccessLayer {
    policy: Arc<AccessPolicy>,
    /// The policy's rate per key, keyed by the key's index in [`ApiKeys`]: one state
    /// per configured key at most, so the map needs no pruning.
    limiter: Option<Arc<DefaultKeyedRateLimiter<usize>>>,
}

impl AccessLayer {
    pub fn new(policy: AccessPolicy) -> Self {
        let limiter = policy.rate_limit.map(|limit| Arc::new(RateLimiter::keyed(limit.quota)));
        AccessLayer { policy: Arc::new(policy), limiter }
    }
}

impl<S> Layer<S> for AccessLayer {
    type Service = Access<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Access { inner, layer: self.clone() }
    }
}

/// The service [`AccessLayer`] builds.
#[derive(Clone)]
pub struct Access<S> {
    inner: S,
    layer: AccessLayer,
}

/// Why a request was turned away.
enum Refusal {
    Unauthenticated(&'static str),
    PermissionDenied,
    /// Over the key's rate; the bucket has room again after this long.
    RateLimited(Duration),
}

impl AccessLayer {
    fn check<B>(&self, request: &Request<B>) -> Result<(), Refusal> {
        let policy = &self.policy;
        let requirement = policy.requirement(request.method(), request.uri().path());
        if requirement == Requirement::Open {
            return Ok(());
        }
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .ok_or(Refusal::Unauthenticated("no API key: send `authorization: Bearer KEY`"))?
            .to_str()
            .ok()
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, key)| key.trim())
            .ok_or(Refusal::Unauthenticated("the authorization header must be `Bearer KEY`"))?;
        let (index, role) = policy.keys.find(presented).ok_or(Refusal::Unauthenticated("the API key is not valid"))?;
        if requirement == Requirement::ReadWriteKey && role != Role::ReadWrite {
            return Err(Refusal::PermissionDenied);
        }
        if let Some(limiter) = &self.limiter
            && let Err(not_until) = limiter.check_key(&index)
        {
            return Err(Refusal::RateLimited(not_until.wait_time_from(limiter.clock().now())));
        }
        Ok(())
    }
}

/// The refusal in the caller's protocol: a gRPC status for gRPC and gRPC-web, JSON
/// (OpenAI's shape on its route) for the rest.
fn refusal_response<B>(request: &Request<B>, refusal: Refusal) -> Response<axum::body::Body> {
    let (code, message, retry_after) = match refusal {
        Refusal::Unauthenticated(message) => (Code::Unauthenticated, message.to_string(), None),
        Refusal::PermissionDenied => {
            (Code::PermissionDenied, "this API key is read-only: it cannot ingest or delete".into(), None)
        }
        Refusal::RateLimited(wait) => {
            (Code::ResourceExhausted, "rate limit of this API key exceeded; retry later".into(), Some(wait))
        }
    };
    let is_grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    let mut response = if is_grpc {
        let mut status = tonic::Status::new(code, message);
        if let Some(wait) = retry_after {
            embedwire_proto::transport::set_retry_pushback(&mut status, wait);
        }
        status.into_http::<axum::body::Body>()
    } else {
        let error = ApiError { code, message, field: None, http_status: None, retry_after };
        if request.uri().path() == "/v1/embeddings" { error.into_openai_response() } else { error.into_response() }
    };
    if code == Code::Unauthenticated {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Access<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send + 'static,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<axum::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        match self.layer.check(&request) {
            Ok(()) => self.inner.call(request).map(|result| result.map(|r| r.map(axum::body::Body::new))).boxed(),
            Err(refusal) => {
                let response = refusal_response(&request, refusal);
                async move { Ok(response) }.boxed()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_roles_and_requirements() {
        let keys = ApiKeys::load(&["rw-key-0123456789".into()], &["ro-key-0123456789".into()], None).unwrap();
        assert_eq!(keys.find("rw-key-0123456789"), Some((0, Role::ReadWrite)));
        assert_eq!(keys.find("ro-key-0123456789"), Some((1, Role::ReadOnly)));
        assert_eq!(keys.find("rw-key-012345678"), None);
        assert!(ApiKeys::load(&["short".into()], &[], None).is_err());
        let policy = AccessPolicy { keys, metrics_open: true, rate_limit: None };
        let post = http::Method::POST;
        assert_eq!(policy.requirement(&post, "/v1/ingest"), Requirement::ReadWriteKey);
        assert_eq!(policy.requirement(&post, "/v1/search"), Requirement::AnyKey);
        assert_eq!(policy.requirement(&post, "/grpc.health.v1.Health/Check"), Requirement::Open);
        assert_eq!(policy.requirement(&post, "/embedwire.v1.SearchService/DeleteDocuments"), Requirement::ReadWriteKey);
        assert_eq!(policy.requirement(&http::Method::GET, "/metrics"), Requirement::Open);
    }

    #[test]
    fn rate_limit_allows_the_burst_then_refills_per_key() {
        let clock = governor::clock::FakeRelativeClock::default();
        let limiter = RateLimiter::hashmap_with_clock(RateLimit::new(10.0, 2.0).unwrap().quota, clock.clone());
        assert!(limiter.check_key(&0).is_ok());
        assert!(limiter.check_key(&0).is_ok());
        assert!(limiter.check_key(&0).is_err(), "burst spent");
        assert!(limiter.check_key(&1).is_ok(), "another key has its own bucket");
        clock.advance(Duration::from_millis(99));
        assert!(limiter.check_key(&0).is_err(), "a tenth of a second refills one request, not before");
        clock.advance(Duration::from_millis(1));
        assert!(limiter.check_key(&0).is_ok(), "refilled one request");
        assert!(limiter.check_key(&0).is_err(), "and only one");
        clock.advance(Duration::from_secs(10));
        let refilled = (0..5).take_while(|_| limiter.check_key(&0).is_ok()).count();
        assert_eq!(refilled, 2, "an idle key gets its burst back, no more");
    }

    #[test]
    fn fractional_rates_and_bursts() {
        let slow = RateLimit::new(0.01, 2.5).unwrap().quota;
        assert_eq!(slow.replenish_interval(), Duration::from_secs(100));
        assert_eq!(slow.burst_size().get(), 2, "a fractional burst is rounded down");
        assert!(RateLimit::new(1e10, 1.0).is_err(), "faster than one request per nanosecond");
        assert!(RateLimit::new(1.0, 0.5).is_err(), "no request at all");
    }

    #[test]
    fn key_file() {
        let path = std::env::temp_dir().join(format!("embedwire-keys-{}", std::process::id()));
        std::fs::write(&path, "# keys\nfile-key-rw-0123456789\nfile-key-ro-0123456789 read-only\n\n").unwrap();
        let keys = ApiKeys::load(&[], &[], Some(&path)).unwrap();
        assert_eq!(keys.find("file-key-ro-0123456789").map(|k| k.1), Some(Role::ReadOnly));
        assert_eq!(keys.find("file-key-rw-0123456789").map(|k| k.1), Some(Role::ReadWrite));
        std::fs::write(&path, "file-key-rw-0123456789 admin\n").unwrap();
        assert!(ApiKeys::load(&[], &[], Some(&path)).is_err());
        let _ = std::fs::remove_file(&path);
    }
}
