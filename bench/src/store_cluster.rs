//! A store cluster on loopback to measure against (Weaviate of N nodes, or a PostgreSQL primary with a streaming
//! replica), started by `scripts/cluster.sh up --store-only` in a state directory of its own, so ports, readiness and
//! environment are the script's alone; addresses and pids are read back from that directory. `cluster.sh down` stops
//! it, also when it is dropped on an error. The processes run detached (`setsid`), so after a SIGKILL of the bench
//! `EMBEDWIRE_CLUSTER_DIR=<the printed dir> scripts/cluster.sh down` stops them.
//!
//! [`StoreCluster::start_split`] starts the whole split deployment instead (the store, two servers on it and
//! embedwire-gateway in front; with [`StoreKind::Embedded`] no store, each server its own index), whose processes
//! [`StoreCluster::kill`] and [`StoreCluster::restart`] crash and bring back by name, on their ports and data.

use std::{
    ffi::OsString,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context;

use crate::child_process::{fresh_dir, program_output};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/cluster.sh");

/// Weaviate nodes of a scenario's `--store weaviate`: with the script's replication factor of 2, every shard keeps a
/// copy while one node is down.
pub const WEAVIATE_NODES: usize = 3;

/// A scenario's `--store`: where its servers keep documents and vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Store {
    /// Each server its own embedded index.
    Embedded,
    /// A 3-node Weaviate cluster.
    Weaviate,
    /// A PostgreSQL primary and a streaming replica the servers read from.
    Postgres,
}

impl Store {
    pub fn kind(self) -> StoreKind {
        match self {
            Store::Embedded => StoreKind::Embedded,
            Store::Weaviate => StoreKind::Weaviate(WEAVIATE_NODES),
            Store::Postgres => StoreKind::Postgres,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Store::Embedded => "embedded",
            Store::Weaviate => "weaviate",
            Store::Postgres => "postgres",
        }
    }
}

/// Which store to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// A Weaviate cluster of this many nodes.
    Weaviate(usize),
    /// A PostgreSQL primary with one streaming replica (pgvector).
    Postgres,
    /// No store process: each server keeps its own index in its data dir (split deployments only).
    Embedded,
}

/// The binaries and environment of the servers and gateway of a split deployment.
#[derive(Debug, Clone)]
pub struct SplitBinaries {
    pub server: PathBuf,
    pub gateway: PathBuf,
    /// Environment of the servers (their flags' env twins: model files, threads).
    pub server_env: Vec<(String, OsString)>,
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
    /// The script's ports.env.
    ports: String,
    /// A split deployment's binaries (the script needs them again to restart a server).
    split: Option<SplitBinaries>,
}

impl StoreCluster {
    /// Starts the store (free loopback ports, empty data) and waits until it is healthy; also returns how long it took.
    pub fn start(kind: StoreKind) -> anyhow::Result<(Self, Duration)> {
        Self::up(kind, None)
    }

    /// Starts the split deployment of `cluster.sh up`: the store, two servers on it and the gateway in front, each
    /// ready; also returns how long it took.
    pub fn start_split(kind: StoreKind, binaries: SplitBinaries) -> anyhow::Result<(Self, Duration)> {
        Self::up(kind, Some(binaries))
    }

    fn up(kind: StoreKind, split: Option<SplitBinaries>) -> anyhow::Result<(Self, Duration)> {
        let (state_dir, started) = (fresh_dir("store-cluster"), Instant::now());
        let mut cluster = StoreCluster {
            kind,
            state_dir,
            server_args: Vec::new(),
            pids: Vec::new(),
            stopped: false,
            ports: String::new(),
            split,
        };
        // From here on, drop runs `down` whatever happens.
        let store = match kind {
            StoreKind::Weaviate(nodes) => {
                anyhow::ensure!(nodes >= 1, "a Weaviate cluster needs at least one node");
                vec!["--nodes".to_string(), nodes.to_string()]
            }
            StoreKind::Postgres => vec!["--store".into(), "postgres".into()],
            StoreKind::Embedded => {
                anyhow::ensure!(cluster.split.is_some(), "the embedded store runs inside the servers: no cluster");
                vec!["--store".into(), "embedded".into()]
            }
        };
        let logs = format!("scripts/cluster.sh up (logs in {}/logs)", cluster.state_dir.display());
        let only = cluster.split.is_none().then_some("--store-only");
        program_output(cluster.script().arg("up").args(only).args(store), &logs)?;
        cluster.ports = std::fs::read_to_string(cluster.state_dir.join("ports.env")).context("reading ports.env")?;
        let ports = cluster.ports.clone();
        let port = |name: &str| port(&ports, name);
        let (args, names): (Vec<String>, Vec<String>) = match kind {
            StoreKind::Weaviate(nodes) => {
                let (mut http, mut grpc) = (Vec::new(), Vec::new());
                for i in 0..nodes {
                    http.push(format!("http://127.0.0.1:{}", port(&format!("WEAVIATE_HTTP_{i}"))?));
                    grpc.push(format!("127.0.0.1:{}", port(&format!("WEAVIATE_GRPC_{i}"))?));
                }
                let (http, grpc) = (http.join(","), grpc.join(","));
                let args =
                    ["--store", "weaviate", "--weaviate-http", &http, "--weaviate-grpc", &grpc].map(String::from);
                (args.to_vec(), (0..nodes).map(|i| format!("weaviate-{i}")).collect())
            }
            StoreKind::Postgres => {
                let url = |name| anyhow::Ok(format!("postgres://postgres@127.0.0.1:{}/embedwire", port(name)?));
                let (primary, replica) = (url("POSTGRES_PRIMARY_PORT")?, url("POSTGRES_REPLICA_PORT")?);
                let args = ["--store", "postgres", "--postgres-url", &primary, "--postgres-read-url", &replica];
                (args.map(String::from).to_vec(), vec!["postgres-primary".into(), "postgres-replica".into()])
            }
            StoreKind::Embedded => (vec!["--store".into(), "embedded".into()], Vec::new()),
        };
        cluster.server_args = args;
        for name in names {
            let pid = cluster.pid_of(&name)?;
            cluster.pids.push(pid);
        }
        Ok((cluster, started.elapsed()))
    }

    /// The store's processes by name, as the script calls them (`weaviate-0`, `postgres-replica`; none embedded).
    pub fn store_processes(&self) -> Vec<String> {
        match self.kind {
            StoreKind::Weaviate(nodes) => (0..nodes).map(|i| format!("weaviate-{i}")).collect(),
            StoreKind::Postgres => vec!["postgres-primary".into(), "postgres-replica".into()],
            StoreKind::Embedded => Vec::new(),
        }
    }

    /// A split deployment's servers: their names (`server-0`, ...) and gRPC addresses.
    pub fn servers(&self) -> anyhow::Result<Vec<(String, SocketAddr)>> {
        let count = self.ports.lines().filter(|line| line.starts_with("SERVER_PORT_")).count();
        anyhow::ensure!(self.split.is_some() && count > 0, "no servers: the cluster runs its store only");
        (0..count)
            .map(|i| Ok((format!("server-{i}"), loopback(port(&self.ports, &format!("SERVER_PORT_{i}"))?))))
            .collect()
    }

    /// A split deployment's gateway (HTTP).
    pub fn gateway(&self) -> anyhow::Result<SocketAddr> {
        anyhow::ensure!(self.split.is_some(), "no gateway: the cluster runs its store only");
        Ok(loopback(port(&self.ports, "GATEWAY_PORT")?))
    }

    /// The pid the script recorded for process `name`.
    pub fn pid_of(&self, name: &str) -> anyhow::Result<u32> {
        let pid_file = self.state_dir.join(format!("pids/{name}.pid"));
        let pid = std::fs::read_to_string(&pid_file).with_context(|| format!("reading {}", pid_file.display()))?;
        pid.trim().parse().with_context(|| format!("{} holds no pid", pid_file.display()))
    }

    /// SIGKILLs process `name` (a crash: no shutdown of any kind) and returns its pid.
    pub fn kill(&self, name: &str) -> anyhow::Result<u32> {
        let pid = self.pid_of(name)?;
        program_output(std::process::Command::new("kill").args(["-KILL", &pid.to_string()]), name)?;
        Ok(pid)
    }

    /// `cluster.sh restart NAME`: process `name` (killed, or still running: stopped first) starts again on its ports
    /// and data; returns once it is ready, and how long that took.
    pub fn restart(&self, name: &str) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let hint = format!("scripts/cluster.sh restart {name} (logs in {}/logs)", self.state_dir.display());
        program_output(self.script().args(["restart", name]), &hint)?;
        Ok(started.elapsed())
    }

    /// The server flags that store into this cluster (Weaviate's layout and consistency
    /// levels are the server's defaults unless more flags say otherwise).
    pub fn server_args(&self) -> Vec<String> {
        self.server_args.clone()
    }

    /// The store's data on disk (PostgreSQL's, as root, through the script's link).
    pub fn data_dir(&self) -> PathBuf {
        match self.kind {
            StoreKind::Weaviate(_) | StoreKind::Embedded => self.state_dir.join("data"),
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
        if let Some(split) = &self.split {
            command
                .env("EMBEDWIRE_CLUSTER_SERVER_BIN", &split.server)
                .env("EMBEDWIRE_CLUSTER_GATEWAY_BIN", &split.gateway);
            command.envs(split.server_env.iter().map(|(name, value)| (name, value)));
        }
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

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
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
