//! What happens around one unary call: the server is chosen by the [`Pool`], the
//! deadline goes on the request, a transport failure takes the server out of the
//! rotation, UNAVAILABLE and RESOURCE_EXHAUSTED are retried (at once on another
//! server when one is up, otherwise after a jittered exponential backoff, or after
//! the server's retry hint when its refusal carries one), and a
//! read-only call may be hedged: a second copy goes to the next server if the
//! first has not answered in time, and the first answer wins.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tonic::Code;

use crate::config::RetryPolicy;
use crate::error::{Error, Result};
use crate::pool::{Backend, Pool, Route};

/// Whether a call may be sent twice at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hedge {
    /// Read-only: a duplicate does no harm.
    Allowed,
    /// Writes: never duplicated on purpose.
    Never,
}

/// Counters of what the policy did, for tests and benchmarks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CallStats {
    /// Calls sent to a server, hedges and retries included.
    pub attempts: u64,
    /// Attempts repeated after UNAVAILABLE or RESOURCE_EXHAUSTED.
    pub retries: u64,
    /// Of those, retries after a refusal that carried a retry hint (overload).
    pub pushbacks: u64,
    /// Of those, retries sent at once to another server after a transport failure.
    pub failovers: u64,
    /// Second copies sent because the first was slow.
    pub hedges: u64,
}

#[derive(Default)]
struct Counters {
    attempts: AtomicU64,
    retries: AtomicU64,
    pushbacks: AtomicU64,
    failovers: AtomicU64,
    hedges: AtomicU64,
}

/// The servers and the rules for calling them.
pub(crate) struct Caller {
    pub pool: Pool,
    pub retry: RetryPolicy,
    pub timeout: Option<Duration>,
    pub hedge_after: Option<Duration>,
    counters: Counters,
}

impl Caller {
    pub(crate) fn new(
        pool: Pool,
        retry: RetryPolicy,
        timeout: Option<Duration>,
        hedge_after: Option<Duration>,
    ) -> Self {
        Caller { pool, retry, timeout, hedge_after, counters: Counters::default() }
    }

    pub(crate) fn stats(&self) -> CallStats {
        CallStats {
            attempts: self.counters.attempts.load(Ordering::Relaxed),
            retries: self.counters.retries.load(Ordering::Relaxed),
            pushbacks: self.counters.pushbacks.load(Ordering::Relaxed),
            failovers: self.counters.failovers.load(Ordering::Relaxed),
            hedges: self.counters.hedges.load(Ordering::Relaxed),
        }
    }

    /// `message` as a request with the configured deadline.
    pub(crate) fn request<M>(&self, message: M) -> tonic::Request<M> {
        let mut request = tonic::Request::new(message);
        if let Some(timeout) = self.timeout {
            request.set_timeout(timeout);
        }
        request
    }

    /// Runs `call` on servers chosen by `route` until it succeeds, fails for good,
    /// or the retries are spent. `call` builds a fresh request each time (tonic
    /// consumes it), with [`Caller::request`] for the deadline.
    pub(crate) async fn unary<T, F, Fut>(&self, route: Route, hedge: Hedge, call: F) -> Result<T>
    where
        F: Fn(Arc<Backend>) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let mut retry = 0;
        loop {
            let (backend, result) = match (hedge, self.hedge_after) {
                (Hedge::Allowed, Some(delay)) => self.hedged(route, delay, &call).await,
                _ => {
                    let backend = self.pool.pick(route);
                    (backend.clone(), self.attempt(backend, &call).await)
                }
            };
            let status = match result {
                Ok(value) => return Ok(value),
                Err(status) => status,
            };
            let error = Error::from_status(status, &backend.address, self.timeout);
            if retry >= self.retry.max_retries || !is_retryable(&error) {
                return Err(error);
            }
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
            if error.retry_after().is_some() {
                self.counters.pushbacks.fetch_add(1, Ordering::Relaxed);
            }
            if matches!(error, Error::Unreachable { .. }) && self.pool.has_alternative(&backend) {
                self.counters.failovers.fetch_add(1, Ordering::Relaxed);
            } else {
                // A refusal for overload says when to come back; the wait honors it.
                tokio::time::sleep(self.retry.wait(retry, error.retry_after())).await;
            }
            retry += 1;
        }
    }

    /// One attempt on `backend`; a transport failure takes it out of the rotation,
    /// an answer (even an error status) puts it back.
    async fn attempt<T, F, Fut>(&self, backend: Arc<Backend>, call: &F) -> Result<T, tonic::Status>
    where
        F: Fn(Arc<Backend>) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        self.counters.attempts.fetch_add(1, Ordering::Relaxed);
        let result = call(backend.clone()).await;
        self.pool.observe(&backend, result)
    }

    /// The first attempt, and after `delay` without an answer a second one on the
    /// next server; the first success wins (the other call is dropped, which
    /// cancels it on the server). When one fails, the other's result counts.
    async fn hedged<T, F, Fut>(
        &self,
        route: Route,
        delay: Duration,
        call: &F,
    ) -> (Arc<Backend>, Result<T, tonic::Status>)
    where
        F: Fn(Arc<Backend>) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let first_backend = self.pool.pick(route);
        let first = self.attempt(first_backend.clone(), call);
        tokio::pin!(first);
        tokio::select! {
            result = &mut first => return (first_backend, result),
            _ = tokio::time::sleep(delay) => {}
        }
        self.counters.hedges.fetch_add(1, Ordering::Relaxed);
        let second_backend = self.pool.pick(route);
        let second = self.attempt(second_backend.clone(), call);
        tokio::pin!(second);
        tokio::select! {
            result = &mut first => match result {
                Ok(value) => (first_backend, Ok(value)),
                Err(_) => (second_backend, second.await),
            },
            result = &mut second => match result {
                Ok(value) => (second_backend, Ok(value)),
                Err(_) => (first_backend, first.await),
            },
        }
    }
}

/// Failures worth another attempt: the server was not reached, was not ready, or
/// shed the load. Anything else would fail again the same way.
fn is_retryable(error: &Error) -> bool {
    match error {
        Error::Unreachable { .. } => true,
        Error::Status { code, .. } => matches!(code, Code::Unavailable | Code::ResourceExhausted),
        _ => false,
    }
}
