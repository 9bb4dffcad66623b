//! Connections to PostgreSQL: one pool to the primary (every write, and the reads
//! that must see every acknowledged write: jobs) and one pool per replica (searches
//! and document reads). A replica serves reads only while it answers, lags the
//! primary by at most `--postgres-max-replica-lag-secs`, and has replayed this
//! server's own last commit (so a client that waits for its job and then searches
//! the same server sees its documents); otherwise the primary serves them.
//!
//! Every call is timed and counted by operation for `/metrics`, and every failure to
//! reach the database becomes `Unavailable` naming the store and the address.

use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use crate::error::{Error, Result};
use crate::metrics::StoreMetrics;

/// How long the primary's LSN history is kept to tell a replica's lag in seconds.
const LSN_HISTORY: Duration = Duration::from_secs(120);

/// Connection settings shared by every pool.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub size: usize,
    pub timeout: Duration,
    /// hnsw.ef_search of every session.
    pub ef_search: usize,
}

/// One database server: its pool and a label for messages (host:port/db, no password).
pub struct Endpoint {
    pub pool: Pool,
    pub label: String,
}

impl Endpoint {
    fn open(url: &str, flag: &str, settings: &PoolSettings) -> Result<Self> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| Error::Config(format!("{flag} {:?}: not a PostgreSQL URL: {e}", redact(url))))?;
        config.connect_timeout(settings.timeout.min(Duration::from_secs(5)));
        // Every session searches with iterative scans, so a filtered query still
        // returns top_k rows (without it HNSW stops after ef_search candidates and
        // the filter drops most of them), and no statement runs unbounded.
        config.options(format!(
            "-c hnsw.iterative_scan=relaxed_order -c hnsw.ef_search={} -c statement_timeout={}",
            settings.ef_search,
            settings.timeout.as_millis()
        ));
        let label = label_of(&config);
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(settings.size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(settings.timeout))
            .create_timeout(Some(settings.timeout.min(Duration::from_secs(5))))
            .recycle_timeout(Some(Duration::from_secs(2)))
            .build()
            .map_err(|e| Error::Config(format!("{flag}: {e}")))?;
        Ok(Endpoint { pool, label })
    }

    /// A pooled connection, or `Unavailable` naming this server.
    pub async fn connection(&self, operation: &str) -> Result<Object> {
        self.pool.get().await.map_err(|e| pool_error(&self.label, operation, e))
    }
}

/// A replica and what is known of its progress.
struct Replica {
    endpoint: Endpoint,
    /// WAL position replayed, as last read (0: unknown or unreachable).
    replayed: AtomicU64,
    /// Seconds behind the primary, as last computed (u64::MAX: unusable).
    lag_millis: AtomicU64,
}

/// The primary and the replicas of one database.
pub struct Pools {
    primary: Endpoint,
    replicas: Vec<Replica>,
    next: AtomicUsize,
    /// The primary's WAL position after this server's last commit.
    own_commit: AtomicU64,
    /// (when, primary WAL position) samples, newest last.
    primary_history: Mutex<VecDeque<(Instant, u64)>>,
    max_lag: Duration,
    metrics: &'static StoreMetrics,
}

impl Pools {
    pub fn open(
        primary_url: &str,
        replica_urls: &[String],
        settings: &PoolSettings,
        max_lag: Duration,
    ) -> Result<Self> {
        let primary = Endpoint::open(primary_url, "--postgres-url", settings)?;
        let replicas = replica_urls
            .iter()
            .map(|url| {
                Ok(Replica {
                    endpoint: Endpoint::open(url, "--postgres-read-url", settings)?,
                    replayed: AtomicU64::new(0),
                    lag_millis: AtomicU64::new(u64::MAX),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Pools {
            primary,
            replicas,
            next: AtomicUsize::new(0),
            own_commit: AtomicU64::new(0),
            primary_history: Mutex::new(VecDeque::new()),
            max_lag,
            metrics: StoreMetrics::global(),
        })
    }

    pub fn primary(&self) -> &Endpoint {
        &self.primary
    }

    pub fn has_replicas(&self) -> bool {
        !self.replicas.is_empty()
    }

    /// Labels of the primary and the replicas, in flag order.
    pub fn labels(&self) -> (String, Vec<String>) {
        (self.primary.label.clone(), self.replicas.iter().map(|r| r.endpoint.label.clone()).collect())
    }

    /// Records one call for `/metrics`.
    pub fn observe(&self, operation: &'static str, started: Instant, ok: bool) {
        self.metrics.observe("postgres", operation, started.elapsed(), ok);
    }

    /// Remembers the primary's WAL position after a commit of this server.
    pub fn committed_at(&self, lsn: u64) {
        self.own_commit.fetch_max(lsn, Ordering::Relaxed);
    }

    /// Where a read may go: a usable replica in rotation, else the primary.
    pub fn reader(&self) -> &Endpoint {
        let own = self.own_commit.load(Ordering::Relaxed);
        let max_lag = self.max_lag.as_millis() as u64;
        let count = self.replicas.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        (0..count)
            .map(|i| &self.replicas[(first + i) % count])
            .find(|r| r.lag_millis.load(Ordering::Relaxed) <= max_lag && r.replayed.load(Ordering::Relaxed) >= own)
            .map_or(&self.primary, |r| &r.endpoint)
    }

    /// A replica that answered the last check, however far behind (for when the
    /// primary cannot answer).
    pub fn reachable_replica(&self) -> Option<&Endpoint> {
        let count = self.replicas.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        (0..count)
            .map(|i| &self.replicas[(first + i) % count])
            .find(|r| r.lag_millis.load(Ordering::Relaxed) != u64::MAX)
            .map(|r| &r.endpoint)
    }

    /// Stops reading from a replica that failed a call until the next check finds it well.
    pub fn replica_failed(&self, label: &str) {
        if let Some(replica) = self.replicas.iter().find(|r| r.endpoint.label == label) {
            replica.lag_millis.store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// Reads the primary's WAL position and every replica's, and from them each
    /// replica's lag. Returns whether each node answered: (primary, replicas).
    pub async fn check(&self) -> (Result<()>, Vec<Result<()>>) {
        let now = Instant::now();
        let primary = match self.wal_position(&self.primary, "SELECT pg_current_wal_lsn()::text").await {
            Ok(lsn) => {
                let mut history = self.primary_history.lock().expect("lock");
                history.push_back((now, lsn));
                while history.front().is_some_and(|(at, _)| now.duration_since(*at) > LSN_HISTORY) {
                    history.pop_front();
                }
                Ok(())
            }
            Err(error) => Err(error),
        };
        let mut replicas = Vec::new();
        for replica in &self.replicas {
            let sql = "SELECT coalesce(pg_last_wal_replay_lsn(), '0/0')::text";
            match self.wal_position(&replica.endpoint, sql).await {
                Ok(replayed) => {
                    replica.replayed.store(replayed, Ordering::Relaxed);
                    replica.lag_millis.store(self.lag_of(replayed, now), Ordering::Relaxed);
                    replicas.push(Ok(()));
                }
                Err(error) => {
                    replica.lag_millis.store(u64::MAX, Ordering::Relaxed);
                    replicas.push(Err(error));
                }
            }
        }
        (primary, replicas)
    }

    /// How long ago the primary was where a replica is now: 0 when it has caught up
    /// with the newest sample, the age of the oldest sample it has not reached otherwise.
    fn lag_of(&self, replayed: u64, now: Instant) -> u64 {
        let history = self.primary_history.lock().expect("lock");
        match history.iter().find(|(_, lsn)| *lsn > replayed) {
            None => 0,
            Some((at, _)) => now.duration_since(*at).as_millis() as u64,
        }
    }

    async fn wal_position(&self, endpoint: &Endpoint, sql: &str) -> Result<u64> {
        let client = endpoint.connection("health").await?;
        let row = client.query_one(sql, &[]).await.map_err(|e| sql_error(&endpoint.label, "health", e))?;
        Ok(parse_lsn(row.get(0)))
    }
}

/// "16/B374D848" as one number.
pub fn parse_lsn(text: &str) -> u64 {
    let (high, low) = text.split_once('/').unwrap_or(("0", "0"));
    (u64::from_str_radix(high, 16).unwrap_or(0) << 32) | u64::from_str_radix(low, 16).unwrap_or(0)
}

/// host:port/db of a config, never its password.
fn label_of(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or("postgres"))
}

/// A URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

fn pool_error(label: &str, operation: &str, error: PoolError) -> Error {
    match error {
        PoolError::Backend(e) => sql_error(label, operation, e),
        other => Error::Unavailable(format!("postgres store at {label} unreachable ({operation}): {other}")),
    }
}

/// A failed statement: `Unavailable` when the database cannot be reached or cannot
/// serve now (connection lost, shutting down, starting up, read-only after a
/// failover, lock or serialization conflicts worth a retry), `Storage` otherwise.
pub fn sql_error(label: &str, operation: &str, error: tokio_postgres::Error) -> Error {
    let Some(db) = error.as_db_error() else {
        return Error::Unavailable(format!("postgres store at {label} unreachable ({operation}): {error}"));
    };
    let code = db.code().code();
    let transient = code.starts_with("08")
        || code.starts_with("57")
        || code.starts_with("53")
        || *db.code() == SqlState::READ_ONLY_SQL_TRANSACTION
        || *db.code() == SqlState::T_R_SERIALIZATION_FAILURE
        || *db.code() == SqlState::T_R_DEADLOCK_DETECTED;
    let message = format!("postgres store at {label}: {operation}: {} ({code})", db.message());
    if transient { Error::Unavailable(message) } else { Error::Storage(message) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_text_becomes_a_comparable_number() {
        assert_eq!(parse_lsn("0/0"), 0);
        assert_eq!(parse_lsn("16/B374D848"), (0x16 << 32) | 0xB374_D848);
        assert!(parse_lsn("1/0") > parse_lsn("0/FFFFFFFF"));
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("postgres://app:s3cret@db:5432/x"), "postgres://app@db:5432/x");
        assert_eq!(redact("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact("host=db user=app"), "host=db user=app");
    }
}
