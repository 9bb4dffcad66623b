//! A store cluster on loopback to measure against (Weaviate of N nodes, or a PostgreSQL primary with a streaming
//! replica), started by `scripts/cluster.sh up --store-only` in a state directory of its own, so ports, readiness and
//! environment are the script's alone; addresses and pids are read back from that directory. `cluster.sh down` stops
//! it, also when it is dropped on an error. The processes run detached (`setsid`), so after a SIGKILL of the bench
//! `EMBEDWIRE_CLUSTER_DIR=<the printed dir> scripts/cluster.sh down` stops them.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context;

use crate::child_process::{fresh_dir, program_output};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/cluster.sh");

/// Which store to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// A Weaviate cluster of this many nodes.
    Weaviate(usize),
    /// A PostgreSQL primary with one streaming replica (pgvector).
    Postgres,
}

/// A running store cluster.
pub struct StoreCluster {
    pub kind: StoreKind,
    /// The script's state directory: ports.env, pids/, logs/, data/.
    state_dir: PathBuf,
    server_args: Vec<String>,
    /// The store's processes (Weaviate nodes; PostgreSQL's postmasters, parents of its backends), for CPU and memory.
    pub pids: Vec<u32>,
    /// Set once `cluster.sh down` has run, so that drop does not run it again.
    stopped: bool,
}

impl StoreCluster {
    /// Starts the store (free loopback ports, empty data) and waits until it is healthy; also returns how long it took.
    pub fn start(kind: StoreKind) -> anyhow::Result<(Self, Duration)> {
        let (state_dir, started) = (fresh_dir("store-cluster"), Instant::now());
        let mut cluster = StoreCluster { kind, state_dir, server_args: Vec::new(), pids: Vec::new(), stopped: false };
        // From here on, drop runs `down` whatever happens.
        let store = match kind {
            StoreKind::Weaviate(nodes) => {
                anyhow::ensure!(nodes >= 1, "a Weaviate cluster needs at least one node");
                ["--nodes".to_string(), nodes.to_string()]
            }
            StoreKind::Postgres => ["--store".into(), "postgres".into()],
        };
        let logs = format!("scripts/cluster.sh up (logs in {}/logs)", cluster.state_dir.display());
        program_output(cluster.script().args(["up", "--store-only"]).args(store), &logs)?;
        let ports = std::fs::read_to_string(cluster.state_dir.join("ports.env")).context("reading ports.env")?;
        let port = |name: &str| port(&ports, name);
        let (args, names): ([String; 6], Vec<String>) = match kind {
            StoreKind::Weaviate(nodes) => {
                let (mut http, mut grpc) = (Vec::new(), Vec::new());
                for i in 0..nodes {
                    http.push(format!("http://127.0.0.1:{}", port(&format!("WEAVIATE_HTTP_{i}"))?));
                    grpc.push(format!("127.0.0.1:{}", port(&format!("WEAVIATE_GRPC_{i}"))?));
                }
                let (http, grpc) = (http.join(","), grpc.join(","));
                let args =
                    ["--store", "weaviate", "--weaviate-http", &http, "--weaviate-grpc", &grpc].map(String::from);
                (args, (0..nodes).map(|i| format!("weaviate-{i}")).collect())
            }
            StoreKind::Postgres => {
                let url = |name| anyhow::Ok(format!("postgres://postgres@127.0.0.1:{}/embedwire", port(name)?));
                let (primary, replica) = (url("POSTGRES_PRIMARY_PORT")?, url("POSTGRES_REPLICA_PORT")?);
                let args = ["--store", "postgres", "--postgres-url", &primary, "--postgres-read-url", &replica];
                (args.map(String::from), vec!["postgres-primary".into(), "postgres-replica".into()])
            }
        };
        cluster.server_args = args.to_vec();
        for name in names {
            let pid_file = cluster.state_dir.join(format!("pids/{name}.pid"));
            let pid = std::fs::read_to_string(&pid_file).with_context(|| format!("reading {}", pid_file.display()))?;
            cluster.pids.push(pid.trim().parse().with_context(|| format!("{} holds no pid", pid_file.display()))?);
        }
        Ok((cluster, started.elapsed()))
    }

    /// The server flags that store into this cluster (Weaviate's layout and consistency
    /// levels are the server's defaults unless more flags say otherwise).
    pub fn server_args(&self) -> Vec<String> {
        self.server_args.clone()
    }

    /// The store's data on disk (PostgreSQL's, as root, through the script's link).
    pub fn data_dir(&self) -> PathBuf {
        match self.kind {
            StoreKind::Weaviate(_) => self.state_dir.join("data"),
            StoreKind::Postgres => self.state_dir.join("data/postgres/primary"),
        }
    }

    /// Where the store's logs are (`logs/<process>.log`).
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Stops every process by pid (the script's signals, SIGKILL after its grace period) and removes the data and logs.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.down()?;
        // As root, PostgreSQL's data lives outside the state dir, behind a link.
        if let Ok(data) = std::fs::canonicalize(self.state_dir.join("data/postgres")) {
            std::fs::remove_dir_all(&data).with_context(|| format!("removing {}", data.display()))?;
        }
        std::fs::remove_dir_all(&self.state_dir).with_context(|| format!("removing {}", self.state_dir.display()))
    }

    fn down(&mut self) -> anyhow::Result<()> {
        self.stopped = true;
        program_output(self.script().arg("down"), "scripts/cluster.sh down").map(drop)
    }

    fn script(&self) -> std::process::Command {
        let mut command = std::process::Command::new("bash");
        command.arg(SCRIPT).env("EMBEDWIRE_CLUSTER_DIR", &self.state_dir);
        command
    }
}

impl Drop for StoreCluster {
    /// A cluster dropped without [`StoreCluster::stop`] (an error ended the bench) is stopped; its logs stay for it.
    fn drop(&mut self) {
        if !self.stopped {
            match self.down() {
                Ok(()) => eprintln!("store cluster stopped; logs kept in {}/logs", self.state_dir.display()),
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
