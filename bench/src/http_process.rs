//! Any HTTP gateway process the bench compares: started from a command line, its
//! address read from a "listening on HOST:PORT" log line on stderr, ready when
//! `GET /healthz` answers 200 with `"model_loaded": true` (the readiness of the
//! /v1 contract). The embedwire server and the Python baseline are started and
//! judged the same way, so their cold starts compare.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Deserialize;
use tokio::io::BufReader;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use crate::http_client::HttpConnection;
use crate::server_process::{failure, read_log};
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
    child: Child,
    pub pid: u32,
    pub address: SocketAddr,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    scratch_dir: Option<PathBuf>,
}

impl Drop for HttpServerProcess {
    fn drop(&mut self) {
        if let Some(dir) = &self.scratch_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl HttpServerProcess {
    /// Spawns the process and waits until /healthz says the model is loaded. Also
    /// returns the cold start: from spawning to that first healthy answer.
    pub async fn start(command: &HttpServerCommand) -> anyhow::Result<(Self, Duration)> {
        let spawned = Instant::now();
        let mut child = Command::new(&command.program)
            .args(&command.args)
            .envs(command.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} ({})", command.name, command.program.display()))?;
        let pid = child.id().context("the process exited at once")?;
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let (address_tx, address_rx) = oneshot::channel();
        tokio::spawn(read_log(
            BufReader::new(child.stderr.take().context("no stderr pipe")?),
            address_tx,
            stderr_tail.clone(),
        ));
        let listening = tokio::time::timeout(READY_TIMEOUT, address_rx).await;
        let Ok(Ok(address)) = listening else {
            return Err(failure(
                &stderr_tail,
                &format!("{} did not log its address (exited, or too slow)", command.name),
            ));
        };
        let mut process = HttpServerProcess {
            name: command.name.clone(),
            child,
            pid,
            address,
            stderr_tail,
            scratch_dir: command.scratch_dir.clone(),
        };
        process.wait_healthy().await?;
        Ok((process, spawned.elapsed()))
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

    /// The last log lines, for error messages.
    pub fn log_tail(&self) -> Vec<String> {
        self.stderr_tail.lock().map(|tail| tail.iter().cloned().collect()).unwrap_or_default()
    }

    /// Kills the process and reaps it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.child.start_kill().context("killing the gateway")?;
        self.child.wait().await.context("waiting for the gateway to exit")?;
        Ok(())
    }

    async fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let counters = ByteCounters::new();
        let mut connection: Option<HttpConnection> = None;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Err(failure(&self.stderr_tail, &format!("{} exited while loading ({status})", self.name)));
            }
            if connection.is_none() {
                connection = HttpConnection::open(self.address, counters.clone()).await.ok();
            }
            if let Some(open) = connection.as_mut() {
                match open.get("/healthz").await {
                    Ok(answer) if answer.status.is_success() => {
                        if answer.json::<Health>().is_ok_and(|health| health.model_loaded) {
                            return Ok(());
                        }
                    }
                    Ok(_) => {}
                    Err(_) => connection = None,
                }
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        Err(failure(&self.stderr_tail, &format!("{} was not healthy in time", self.name)))
    }
}
