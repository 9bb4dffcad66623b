//! A real Weaviate cluster on loopback for the `--store weaviate` tests: `weaviate-server`
//! from the cache `make setup` fills, one process per node, every port a free one.
//!
//! Everything here is blocking (std processes, HTTP/1.0 over `std::net`), because a
//! shared cluster outlives the tokio runtime of the `#[tokio::test]` that started it.
//! Calling these from an async test blocks that test's thread for a few seconds, which
//! is what a test waiting for a cluster wants anyway.
//!
//! Nodes die with the test binary although statics are never dropped: every node is
//! spawned by [`child::spawn_tied_to_process`], in its own process group.
//!
//! A killed node drops out of the others' `/v1/nodes` (it is not listed as unhealthy)
//! after a few seconds. A restarted node joins the nodes that run at that moment, on its
//! old ports and data. Clients keep pooled connections to a killed node: expect one
//! failed request per connection after a restart.
//!
//! Data and logs live under `$TMPDIR/embedwire-weaviate/<pid>-<n>/`; directories of
//! test processes that are no longer alive are removed when the next cluster starts.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::child::{self, STOP_GRACE};
use super::ports;

/// How long a test waits for nodes to become ready and the cluster to agree that every
/// node is healthy (a cold 3-node start takes about 15 s on 2 cores).
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(120);

/// The ports one node listens on, all on 127.0.0.1.
#[derive(Debug, Clone, Copy)]
struct NodePorts {
    /// REST API (`/v1/...`), also the readiness probe.
    http: u16,
    /// The public gRPC API the store talks to.
    grpc: u16,
    /// Memberlist gossip (TCP and UDP). The intra-cluster data port is `gossip + 1`:
    /// Weaviate falls back to that convention for a peer whose metadata it has not
    /// received yet, so the two are always picked together.
    gossip: u16,
    /// Raft. The internal RPC port is `raft + 1`: with `CLUSTER_IN_LOCALHOST`, Weaviate
    /// computes a peer's RPC address as its Raft port + 1, whatever the peer configured.
    raft: u16,
    /// Go's pprof listener, on by default at 6060 in every node.
    profiling: u16,
}

/// One node: what it needs to be started again the same way, and the running process.
#[derive(Debug)]
struct Node {
    name: String,
    ports: NodePorts,
    data: PathBuf,
    log: PathBuf,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

/// A Weaviate cluster of real `weaviate-server` processes on loopback.
#[derive(Debug)]
pub struct WeaviateCluster {
    /// Holds each node's data directory and log file.
    dir: PathBuf,
    /// `weaviate-server` from the cache `make setup` fills.
    binary: PathBuf,
    /// Behind a mutex so that a `&'static` shared cluster can still be faulted.
    nodes: Mutex<Vec<Node>>,
    /// Started outside the test (`make test`'s, see [`WeaviateCluster::shared_store`]):
    /// running all along, and not the test's to stop, kill or restart.
    external: bool,
}

impl WeaviateCluster {
    /// A cluster of `nodes` nodes that this test owns: started and healthy on return,
    /// killed (and its directory removed unless the test panicked) when dropped. Use it
    /// for tests that kill or restart nodes, so that they do not disturb other tests.
    pub fn start(nodes: usize) -> WeaviateCluster {
        WeaviateCluster::start_with(nodes, AsyncReplication::AsMakeCluster)
    }

    /// [`WeaviateCluster::start`] with the given async replication timing.
    pub fn start_with(nodes: usize, replication: AsyncReplication) -> WeaviateCluster {
        let logs = |cluster: &WeaviateCluster| cluster.nodes().iter().map(|node| node.log.clone()).collect();
        child::start_on_fresh_ports(
            "weaviate",
            || WeaviateCluster::on_fresh_ports(nodes, replication),
            WeaviateCluster::start_all,
            logs,
        )
    }

    /// The cluster's nodes with their data directories and environment, not started.
    fn on_fresh_ports(nodes: usize, replication: AsyncReplication) -> WeaviateCluster {
        assert!(nodes >= 1, "a cluster needs at least one node");
        let binary = super::cache_dir().join("bin/weaviate-server");
        assert!(binary.is_file(), "{} not found: run `make setup`", binary.display());
        let dir = child::fresh_dir("weaviate");
        let ports = pick_ports(nodes);
        let raft_join =
            ports.iter().enumerate().map(|(i, p)| format!("weaviate-{i}:{}", p.raft)).collect::<Vec<_>>().join(",");
        let nodes = (0..nodes)
            .map(|i| {
                let name = format!("weaviate-{i}");
                let data = dir.join(&name);
                std::fs::create_dir_all(&data).unwrap();
                let mut env = node_env(&name, &data, ports[i], &raft_join, nodes);
                if replication == AsyncReplication::AsMakeCluster {
                    env.extend(AS_MAKE_CLUSTER.map(|(key, value)| (key.to_string(), value.to_string())));
                }
                Node { log: dir.join(format!("{name}.log")), name, ports: ports[i], data, env, child: None }
            })
            .collect();
        WeaviateCluster { dir, binary, nodes: Mutex::new(nodes), external: false }
    }

    /// The cluster that `make test` started for the whole run (`scripts/test-clusters.sh`,
    /// whose state directory `EMBEDWIRE_TEST_WEAVIATE` names), if it did.
    fn external() -> Option<WeaviateCluster> {
        let (ports, dir) = child::external_cluster("EMBEDWIRE_TEST_WEAVIATE")?;
        let count = (0..).take_while(|i| ports.contains_key(&format!("WEAVIATE_HTTP_{i}"))).count();
        let port = |name: &str, i: usize| ports[&format!("WEAVIATE_{name}_{i}")];
        let nodes = (0..count)
            .map(|i| Node {
                name: format!("weaviate-{i}"),
                ports: NodePorts {
                    http: port("HTTP", i),
                    grpc: port("GRPC", i),
                    gossip: port("GOSSIP", i),
                    raft: port("RAFT", i),
                    profiling: port("PROFILING", i),
                },
                data: dir.join(format!("data/weaviate-{i}")),
                log: dir.join(format!("logs/weaviate-{i}.log")),
                env: Vec::new(),
                child: None,
            })
            .collect();
        let binary = super::cache_dir().join("bin/weaviate-server");
        Some(WeaviateCluster { dir, binary, nodes: Mutex::new(nodes), external: true })
    }

    /// For tests that only read and write (each in its own collection): the cluster of
    /// `nodes` nodes that `make test` started once for the whole run, which every such
    /// test of every process shares, else [`WeaviateCluster::shared`]. Under nextest each
    /// test is a process of its own, so without it each would start a cluster.
    pub fn shared_store(nodes: usize) -> &'static WeaviateCluster {
        static EXTERNAL: std::sync::OnceLock<Option<WeaviateCluster>> = std::sync::OnceLock::new();
        match EXTERNAL.get_or_init(WeaviateCluster::external) {
            Some(cluster) if cluster.nodes().len() == nodes => cluster,
            _ => WeaviateCluster::shared(nodes),
        }
    }

    /// A cluster of `nodes` nodes shared by every test of this binary that asks for that
    /// size, started by the first one. Do not kill or restart its nodes: other tests
    /// are using it at the same time (use [`WeaviateCluster::start`] for that).
    pub fn shared(nodes: usize) -> &'static WeaviateCluster {
        static SHARED: Mutex<Vec<(usize, &'static WeaviateCluster)>> = Mutex::new(Vec::new());
        // A start that panicked poisons the lock; the next caller simply tries again.
        let mut shared = SHARED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, cluster)) = shared.iter().find(|(size, _)| *size == nodes) {
            return cluster;
        }
        let cluster: &'static WeaviateCluster = Box::leak(Box::new(WeaviateCluster::start(nodes)));
        shared.push((nodes, cluster));
        cluster
    }

    /// Flags of a server on `collection` of this cluster, with every node's addresses
    /// (the REST URLs, then the gRPC addresses, as the 4th and 6th flag).
    pub fn server_flags(&self, collection: &str) -> Vec<String> {
        let (http, grpc) = (self.http_urls().join(","), self.grpc_addrs().join(","));
        ["--store", "weaviate", "--weaviate-http", &http, "--weaviate-grpc", &grpc, "--collection", collection]
            .map(String::from)
            .to_vec()
    }

    /// Each node's REST base URL, `http://127.0.0.1:PORT`, in node order.
    pub fn http_urls(&self) -> Vec<String> {
        self.nodes().iter().map(|n| format!("http://127.0.0.1:{}", n.ports.http)).collect()
    }

    /// Each node's public gRPC address, `127.0.0.1:PORT`, in node order.
    pub fn grpc_addrs(&self) -> Vec<String> {
        self.nodes().iter().map(|n| format!("127.0.0.1:{}", n.ports.grpc)).collect()
    }

    /// Each node's name as Weaviate reports it (`weaviate-0`, ...), in node order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes().iter().map(|n| n.name.clone()).collect()
    }

    /// The directory holding every node's data directory and `weaviate-N.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills node `i` with SIGKILL (no shutdown, like a crash) and reaps it.
    pub fn kill_node(&self, i: usize) {
        assert!(!self.external, "the cluster make test shares ({}) is not a test's to fault", self.dir.display());
        let mut nodes = self.nodes();
        if let Some(mut child) = nodes[i].child.take() {
            kill_group(&mut child);
        }
    }

    /// Starts node `i` again with the same environment, ports and data (killing it
    /// first if it still runs), then waits until it is ready and every node reports the
    /// whole cluster healthy.
    pub fn restart_node(&self, i: usize) {
        self.kill_node(i);
        self.spawn_node(i);
        self.wait_ready(i);
        self.wait_all_healthy();
    }

    /// Stops every node with SIGTERM (SIGKILL after a grace period) and waits for them
    /// to exit. Their data stays for [`WeaviateCluster::start_all`].
    pub fn stop_all(&self) {
        assert!(!self.external, "the cluster make test shares ({}) is not a test's to stop", self.dir.display());
        let mut nodes = self.nodes();
        for node in nodes.iter_mut() {
            if let Some(child) = &mut node.child {
                child::signal_group(child, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        for node in nodes.iter_mut() {
            let Some(mut child) = node.child.take() else { continue };
            child::wait_exit_or_kill(&mut child, &node.name, deadline, kill_group);
        }
    }

    /// Starts every node that is not running (with the data it had), then waits until
    /// all are ready and report the whole cluster healthy.
    pub fn start_all(&self) {
        let count = self.nodes().len();
        if (0..count).all(|i| !self.is_running(i)) {
            self.spawn_node(0);
            let gossip = self.nodes()[0].ports.gossip;
            self.wait_for("weaviate-0 to listen for gossip", || {
                assert!(self.is_running(0), "weaviate-0 exited; see {}", self.nodes()[0].log.display());
                TcpStream::connect((Ipv4Addr::LOCALHOST, gossip)).is_ok()
            });
        }
        for i in 0..count {
            if !self.is_running(i) {
                self.spawn_node(i);
            }
        }
        for i in 0..count {
            self.wait_ready(i);
        }
        self.wait_all_healthy();
    }

    /// Waits until every running node answers `/v1/nodes` with every node of the
    /// cluster `HEALTHY` and the cluster has settled on a Raft leader (see
    /// [`WeaviateCluster::raft_settled`]).
    pub fn wait_all_healthy(&self) {
        let names = self.node_names();
        let running: Vec<usize> = (0..names.len()).filter(|&i| self.is_running(i)).collect();
        self.wait_for("every node to report the whole cluster HEALTHY with one Raft leader", || {
            running.iter().all(|&via| {
                let statuses = self.node_statuses(via);
                names.iter().all(|name| statuses.iter().any(|(n, s)| n == name && s == "HEALTHY"))
                    && self.raft_settled(via)
            })
        });
    }

    /// Whether node `via`'s `/v1/cluster/statistics` shows every node ready, with the same
    /// applied Raft index (`synchronized`) and the same leader. Ready and `HEALTHY` come
    /// before that after a restart on old data, and a schema change sent in between can
    /// fail with "grpc: the client connection is closing" (the leader is still changing).
    pub fn raft_settled(&self, via: usize) -> bool {
        let count = self.nodes().len();
        let port = self.nodes()[via].ports.http;
        let Some((200, body)) = http_get(port, "/v1/cluster/statistics") else { return false };
        let Ok(json) = serde_json::from_str::<Value>(&body) else { return false };
        let stats = json["statistics"].as_array().map(Vec::as_slice).unwrap_or_default();
        let leader = stats.first().and_then(|s| s["leaderId"].as_str()).unwrap_or_default();
        json["synchronized"] == true
            && stats.len() == count
            && !leader.is_empty()
            && stats.iter().all(|s| s["leaderId"] == leader && s["ready"] == true)
    }

    /// Waits until node `via` no longer reports node `i` as `HEALTHY` (absent or any
    /// other status), e.g. after [`WeaviateCluster::kill_node`].
    pub fn wait_node_unhealthy(&self, i: usize, via: usize) {
        let name = self.node_names()[i].clone();
        self.wait_for(&format!("weaviate-{via} to see {name} down"), || {
            let statuses = self.node_statuses(via);
            !statuses.is_empty() && !statuses.iter().any(|(n, s)| *n == name && s == "HEALTHY")
        });
    }

    /// `(name, status)` of every node as node `via` reports them on `/v1/nodes`;
    /// empty when `via` does not answer.
    pub fn node_statuses(&self, via: usize) -> Vec<(String, String)> {
        let port = self.nodes()[via].ports.http;
        let Some((200, body)) = http_get(port, "/v1/nodes") else { return Vec::new() };
        let Ok(json) = serde_json::from_str::<Value>(&body) else { return Vec::new() };
        json["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                (
                    n["name"].as_str().unwrap_or_default().to_string(),
                    n["status"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// Whether node `i`'s process runs (it may not be ready yet).
    pub fn is_running(&self, i: usize) -> bool {
        self.external || child::is_running(&mut self.nodes()[i].child)
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, Vec<Node>> {
        self.nodes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts node `i` with `CLUSTER_JOIN` naming the gossip ports of the nodes that run
    /// now: a node exits at once when no join address answers, and a restarted node
    /// that joined nobody would stay alone (its peers stopped probing it when it died).
    /// With none running it starts alone, and the caller waits for its gossip port
    /// before starting the others.
    fn spawn_node(&self, i: usize) {
        let mut nodes = self.nodes();
        let join: Vec<String> = nodes
            .iter_mut()
            .enumerate()
            .filter_map(|(j, n)| (j != i && child::is_running(&mut n.child)).then_some(n))
            .map(|n| format!("127.0.0.1:{}", n.ports.gossip))
            .collect();
        let node = &mut nodes[i];
        let mut command = Command::new(&self.binary);
        command
            .args(["--scheme", "http", "--host", "127.0.0.1", "--port", &node.ports.http.to_string()])
            .env_clear()
            .envs(std::env::vars_os().filter(|(k, _)| k == "PATH" || k == "HOME" || k == "TMPDIR"))
            .envs(node.env.iter().map(|(k, v)| (k, v)))
            .envs((!join.is_empty()).then(|| ("CLUSTER_JOIN", join.join(","))))
            .current_dir(&node.data)
            .stdin(Stdio::null());
        child::log_to(&mut command, &node.log);
        node.child = Some(child::spawn_tied_to_process(command));
    }

    fn wait_ready(&self, i: usize) {
        let port = self.nodes()[i].ports.http;
        self.wait_for(&format!("weaviate-{i} to be ready"), || {
            assert!(self.is_running(i), "weaviate-{i} exited; see {}", self.nodes()[i].log.display());
            matches!(http_get(port, "/v1/.well-known/ready"), Some((200, _)))
        });
    }

    /// Polls `done` every 100 ms; after [`CLUSTER_TIMEOUT`] panics with where the logs are.
    fn wait_for(&self, what: &str, done: impl FnMut() -> bool) {
        let logs = || format!("; node logs: {}/weaviate-*.log", self.dir.display());
        child::poll_until(what, CLUSTER_TIMEOUT, logs, done);
    }
}

impl Drop for WeaviateCluster {
    fn drop(&mut self) {
        if self.external {
            return;
        }
        let count = self.nodes().len();
        for i in 0..count {
            self.kill_node(i);
        }
        child::remove_dir_unless_panicking(&self.dir, "weaviate cluster");
    }
}

/// When a node back from a crash gets the writes it missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncReplication {
    /// As `make cluster` runs it: about 10 s after its return. The servers route around
    /// a node until it has caught up either way; Weaviate's longer window only made the
    /// fault tests wait (about 25 s in each of three).
    AsMakeCluster,
    /// Weaviate's defaults (a 30 s propagation delay, checked every 30 s): about 35 s,
    /// for a test that needs a node to stay behind for a while.
    WeaviateDefaults,
}

/// The async replication settings of `make cluster` (scripts/cluster.sh says why).
const AS_MAKE_CLUSTER: [(&str, &str); 2] =
    [("ASYNC_REPLICATION_PROPAGATION_DELAY", "5s"), ("ASYNC_REPLICATION_FREQUENCY", "5s")];

/// The environment of one node (see the port notes on [`NodePorts`]).
/// `CLUSTER_JOIN` is not part of it: see [`WeaviateCluster::spawn_node`].
fn node_env(name: &str, data: &Path, ports: NodePorts, raft_join: &str, nodes: usize) -> Vec<(String, String)> {
    [
        ("AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED", "true".to_string()),
        // As `make cluster` runs it (scripts/cluster.sh says why): writes read the
        // collection from the node's own schema, not from the Raft leader, so losing
        // the leader node does not stall them until an election.
        ("COLLECTION_RETRIEVAL_STRATEGY", "LocalOnly".to_string()),
        // As `make cluster` runs it (scripts/cluster.sh says why): vectors are queued on
        // disk before they are indexed, and the servers wait for the queues before ending
        // a job. The repair `make cluster` asks of a restarted node is not made here: no
        // fault test searches by text across a node's crash.
        ("ASYNC_INDEXING", "true".to_string()),
        ("QUEUE_SCHEDULER_INTERVAL", "100ms".to_string()),
        ("ASYNC_INDEXING_STALE_TIMEOUT", "10ms".to_string()),
        // As `make cluster` runs it (scripts/cluster.sh says why): a small repair hash
        // tree per shard replica. GraphQL stays on here, unlike there: the fault tests
        // count one node's own replicas through a GraphQL Aggregate.
        ("ASYNC_REPLICATION_HASHTREE_HEIGHT", "10".to_string()),
        ("DEFAULT_VECTORIZER_MODULE", "none".to_string()),
        ("DISABLE_TELEMETRY", "true".to_string()),
        ("PERSISTENCE_DATA_PATH", data.display().to_string()),
        ("CLUSTER_HOSTNAME", name.to_string()),
        ("CLUSTER_IN_LOCALHOST", "true".to_string()),
        // Without it a node may advertise an IPv6 address and die on "too many colons".
        ("CLUSTER_ADVERTISE_ADDR", "127.0.0.1".to_string()),
        ("CLUSTER_GOSSIP_BIND_PORT", ports.gossip.to_string()),
        ("CLUSTER_DATA_BIND_PORT", (ports.gossip + 1).to_string()),
        ("RAFT_PORT", ports.raft.to_string()),
        ("RAFT_INTERNAL_RPC_PORT", (ports.raft + 1).to_string()),
        ("RAFT_JOIN", raft_join.to_string()),
        ("RAFT_BOOTSTRAP_EXPECT", nodes.to_string()),
        ("GRPC_PORT", ports.grpc.to_string()),
        ("GO_PROFILING_PORT", ports.profiling.to_string()),
        ("LOG_LEVEL", "info".to_string()),
        ("LOG_FORMAT", "text".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Free loopback ports for `nodes` nodes, all distinct, with `gossip + 1` and `raft + 1`
/// free as well. Every socket is held until all are picked, then released.
fn pick_ports(nodes: usize) -> Vec<NodePorts> {
    let mut held: Vec<Box<dyn std::any::Any>> = Vec::new();
    let single = |held: &mut Vec<Box<dyn std::any::Any>>| loop {
        let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, ports::candidate())) else { continue };
        let port = listener.local_addr().unwrap().port();
        held.push(Box::new(listener));
        return port;
    };
    // A port whose successor is free too (gossip also needs UDP on the first).
    let pair = |held: &mut Vec<Box<dyn std::any::Any>>, udp: bool| loop {
        let Ok(first) = TcpListener::bind((Ipv4Addr::LOCALHOST, ports::candidate())) else { continue };
        let port = first.local_addr().unwrap().port();
        if port == u16::MAX {
            continue;
        }
        let Ok(second) = TcpListener::bind((Ipv4Addr::LOCALHOST, port + 1)) else { continue };
        if udp {
            let Ok(socket) = UdpSocket::bind((Ipv4Addr::LOCALHOST, port)) else { continue };
            held.push(Box::new(socket));
        }
        held.push(Box::new(first));
        held.push(Box::new(second));
        return port;
    };
    (0..nodes)
        .map(|_| NodePorts {
            http: single(&mut held),
            grpc: single(&mut held),
            gossip: pair(&mut held, true),
            raft: pair(&mut held, false),
            profiling: single(&mut held),
        })
        .collect()
}

/// SIGKILL to a node's whole process group, then reaps the node.
fn kill_group(child: &mut Child) {
    child::signal_group(child, libc::SIGKILL);
    let _ = child.wait();
}

/// A plain HTTP/1.0 GET on 127.0.0.1:`port` (no chunked replies, the server closes the
/// connection): `(status, body)`, or `None` when the node does not answer.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let timeout = Duration::from_secs(2);
    let mut stream = TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}
