//! API keys and per-key rate limits, as one tower layer in front of everything a port
//! serves (gRPC, gRPC-web and HTTP/JSON alike), so no route can forget to check.
//!
//! Keys travel as `authorization: Bearer KEY` (gRPC metadata or HTTP header). Only
//! BLAKE3 hashes of the keys are kept, and a presented key is compared with every one
//! of them in constant time (`blake3::Hash`'s equality), so neither timing nor a
//! memory dump gives a key away. Health and readiness stay open for probes; the
//! metrics page is open or keyed by a setting. Read-only keys can embed and search but
//! not ingest or delete; only admin keys create and delete collections.
//!
//! A key may be scoped to some collections (`KEY read-only collections=a,b`). The
//! layer hands the key's [`Grant`] to what it serves as a request extension: HTTP
//! routes name their collection in the path, so the layer checks them itself; a gRPC
//! call names it in its message, so the service checks it ([`Grant::check`]).

use std::collections::BTreeSet;
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
    /// Everything within its collections, ingest and delete included.
    ReadWrite,
    /// Everything in every collection, and creating and deleting collections.
    Admin,
}

/// The name the default collection (the empty name in requests) has in scopes and
/// HTTP paths.
pub const DEFAULT_COLLECTION: &str = "default";

/// The collections a key reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every collection: keys without `collections=`, and admin keys.
    Every,
    /// These (the default collection as [`DEFAULT_COLLECTION`]).
    Only(Arc<BTreeSet<String>>),
}

/// What the key of a request may do, as the access layer found it: a request
/// extension. Absent when the port has no keys: then every request may do anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub role: Role,
    pub scope: Scope,
}

impl Grant {
    /// The grant the access layer put on a request, if any.
    pub fn of(extensions: &http::Extensions) -> Option<&Grant> {
        extensions.get::<Grant>()
    }

    /// Whether the key reaches `collection` (empty: the default collection).
    pub fn reaches(&self, collection: &str) -> bool {
        match &self.scope {
            Scope::Every => true,
            Scope::Only(names) => names.contains(if collection.is_empty() { DEFAULT_COLLECTION } else { collection }),
        }
    }

    /// PERMISSION_DENIED naming `collection` unless `grant` (none: keys are off)
    /// reaches it.
    pub fn check(grant: Option<&Grant>, collection: &str) -> Result<(), tonic::Status> {
        match grant {
            Some(grant) if !grant.reaches(collection) => {
                Err(tonic::Status::permission_denied(out_of_scope(collection)))
            }
            _ => Ok(()),
        }
    }
}

/// The refusal of a collection outside a key's scope. It says no more than that, so a
/// key cannot learn whether a collection it does not reach exists.
fn out_of_scope(collection: &str) -> String {
    let name = if collection.is_empty() { DEFAULT_COLLECTION } else { collection };
    format!("collection: this API key does not reach collection {name:?}")
}

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    Open,
    AnyKey,
    ReadWriteKey,
    AdminKey,
}

/// The configured keys.
#[derive(Default)]
pub struct ApiKeys {
    keys: Vec<(blake3::Hash, Grant)>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.keys.len())
    }
}

impl ApiKeys {
    /// Keys from flags (read-write and read-only, every collection) and from a file
    /// with one key per line: `KEY [read-write|read-only|admin] [collections=a,b]`
    /// (read-write and every collection when left out; blank lines and `#` comments
    /// skipped).
    pub fn load(read_write: &[String], read_only: &[String], file: Option<&Path>) -> Result<Self, String> {
        let mut keys = ApiKeys::default();
        for key in read_write {
            keys.add(key, Grant { role: Role::ReadWrite, scope: Scope::Every })?;
        }
        for key in read_only {
            keys.add(key, Grant { role: Role::ReadOnly, scope: Scope::Every })?;
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
                let grant = parse_grant(words)
                    .map_err(|error| format!("--api-keys-file {} line {}: {error}", path.display(), number + 1))?;
                keys.add(key, grant)?;
            }
        }
        Ok(keys)
    }

    fn add(&mut self, key: &str, grant: Grant) -> Result<(), String> {
        let key = key.trim();
        if key.len() < 16 {
            return Err("API keys must have at least 16 characters".into());
        }
        if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("API keys cannot contain spaces or control characters".into());
        }
        self.keys.push((blake3::hash(key.as_bytes()), grant));
        Ok(())
    }

    /// No keys: authentication is off.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The index and grant of `presented`, comparing against every key.
    pub fn find(&self, presented: &str) -> Option<(usize, &Grant)> {
        let hash = blake3::hash(presented.as_bytes());
        let mut found = None;
        for (index, (key, grant)) in self.keys.iter().enumerate() {
            // No early exit: the time taken does not depend on which key matched.
            if *key == hash {
                found = Some((index, grant));
            }
        }
        found
    }
}

/// A key file line's words after the key: its role and scope.
fn parse_grant<'a>(words: impl Iterator<Item = &'a str>) -> Result<Grant, String> {
    let (mut role, mut scope) = (None, None);
    for word in words {
        if let Some(list) = word.strip_prefix("collections=") {
            let names: BTreeSet<String> = list.split(',').map(str::to_string).collect();
            if let Some(bad) = names.iter().find(|name| !is_collection_name(name)) {
                return Err(format!(
                    "{bad:?} in {word:?} is not a collection name (lower-case letters, digits and underscores, \
                     starting with a letter; {DEFAULT_COLLECTION} for the default collection)"
                ));
            }
            if scope.replace(Scope::Only(Arc::new(names))).is_some() {
                return Err("collections= is given twice".into());
            }
            continue;
        }
        let named = match word {
            "read-write" => Role::ReadWrite,
            "read-only" => Role::ReadOnly,
            "admin" => Role::Admin,
            other => return Err(format!("{other:?} is not read-only, read-write, admin or collections=NAME,...")),
        };
        if role.replace(named).is_some() {
            return Err("a key has one role".into());
        }
    }
    let role = role.unwrap_or(Role::ReadWrite);
    if role == Role::Admin && scope.is_some() {
        return Err("an admin key reaches every collection: leave out collections=".into());
    }
    Ok(Grant { role, scope: scope.unwrap_or(Scope::Every) })
}

/// The collection name rule (the server's, which this layer does not depend on).
fn is_collection_name(name: &str) -> bool {
    name.len() <= 48
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
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
        let post = method == http::Method::POST;
        match path {
            "/healthz" | "/readyz" | "/" | "/openapi.json" => Requirement::Open,
            "/metrics" if self.metrics_open => Requirement::Open,
            "/v1/ingest" if post => Requirement::ReadWriteKey,
            "/v1/collections" if post => Requirement::AdminKey,
            "/embedwire.v1.SearchService/Ingest"
            | "/embedwire.v1.SearchService/IngestStream"
            | "/embedwire.v1.SearchService/DeleteDocuments" => Requirement::ReadWriteKey,
            "/embedwire.v1.CollectionService/CreateCollection" | "/embedwire.v1.CollectionService/DeleteCollection" => {
                Requirement::AdminKey
            }
            path if path.starts_with("/grpc.health.v1.Health/") => Requirement::Open,
            path => match collection_route(path) {
                Some((_, "")) if method == http::Method::DELETE => Requirement::AdminKey,
                Some((_, "ingest")) if post => Requirement::ReadWriteKey,
                _ => Requirement::AnyKey,
            },
        }
    }
}

/// The collection an HTTP route acts on, by its path: `/v1/collections/NAME/REST` (the
/// name and the rest, empty for the collection itself), or the default collection's
/// routes of the existing contract. None for the rest (gRPC calls name theirs in
/// their messages).
fn collection_route(path: &str) -> Option<(&str, &str)> {
    if let Some(tail) = path.strip_prefix("/v1/collections/") {
        let (name, rest) = tail.split_once('/').unwrap_or((tail, ""));
        return Some((name, rest));
    }
    let default = path == "/v1/ingest"
        || path == "/v1/search"
        || path.starts_with("/v1/jobs/")
        || path.starts_with("/v1/documents/");
    default.then_some(("", ""))
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
    PermissionDenied(String),
    /// Over the key's rate; the bucket has room again after this long.
    RateLimited(Duration),
}

impl AccessLayer {
    /// The grant of the request's key (None when the port has no keys or the route is
    /// open), or why it is refused.
    fn check<B>(&self, request: &Request<B>) -> Result<Option<Grant>, Refusal> {
        let policy = &self.policy;
        let path = request.uri().path();
        let requirement = policy.requirement(request.method(), path);
        if requirement == Requirement::Open {
            return Ok(None);
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
        let (index, grant) = policy.keys.find(presented).ok_or(Refusal::Unauthenticated("the API key is not valid"))?;
        match (requirement, grant.role) {
            (Requirement::AdminKey, Role::Admin) | (Requirement::ReadWriteKey, Role::ReadWrite | Role::Admin) => {}
            (Requirement::AdminKey, _) => {
                return Err(Refusal::PermissionDenied(
                    "this API key is not an admin key: only admin keys create and delete collections".into(),
                ));
            }
            (Requirement::ReadWriteKey, _) => {
                return Err(Refusal::PermissionDenied("this API key is read-only: it cannot ingest or delete".into()));
            }
            _ => {}
        }
        if let Some((collection, _)) = collection_route(path)
            && !grant.reaches(collection)
        {
            return Err(Refusal::PermissionDenied(out_of_scope(collection)));
        }
        if let Some(limiter) = &self.limiter
            && let Err(not_until) = limiter.check_key(&index)
        {
            return Err(Refusal::RateLimited(not_until.wait_time_from(limiter.clock().now())));
        }
        Ok(Some(grant.clone()))
    }
}

/// The refusal in the caller's protocol: a gRPC status for gRPC and gRPC-web, JSON
/// (OpenAI's shape on its route) for the rest.
fn refusal_response<B>(request: &Request<B>, refusal: Refusal) -> Response<axum::body::Body> {
    let (code, message, retry_after) = match refusal {
        Refusal::Unauthenticated(message) => (Code::Unauthenticated, message.to_string(), None),
        Refusal::PermissionDenied(message) => (Code::PermissionDenied, message, None),
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
            Ok(grant) => {
                let mut request = request;
                if let Some(grant) = grant {
                    request.extensions_mut().insert(grant);
                }
                self.inner.call(request).map(|result| result.map(|r| r.map(axum::body::Body::new))).boxed()
            }
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

    fn role_of(keys: &ApiKeys, key: &str) -> Option<Role> {
        keys.find(key).map(|(_, grant)| grant.role)
    }

    #[test]
    fn keys_roles_and_requirements() {
        let keys = ApiKeys::load(&["rw-key-0123456789".into()], &["ro-key-0123456789".into()], None).unwrap();
        assert_eq!(keys.find("rw-key-0123456789").map(|(index, _)| index), Some(0));
        assert_eq!(role_of(&keys, "rw-key-0123456789"), Some(Role::ReadWrite));
        assert_eq!(role_of(&keys, "ro-key-0123456789"), Some(Role::ReadOnly));
        assert_eq!(keys.find("rw-key-012345678"), None);
        assert!(ApiKeys::load(&["short".into()], &[], None).is_err());
        let policy = AccessPolicy { keys, metrics_open: true, rate_limit: None };
        let (post, get, delete) = (http::Method::POST, http::Method::GET, http::Method::DELETE);
        assert_eq!(policy.requirement(&post, "/v1/ingest"), Requirement::ReadWriteKey);
        assert_eq!(policy.requirement(&post, "/v1/search"), Requirement::AnyKey);
        assert_eq!(policy.requirement(&post, "/grpc.health.v1.Health/Check"), Requirement::Open);
        assert_eq!(policy.requirement(&post, "/embedwire.v1.SearchService/DeleteDocuments"), Requirement::ReadWriteKey);
        assert_eq!(policy.requirement(&get, "/metrics"), Requirement::Open);
        assert_eq!(policy.requirement(&post, "/v1/collections"), Requirement::AdminKey);
        assert_eq!(policy.requirement(&get, "/v1/collections"), Requirement::AnyKey);
        assert_eq!(policy.requirement(&delete, "/v1/collections/a"), Requirement::AdminKey);
        assert_eq!(policy.requirement(&get, "/v1/collections/a"), Requirement::AnyKey);
        assert_eq!(policy.requirement(&post, "/v1/collections/a/ingest"), Requirement::ReadWriteKey);
        assert_eq!(policy.requirement(&post, "/v1/collections/a/search"), Requirement::AnyKey);
        let create = "/embedwire.v1.CollectionService/CreateCollection";
        assert_eq!(policy.requirement(&post, create), Requirement::AdminKey);
        assert_eq!(policy.requirement(&post, "/embedwire.v1.CollectionService/ListCollections"), Requirement::AnyKey);
    }

    #[test]
    fn routes_name_their_collection() {
        assert_eq!(collection_route("/v1/collections/a/search"), Some(("a", "search")));
        assert_eq!(collection_route("/v1/collections/a/jobs/j1"), Some(("a", "jobs/j1")));
        assert_eq!(collection_route("/v1/collections/a"), Some(("a", "")));
        assert_eq!(collection_route("/v1/search"), Some(("", "")));
        assert_eq!(collection_route("/v1/documents/d"), Some(("", "")));
        assert_eq!(collection_route("/v1/collections"), None);
        assert_eq!(collection_route("/v1/embeddings"), None);
        assert_eq!(collection_route("/embedwire.v1.SearchService/Search"), None);
    }

    #[test]
    fn scoped_keys_reach_their_collections_only() {
        let scoped =
            Grant { role: Role::ReadOnly, scope: Scope::Only(Arc::new(["a".into(), "default".into()].into())) };
        assert!(scoped.reaches("a") && scoped.reaches("") && scoped.reaches("default"));
        assert!(!scoped.reaches("b"));
        let status = Grant::check(Some(&scoped), "b").unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied);
        assert!(status.message().contains("\"b\""), "{}", status.message());
        assert!(Grant::check(None, "b").is_ok(), "no keys: no scope");
        let only_a = Grant { role: Role::ReadWrite, scope: Scope::Only(Arc::new(["a".into()].into())) };
        assert!(!only_a.reaches(""), "the default collection is outside a scope that does not name it");
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
        let lines = "# keys\nfile-key-rw-0123456789\nfile-key-ro-0123456789 read-only\n\n\
                     file-key-ad-0123456789 admin\nfile-key-sc-0123456789 read-only collections=a,b\n\
                     file-key-sw-0123456789 collections=default\n";
        std::fs::write(&path, lines).unwrap();
        let keys = ApiKeys::load(&[], &[], Some(&path)).unwrap();
        assert_eq!(role_of(&keys, "file-key-ro-0123456789"), Some(Role::ReadOnly));
        assert_eq!(role_of(&keys, "file-key-rw-0123456789"), Some(Role::ReadWrite));
        assert_eq!(role_of(&keys, "file-key-ad-0123456789"), Some(Role::Admin));
        let (_, scoped) = keys.find("file-key-sc-0123456789").unwrap();
        assert_eq!(scoped.role, Role::ReadOnly);
        assert!(scoped.reaches("a") && scoped.reaches("b") && !scoped.reaches("c") && !scoped.reaches(""));
        let (_, default_only) = keys.find("file-key-sw-0123456789").unwrap();
        assert_eq!(default_only.role, Role::ReadWrite);
        assert!(default_only.reaches("") && !default_only.reaches("a"));
        for bad in [
            "file-key-rw-0123456789 owner",
            "file-key-rw-0123456789 admin collections=a",
            "file-key-rw-0123456789 read-only read-write",
            "file-key-rw-0123456789 collections=",
            "file-key-rw-0123456789 collections=a,B",
            "file-key-rw-0123456789 collections=a collections=b",
        ] {
            std::fs::write(&path, bad).unwrap();
            let error = ApiKeys::load(&[], &[], Some(&path)).err().unwrap_or_else(|| panic!("{bad} loaded"));
            assert!(error.contains("line 1"), "{error}");
        }
        let _ = std::fs::remove_file(&path);
    }
}
