//! How a [`Client`](crate::Client) talks to its servers: addresses, credentials,
//! deadlines, retries, hedging and load-balancing cool-down, in one value the
//! caller builds (the library never reads the environment; the CLI maps its flags
//! and their env twins onto this).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::Client;
use crate::error::Result;

/// Settings of a client. Build with [`ClientConfig::new`] and the `with_*` methods.
#[derive(Clone)]
pub struct ClientConfig {
    /// Server addresses (`http://host:port`, `https://host:port`, or `host:port`,
    /// which means http, or https when a CA file is set). Embed calls are spread
    /// over all of them.
    pub addresses: Vec<String>,
    /// Sent as `authorization: Bearer KEY` on every call.
    pub api_key: Option<String>,
    /// PEM file of the CA that signed the servers' certificates; without it,
    /// `https://` addresses are checked against the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Name to check in the server certificate instead of the address's host (for
    /// servers reached by IP address).
    pub tls_domain: Option<String>,
    /// Deadline of each attempt of a unary call (sent as `grpc-timeout`, so the
    /// server gives up too). None: no deadline. Streams have none.
    pub timeout: Option<Duration>,
    /// Longest wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// Retries of UNAVAILABLE and RESOURCE_EXHAUSTED.
    pub retry: RetryPolicy,
    /// Send a second copy of an Embed call to another server if the first has not
    /// answered after this long; the first answer wins. None: no hedging.
    /// Only Embed and other read-only calls are hedged.
    pub hedge_after: Option<Duration>,
    /// How long a server whose connection failed is skipped by the balancer.
    pub cool_down: Duration,
    /// Largest message sent or received, in bytes (a bound, not a target: the
    /// server has its own, smaller request limit).
    pub max_message_bytes: usize,
}

/// Exponential backoff with jitter for retried calls, stretched to the server's
/// retry hint when a refusal carries one.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: u32,
    /// Backoff before the first retry; doubles with each further retry.
    pub initial_backoff: Duration,
    /// Cap of the backoff.
    pub max_backoff: Duration,
    /// Cap of a wait taken from the server's retry hint (`grpc-retry-pushback-ms`),
    /// so a wrong hint cannot stall a call for long.
    pub max_pushback: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            // Eight: the waits (at least 50 ms doubling to 2 s, or the server's hint)
            // add up to 4-7 s, enough to ride out a burst of several times what the
            // server admits on a loaded 2-core machine; five (0.8-1.6 s) was not.
            max_retries: 8,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            max_pushback: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based): the exponential delay `d`,
    /// randomized in `[d/2, d]` so that clients rejected together do not come back
    /// together.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exponential = self.initial_backoff.saturating_mul(1u32 << retry.min(20));
        let capped = exponential.min(self.max_backoff);
        let half = capped / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// The wait before retry number `retry` after a refusal whose retry hint was
    /// `hint`: the hint stretched by a random factor in `[1, 1.5]` (never earlier
    /// than the server asked, and the clients it refused together come back
    /// spread out), capped at `max_pushback`, and never shorter than
    /// [`RetryPolicy::backoff`], so repeated refusals still back off
    /// exponentially. Without a hint, the backoff alone.
    pub fn wait(&self, retry: u32, hint: Option<Duration>) -> Duration {
        let backoff = self.backoff(retry);
        match hint {
            Some(hint) => hint.mul_f64(1.0 + 0.5 * fastrand::f64()).min(self.max_pushback).max(backoff),
            None => backoff,
        }
    }
}

impl ClientConfig {
    /// Defaults for `addresses`: 30 s deadline, 8 retries, no hedging, 5 s cool-down.
    pub fn new<I, S>(addresses: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientConfig {
            addresses: addresses.into_iter().map(Into::into).collect(),
            api_key: None,
            ca_file: None,
            tls_domain: None,
            timeout: Some(Duration::from_secs(30)),
            connect_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            hedge_after: None,
            cool_down: Duration::from_secs(5),
            max_message_bytes: 64 << 20,
        }
    }

    /// Sends `authorization: Bearer KEY` on every call.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Uses TLS with this CA (PEM) for every address.
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// The deadline of each attempt of a unary call.
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Hedges read-only calls after `delay`.
    pub fn with_hedging(mut self, delay: Duration) -> Self {
        self.hedge_after = Some(delay);
        self
    }

    /// Dials every address and returns once at least one answers; the others are
    /// retried in the background of later calls. Fails when none can be reached.
    pub async fn connect(self) -> Result<Client> {
        Client::connect_with(self).await
    }

    /// A client that dials on first use, so it never fails for an unreachable
    /// server here (the first call does, with [`Error::Unreachable`](crate::Error)).
    pub fn connect_lazy(self) -> Result<Client> {
        Client::connect_lazy_with(self)
    }
}

impl fmt::Debug for ClientConfig {
    /// Everything but the API key, which must not end up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("addresses", &self.addresses)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .field("tls_domain", &self.tls_domain)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry", &self.retry)
            .field("hedge_after", &self.hedge_after)
            .field("cool_down", &self.cool_down)
            .field("max_message_bytes", &self.max_message_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_stays_capped_and_jittered() {
        let policy = RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            ..RetryPolicy::default()
        };
        for _ in 0..100 {
            let first = policy.backoff(0);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100), "{first:?}");
            let third = policy.backoff(2);
            assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400), "{third:?}");
            let late = policy.backoff(30);
            assert!(late >= Duration::from_millis(500) && late <= Duration::from_secs(1), "{late:?}");
        }
        let distinct: std::collections::HashSet<_> = (0..20).map(|_| policy.backoff(3)).collect();
        assert!(distinct.len() > 1, "jitter varies the delay");
    }

    #[test]
    fn a_retry_hint_is_honored_jittered_and_capped() {
        let policy = RetryPolicy {
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(40),
            max_pushback: Duration::from_secs(1),
            ..RetryPolicy::default()
        };
        let hint = Some(Duration::from_millis(200));
        let waits: Vec<_> = (0..100).map(|_| policy.wait(0, hint)).collect();
        assert!(
            waits.iter().all(|w| *w >= Duration::from_millis(200) && *w <= Duration::from_millis(300)),
            "{waits:?}"
        );
        assert!(waits.iter().collect::<std::collections::HashSet<_>>().len() > 1, "jittered");
        // A hint shorter than the backoff does not cut the backoff short.
        let short = policy.wait(5, Some(Duration::from_millis(1)));
        assert!(short >= Duration::from_millis(20), "{short:?}");
        // A huge hint is capped.
        assert_eq!(policy.wait(0, Some(Duration::from_secs(3600))), Duration::from_secs(1));
        let plain = policy.wait(0, None);
        assert!(plain >= Duration::from_millis(5) && plain <= Duration::from_millis(10), "{plain:?}");
    }

    #[test]
    fn debug_hides_the_api_key() {
        let config = ClientConfig::new(["http://h:1"]).with_api_key("s3cret");
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret") && shown.contains("<redacted>"), "{shown}");
    }
}
