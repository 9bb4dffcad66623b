//! The servers of a client and the choice of one per call. One tonic `Channel` per
//! address (each multiplexes any number of calls over one HTTP/2 connection).
//!
//! tonic's `balance_list` spreads calls too, but it keeps sending to an address
//! whose connection is refused until its internal reconnect gives up, and it
//! cannot tell which address a failed call went to; this small balancer knows
//! both, so a failed call is retried elsewhere and the dead address is skipped for
//! a cool-down.
//!
//! Two routes: [`Route::Balanced`] (round robin, for stateless calls such as
//! Embed) and [`Route::Primary`] (the first address that is not cooling down, for
//! SearchService calls: each server keeps its own document store, so a job or a
//! document lives on one server; with one address both routes are the same).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use embedwire_proto::v1::collection_service_client::CollectionServiceClient;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::rerank_service_client::RerankServiceClient;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;

use crate::error::transport_failure;
use crate::transport::Authorization;

/// A channel with the API key interceptor.
pub(crate) type AuthChannel = InterceptedService<Channel, Authorization>;

/// Which servers a call may go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Any server, in turn.
    Balanced,
    /// The first server in the configured order that is not cooling down.
    Primary,
}

/// One server.
pub(crate) struct Backend {
    /// The normalized address, for error messages.
    pub address: String,
    channel: Channel,
    auth: Authorization,
    /// Message size bound for both directions.
    max_message_bytes: usize,
    /// Milliseconds since the pool's epoch until which this server is skipped;
    /// 0 when it is healthy. Atomic, because every call reads it.
    down_until_ms: AtomicU64,
}

impl Backend {
    pub(crate) fn new(address: String, channel: Channel, auth: Authorization, max_message_bytes: usize) -> Self {
        Backend { address, channel, auth, max_message_bytes, down_until_ms: AtomicU64::new(0) }
    }

    pub(crate) fn embed(&self) -> EmbedServiceClient<AuthChannel> {
        EmbedServiceClient::with_interceptor(self.channel.clone(), self.auth.clone())
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes)
    }

    pub(crate) fn search(&self) -> SearchServiceClient<AuthChannel> {
        SearchServiceClient::with_interceptor(self.channel.clone(), self.auth.clone())
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes)
    }

    pub(crate) fn collections(&self) -> CollectionServiceClient<AuthChannel> {
        CollectionServiceClient::with_interceptor(self.channel.clone(), self.auth.clone())
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes)
    }

    pub(crate) fn rerank(&self) -> RerankServiceClient<AuthChannel> {
        RerankServiceClient::with_interceptor(self.channel.clone(), self.auth.clone())
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes)
    }

    pub(crate) fn health(&self) -> HealthClient<AuthChannel> {
        HealthClient::with_interceptor(self.channel.clone(), self.auth.clone())
    }
}

/// The servers and the balancer's state.
pub(crate) struct Pool {
    backends: Vec<Arc<Backend>>,
    /// Round-robin position.
    next: AtomicUsize,
    cool_down: Duration,
    /// Zero point of `Backend::down_until_ms`.
    epoch: Instant,
}

impl Pool {
    /// `backends` must not be empty.
    pub(crate) fn new(backends: Vec<Backend>, cool_down: Duration) -> Self {
        assert!(!backends.is_empty(), "a pool needs at least one server");
        Pool {
            backends: backends.into_iter().map(Arc::new).collect(),
            next: AtomicUsize::new(0),
            cool_down,
            epoch: Instant::now(),
        }
    }

    pub(crate) fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// The server for the next call on `route`. When every server is cooling down,
    /// the one that failed longest ago: a call must go somewhere, and it may well
    /// be back.
    pub(crate) fn pick(&self, route: Route) -> Arc<Backend> {
        let count = self.backends.len();
        let start = match route {
            Route::Balanced => self.next.fetch_add(1, Ordering::Relaxed) % count,
            Route::Primary => 0,
        };
        let now = self.now_ms();
        (0..count)
            .map(|offset| &self.backends[(start + offset) % count])
            .find(|backend| backend.down_until_ms.load(Ordering::Relaxed) <= now)
            .unwrap_or_else(|| {
                self.backends.iter().min_by_key(|backend| backend.down_until_ms.load(Ordering::Relaxed)).unwrap()
            })
            .clone()
    }

    /// True when some server other than `failed` is not cooling down.
    pub(crate) fn has_alternative(&self, failed: &Backend) -> bool {
        let now = self.now_ms();
        self.backends.iter().any(|backend| {
            !std::ptr::eq(backend.as_ref(), failed) && backend.down_until_ms.load(Ordering::Relaxed) <= now
        })
    }

    /// Skips `backend` for the cool-down: its connection failed.
    pub(crate) fn mark_down(&self, backend: &Backend) {
        let until = self.now_ms() + self.cool_down.as_millis() as u64;
        backend.down_until_ms.store(until.max(1), Ordering::Relaxed);
    }

    /// `backend` answered: it is in the rotation again.
    pub(crate) fn mark_up(&self, backend: &Backend) {
        if backend.down_until_ms.load(Ordering::Relaxed) != 0 {
            backend.down_until_ms.store(0, Ordering::Relaxed);
        }
    }

    /// Marks `backend` down after a transport failure and up after an answer; passes
    /// the result through.
    pub(crate) fn observe<T>(&self, backend: &Backend, result: Result<T, tonic::Status>) -> Result<T, tonic::Status> {
        match &result {
            Err(status) if transport_failure(status).is_some() => self.mark_down(backend),
            _ => self.mark_up(backend),
        }
        result
    }

    fn now_ms(&self) -> u64 {
        // +1 so that a server marked down in the pool's first millisecond is not
        // read as healthy (0 means healthy).
        self.epoch.elapsed().as_millis() as u64 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(count: usize, cool_down: Duration) -> Pool {
        let backends = (0..count)
            .map(|i| {
                let address = format!("http://127.0.0.1:{}", 1000 + i);
                let channel = Channel::from_shared(address.clone()).unwrap().connect_lazy();
                Backend::new(address, channel, Authorization::default(), 1 << 20)
            })
            .collect();
        Pool::new(backends, cool_down)
    }

    fn picks(pool: &Pool, route: Route, n: usize) -> Vec<String> {
        (0..n).map(|_| pool.pick(route).address.clone()).collect()
    }

    #[tokio::test]
    async fn round_robin_skips_a_server_that_is_down_until_its_cool_down_ends() {
        let pool = pool(3, Duration::from_millis(200));
        assert_eq!(
            picks(&pool, Route::Balanced, 3),
            ["http://127.0.0.1:1000", "http://127.0.0.1:1001", "http://127.0.0.1:1002"]
        );
        let down = pool.backends()[1].clone();
        pool.mark_down(&down);
        assert!(!picks(&pool, Route::Balanced, 10).contains(&down.address));
        assert!(pool.has_alternative(&down));
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(picks(&pool, Route::Balanced, 3).contains(&down.address), "back after the cool-down");
    }

    #[tokio::test]
    async fn primary_fails_over_in_order_and_back_when_marked_up() {
        let pool = pool(3, Duration::from_secs(60));
        let first = pool.backends()[0].clone();
        assert_eq!(pool.pick(Route::Primary).address, first.address);
        pool.mark_down(&first);
        assert_eq!(pool.pick(Route::Primary).address, "http://127.0.0.1:1001");
        pool.mark_up(&first);
        assert_eq!(pool.pick(Route::Primary).address, first.address);
    }

    #[tokio::test]
    async fn when_all_are_down_the_oldest_failure_is_tried() {
        let pool = pool(2, Duration::from_secs(60));
        let (a, b) = (pool.backends()[0].clone(), pool.backends()[1].clone());
        pool.mark_down(&b);
        tokio::time::sleep(Duration::from_millis(5)).await;
        pool.mark_down(&a);
        assert!(!pool.has_alternative(&a));
        assert_eq!(pool.pick(Route::Balanced).address, b.address);
        assert_eq!(pool.pick(Route::Primary).address, b.address);
    }
}
