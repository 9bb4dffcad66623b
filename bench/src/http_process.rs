//! Any HTTP gateway process the bench compares ([`ChildProcess`]), ready when
//! `GET /healthz` answers 200 with `"model_loaded": true` (the readiness of the /v1
//! contract). The embedwire server and the Python baseline are started and judged
//! the same way, so their cold starts compare.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::process::Command;

use crate::child_process::ChildProcess;
use crate::http_client::HttpConnection;
use crate::wire_count::ByteCounters;

/// Longest wait for the process to listen and then to be healthy. Python imports
/// and model loading take seconds on a busy machine.
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
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// A directory the process owns, removed when it ends (its data directory).
    pub scratch_dir: Option<PathBuf>,
}

/// The /healthz answer of the /v1 contract.
#[derive(Debug, Clone, Deserialize)]
pub struct Health {
    pub status: String,
    pub model_loaded: bool,
    pub document_count: u64,
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
        let spawned = Instant::now();
        let scratch_dir = command.scratch_dir.clone();
        let mut process = ChildProcess::spawn(&command.name, spawn, scratch_dir, READY_TIMEOUT).await?;
        let (address, counters) = (process.address, ByteCounters::new());
        // One keep-alive connection, reopened until the gateway accepts.
        let mut connection: Option<HttpConnection> = None;
        let healthy = async || {
            if connection.is_none() {
                connection = HttpConnection::open(address, counters.clone()).await.ok();
            }
            let Some(open) = connection.as_mut() else { return false };
            match open.get("/healthz").await {
                Ok(answer) => answer.json::<Health>().is_ok_and(|health| health.model_loaded),
                Err(_) => {
                    connection = None;
                    false
                }
            }
        };
        process.wait_ready(READY_TIMEOUT, POLL_INTERVAL, healthy).await?;
        let gateway = HttpServerProcess { name: command.name.clone(), pid: process.pid, address, process };
        Ok((gateway, spawned.elapsed()))
    }

    /// A new keep-alive connection whose bytes add to `counters`.
    pub async fn connect(&self, counters: Arc<ByteCounters>) -> anyhow::Result<HttpConnection> {
        HttpConnection::open(self.address, counters).await
    }

    /// GET /healthz once.
    pub async fn health(&self) -> anyhow::Result<Health> {
        let mut connection = self.connect(ByteCounters::new()).await?;
        connection.get("/healthz").await?.json()
    }

    /// Kills the process and reaps it.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.process.stop().await
    }
}
