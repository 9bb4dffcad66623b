//! One real embedwire-server process ([`ChildProcess`]): spawned on 127.0.0.1:0 with
//! a fresh data directory, ready when the health service reports SERVING.

use std::{ffi::OsString, net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context;
use clap::Parser;
use embedwire_server::ServerConfig;
use tokio::process::Command;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

use crate::child_process::{ChildProcess, fresh_dir};
use crate::server_metrics::MetricsSnapshot;

/// Longest wait for a server to listen and then to report SERVING.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Health polling interval: small against the 2 s cold-start target.
const POLL_INTERVAL: Duration = Duration::from_millis(2);

/// How to start the server.
#[derive(Debug, Clone)]
pub struct ServerCommand {
    pub binary: PathBuf,
    /// Flags after `--listen 127.0.0.1:0 --data-dir <fresh dir>`.
    pub args: Vec<OsString>,
}

impl ServerCommand {
    /// The bench's `defaults`, then the user's `extra` flags (e.g. from `--server-arg`),
    /// which replace a default of the same name: the server refuses a flag given twice.
    pub fn new(binary: PathBuf, defaults: Vec<(&str, OsString)>, extra: &[String]) -> Self {
        let overridden = |flag: &str| extra.iter().any(|arg| arg == flag || arg.starts_with(&format!("{flag}=")));
        let kept = defaults.into_iter().filter(|(flag, _)| !overridden(flag));
        let args =
            kept.flat_map(|(flag, value)| [flag.into(), value]).chain(extra.iter().map(OsString::from)).collect();
        ServerCommand { binary, args }
    }
}

/// A data directory of its own for each server the bench starts.
pub fn fresh_data_dir() -> PathBuf {
    fresh_dir("data")
}

/// A running server; its data directory goes when it ends.
pub struct ServerProcess {
    pub pid: u32,
    pub address: SocketAddr,
    process: ChildProcess,
}

impl ServerProcess {
    /// Spawns the server and waits for health SERVING. Also returns the cold start:
    /// the time from spawning the process to the first SERVING answer.
    pub async fn start(command: &ServerCommand) -> anyhow::Result<(Self, Duration)> {
        Self::start_on(command, fresh_data_dir(), true).await
    }

    /// Waits until the work the server does after SERVING is over: the sessions that run
    /// the parts of split batches load then (`embedwire_batch_part_sessions` on /metrics),
    /// and a memory reading taken before counts them half loaded.
    pub async fn wait_settled(&self, command: &ServerCommand) -> anyhow::Result<()> {
        let program = std::iter::once(OsString::from("embedwire-server"));
        let parts = ServerConfig::try_parse_from(program.chain(command.args.iter().cloned()))?.batch_parts();
        if parts < 2 {
            return Ok(());
        }
        let deadline = std::time::Instant::now() + READY_TIMEOUT;
        while MetricsSnapshot::read(self.address).await?.get("embedwire_batch_part_sessions") < parts as f64 {
            anyhow::ensure!(std::time::Instant::now() < deadline, "the server's batch part sessions did not load");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// [`ServerProcess::start`] on `data_dir`, which is removed when it ends if
    /// `remove` (else it stays, for a restart on the same data).
    pub async fn start_on(
        command: &ServerCommand,
        data_dir: PathBuf,
        remove: bool,
    ) -> anyhow::Result<(Self, Duration)> {
        let mut spawn = Command::new(&command.binary);
        spawn.args(["--listen", "127.0.0.1:0"]).arg("--data-dir").arg(&data_dir).args(&command.args);
        // The address comes from an info line, so info must be on.
        spawn.env("RUST_LOG", "info,ort=warn");
        let connect = async |address| anyhow::Ok(HealthClient::new(endpoint(address)?.connect().await?));
        let serving = async |health: &mut HealthClient<Channel>| {
            let answer = health.check(HealthCheckRequest::default()).await?;
            anyhow::Ok(answer.get_ref().status == ServingStatus::Serving as i32)
        };
        let timing = (READY_TIMEOUT, POLL_INTERVAL);
        let (process, cold) =
            ChildProcess::start("embedwire-server", spawn, remove.then_some(data_dir), timing, connect, serving)
                .await?;
        Ok((ServerProcess { pid: process.pid, address: process.address, process }, cold))
    }

    /// A new HTTP/2 connection to the server.
    pub async fn connect(&self) -> anyhow::Result<Channel> {
        endpoint(self.address)?.connect().await.with_context(|| format!("connecting to {}", self.address))
    }

    /// The server's last log lines (warnings during a run show up here).
    pub fn log_tail(&self) -> Vec<String> {
        self.process.log_tail()
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.process.stop().await
    }
}

fn endpoint(address: SocketAddr) -> anyhow::Result<Endpoint> {
    Ok(Endpoint::from_shared(format!("http://{address}"))?.tcp_nodelay(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_flags_replace_defaults_of_the_same_name() {
        let defaults = vec![("--backend", OsString::from("onnx")), ("--intra-op-threads", OsString::from("2"))];
        let extra = ["--intra-op-threads=1".to_string(), "--ort-spin".to_string()];
        let command = ServerCommand::new(PathBuf::from("server"), defaults, &extra);
        assert_eq!(command.args, ["--backend", "onnx", "--intra-op-threads=1", "--ort-spin"]);
    }
}
