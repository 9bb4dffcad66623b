//! A Weaviate cluster of N nodes on loopback for a bench to measure against:
//! `scripts/cluster.sh up --nodes N --weaviate-only` in a state directory of its own,
//! so the ports, the readiness rules (every node ready and HEALTHY, one Raft leader)
//! and the node environment are the script's, written once. The addresses and the
//! node pids are read back from the state directory; `cluster.sh down` stops the nodes
//! by pid at the end, also when the cluster is dropped on an error.
//!
//! The nodes run detached (the script's `setsid`), so a bench killed with SIGKILL
//! leaves them running: `EMBEDWIRE_CLUSTER_DIR=<the printed dir> scripts/cluster.sh down`
//! stops them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::child_process::{fresh_dir, program_output};

/// The script that starts and stops clusters.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/cluster.sh");

/// A running Weaviate cluster.
pub struct WeaviateCluster {
    /// The script's state directory: ports.env, pids/, logs/, data/.
    state_dir: PathBuf,
    /// REST base URLs (`http://127.0.0.1:PORT`), in node order.
    pub http_urls: Vec<String>,
    /// Public gRPC addresses (`127.0.0.1:PORT`), in node order.
    pub grpc_addrs: Vec<String>,
    /// The `weaviate-server` processes, in node order, for their CPU time.
    pub pids: Vec<u32>,
    /// Set once `cluster.sh down` has run, so that drop does not run it again.
    stopped: bool,
}

impl WeaviateCluster {
    /// Starts `nodes` nodes on free loopback ports with empty data and waits until
    /// the cluster is healthy; also returns how long that took.
    pub fn start(nodes: usize) -> anyhow::Result<(Self, Duration)> {
        anyhow::ensure!(nodes >= 1, "a Weaviate cluster needs at least one node");
        let state_dir = fresh_dir("weaviate");
        let started = Instant::now();
        let (http_urls, grpc_addrs, pids) = (Vec::new(), Vec::new(), Vec::new());
        let mut cluster = WeaviateCluster { state_dir, http_urls, grpc_addrs, pids, stopped: false };
        // From here on, drop runs `down` whatever happens.
        let up = ["up", "--nodes", &nodes.to_string(), "--weaviate-only"];
        let logs = format!("scripts/cluster.sh up; logs in {}/logs", cluster.state_dir.display());
        program_output(cluster.script().args(up), &logs)?;
        let ports = std::fs::read_to_string(cluster.state_dir.join("ports.env")).context("reading ports.env")?;
        for i in 0..nodes {
            cluster.http_urls.push(format!("http://127.0.0.1:{}", port(&ports, &format!("WEAVIATE_HTTP_{i}"))?));
            cluster.grpc_addrs.push(format!("127.0.0.1:{}", port(&ports, &format!("WEAVIATE_GRPC_{i}"))?));
            let pid_file = cluster.state_dir.join(format!("pids/weaviate-{i}.pid"));
            let pid = std::fs::read_to_string(&pid_file).with_context(|| format!("reading {}", pid_file.display()))?;
            cluster.pids.push(pid.trim().parse().with_context(|| format!("{} holds no pid", pid_file.display()))?);
        }
        Ok((cluster, started.elapsed()))
    }

    /// The server flags that store into this cluster (its layout and consistency
    /// levels are the server's defaults unless more flags say otherwise).
    pub fn server_args(&self) -> Vec<String> {
        vec![
            "--store".into(),
            "weaviate".into(),
            "--weaviate-http".into(),
            self.http_urls.join(","),
            "--weaviate-grpc".into(),
            self.grpc_addrs.join(","),
        ]
    }

    /// Where the nodes' logs are (`logs/weaviate-N.log`), for messages.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Stops every node by pid (SIGTERM, SIGKILL after the script's grace period) and
    /// removes the data and logs.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.down()?;
        std::fs::remove_dir_all(&self.state_dir).with_context(|| format!("removing {}", self.state_dir.display()))
    }

    fn down(&mut self) -> anyhow::Result<()> {
        self.stopped = true;
        program_output(self.script().arg("down"), "scripts/cluster.sh down").map(drop)
    }

    fn script(&self) -> Command {
        let mut command = Command::new("bash");
        command.arg(SCRIPT).env("EMBEDWIRE_CLUSTER_DIR", &self.state_dir);
        command
    }
}

impl Drop for WeaviateCluster {
    /// A cluster dropped without [`WeaviateCluster::stop`] (an error ended the bench)
    /// is stopped; its logs stay, for the error.
    fn drop(&mut self) {
        if !self.stopped {
            match self.down() {
                Ok(()) => eprintln!("weaviate cluster stopped; logs kept in {}/logs", self.state_dir.display()),
                Err(error) => eprintln!("{error:#}"),
            }
        }
    }
}

/// The port `NAME=PORT` in ports.env.
fn port(ports: &str, name: &str) -> anyhow::Result<u16> {
    ports
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix('=')?.trim().parse().ok())
        .with_context(|| format!("no {name} in ports.env"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_port_by_its_exact_name() {
        let ports = "WEAVIATE_HTTP_1=4001\nWEAVIATE_HTTP_10=4010\nWEAVIATE_GRPC_1=5001\n";
        assert_eq!(port(ports, "WEAVIATE_HTTP_1").unwrap(), 4001);
        assert_eq!(port(ports, "WEAVIATE_HTTP_10").unwrap(), 4010);
        assert!(port(ports, "WEAVIATE_GRPC_0").is_err());
    }
}
