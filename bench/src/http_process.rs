//! Any HTTP gateway process the bench compares ([`ChildProcess`]), the embedwire server or the Python baseline, ready
//! when `GET /healthz` answers 200 with `"model_loaded": true` (the readiness of the /v1 contract).

use std::{ffi::OsString, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use serde::Deserialize;
use tokio::process::Command;

use crate::{child_process::ChildProcess, http_client::HttpConnection, wire_count::ByteCounters};

/// Longest wait to listen, then to be healthy: Python imports and model loading take seconds on a busy machine.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Health polling interval: small against cold starts of a fraction of a second.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// How to start one gateway.
#[derive(Debug, Clone)]
pub struct HttpServerCommand {
    /// What the reports call it ("embedwire", "python-baseline").
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
    /// A directory the process owns, removed when it ends (its data directory).
    pub scratch_dir: Option<PathBuf>,
}

/// The /healthz answer of the /v1 contract (the fields the bench reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Health {
    pub model_loaded: bool,
    /// `null` when the store has no exact count (a shared store missing a node since
    /// the server started): read as 0, which fails the bench's count checks loudly.
    #[serde(deserialize_with = "count_or_zero")]
    pub document_count: u64,
}

/// A `document_count` that may be `null` (unknown), as 0.
fn count_or_zero<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(deserializer)?.unwrap_or(0))
}

/// A running gateway.
pub struct HttpServerProcess {
    pub name: String,
    pub pid: u32,
    pub address: SocketAddr,
    process: ChildProcess,
}

impl HttpServerProcess {
    /// Spawns the process and waits until /healthz says the model is loaded. Also
    /// returns the cold start: from spawning to that first healthy answer.
    pub async fn start(command: &HttpServerCommand) -> anyhow::Result<(Self, Duration)> {
        let mut spawn = Command::new(&command.program);
        spawn.args(&command.args).envs(command.env.iter().cloned());
        let counters = ByteCounters::new();
        let connect = async |address| HttpConnection::open(address, counters.clone()).await;
        let healthy = async |connection: &mut HttpConnection| {
            let answer = connection.get("/healthz").await?;
            anyhow::Ok(answer.json::<Health>().is_ok_and(|health| health.model_loaded))
        };
        let (scratch_dir, timing) = (command.scratch_dir.clone(), (READY_TIMEOUT, POLL_INTERVAL));
        let (process, cold) = ChildProcess::start(&command.name, spawn, scratch_dir, timing, connect, healthy).await?;
        let gateway =
            HttpServerProcess { name: command.name.clone(), pid: process.pid, address: process.address, process };
        Ok((gateway, cold))
    }

    /// A new keep-alive connection whose bytes add to `counters`.
    pub async fn connect(&self, counters: Arc<ByteCounters>) -> anyhow::Result<HttpConnection> {
        HttpConnection::open(self.address, counters).await
    }

    /// GET /healthz once.
    pub async fn health(&self) -> anyhow::Result<Health> {
        self.connect(ByteCounters::new()).await?.get("/healthz").await?.json()
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.process.stop().await
    }
}
