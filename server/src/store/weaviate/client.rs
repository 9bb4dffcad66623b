//! The connection to a Weaviate cluster: gRPC for every data call (rotating over the
//! nodes and skipping one that cannot be reached), HTTP/JSON for the one-time schema
//! calls and the node list. Every call is timed and counted by operation for
//! `/metrics`, and every failure becomes `Unavailable` naming the store.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use embedwire_proto::weaviate::v1 as pb;
use pb::weaviate_client::WeaviateClient;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::error::{Error, Result};
use crate::metrics::StoreMetrics;

/// How long a node that refused a connection is skipped.
const NODE_COOL_DOWN: Duration = Duration::from_secs(2);
/// Largest answer accepted from Weaviate (a page of hits with vectors).
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// One node's gRPC endpoint.
struct GrpcNode {
    address: String,
    channel: Channel,
    /// Skipped until then after a connection failure.
    down_until: Mutex<Option<Instant>>,
    /// Was missing from the cluster and has not caught up yet (see [`Connection::set_behind`]).
    behind: AtomicBool,
}

/// gRPC channels and an HTTP client to the cluster.
pub struct Connection {
    grpc: Vec<GrpcNode>,
    http_urls: Vec<String>,
    http: reqwest::Client,
    /// Where the next call starts, so calls spread over the nodes.
    next: AtomicUsize,
    metrics: &'static StoreMetrics,
}

/// A failed call's cause: whether another node might succeed.
fn node_unreachable(status: &tonic::Status) -> bool {
    matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown)
        && !status.message().contains("consistency")
}

impl Connection {
    /// Channels to every node; connections open on first use.
    pub fn new(http_urls: Vec<String>, grpc_addresses: &[String], timeout: Duration) -> Result<Self> {
        let grpc = grpc_addresses
            .iter()
            .map(|address| {
                let endpoint = Endpoint::from_shared(format!("http://{address}"))
                    .map_err(|e| Error::Config(format!("--weaviate-grpc {address:?}: {e}")))?
                    .connect_timeout(Duration::from_secs(2))
                    .timeout(timeout)
                    .tcp_nodelay(true);
                Ok(GrpcNode {
                    address: address.clone(),
                    channel: endpoint.connect_lazy(),
                    down_until: Mutex::new(None),
                    behind: AtomicBool::new(false),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(timeout)
            .build()
            .map_err(|e| Error::Config(format!("HTTP client: {e}")))?;
        Ok(Connection { grpc, http_urls, http, next: AtomicUsize::new(0), metrics: StoreMetrics::global() })
    }

    /// The gRPC addresses, as configured.
    pub fn grpc_addresses(&self) -> Vec<String> {
        self.grpc.iter().map(|node| node.address.clone()).collect()
    }

    /// How many nodes the data API reaches (the configured gRPC addresses).
    pub fn node_count(&self) -> usize {
        self.grpc.len()
    }

    /// Marks node `node` as behind the others or caught up; returns whether that
    /// changed anything. Calls go to nodes that are behind only when no other node
    /// answers: Weaviate answers a search from the coordinating node's own replicas,
    /// so a node that missed writes while it was down (at RF 3, QUORUM writes go on
    /// without it) hides those documents until async replication has repaired it.
    pub fn set_behind(&self, node: usize, behind: bool) -> bool {
        self.grpc[node].behind.swap(behind, Ordering::Relaxed) != behind
    }

    /// Runs one gRPC call at node `node` (an index into [`Connection::grpc_addresses`])
    /// only, without failing over: for answers that must come from every node.
    pub async fn call_on<T, F, Fut>(&self, node: usize, operation: &'static str, call: F) -> Result<T>
    where
        F: FnOnce(WeaviateClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let started = Instant::now();
        let node = &self.grpc[node];
        let client = WeaviateClient::new(node.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let result = call(client).await.map(tonic::Response::into_inner).map_err(|status| {
            Error::Unavailable(format!("weaviate store: {operation} failed at {}: {}", node.address, status.message()))
        });
        self.metrics.observe("weaviate", operation, started.elapsed(), result.is_ok());
        result
    }

    /// Runs one gRPC call, trying the next node when one cannot be reached. Calls
    /// are idempotent (deterministic object ids), so a retry cannot double a write.
    pub async fn call<T, F, Fut>(&self, operation: &'static str, call: F) -> Result<T>
    where
        F: Fn(WeaviateClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let started = Instant::now();
        let result = self.call_any_node(operation, call).await;
        self.metrics.observe("weaviate", operation, started.elapsed(), result.is_ok());
        result
    }

    async fn call_any_node<T, F, Fut>(&self, operation: &'static str, call: F) -> Result<T>
    where
        F: Fn(WeaviateClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let count = self.grpc.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        // Nodes in rotation order, those known to be down last (still tried: they may
        // be back) and, before them, those behind the others.
        let mut order: Vec<&GrpcNode> = (0..count).map(|i| &self.grpc[(first + i) % count]).collect();
        order.sort_by_key(|node| {
            let down = node.down_until.lock().expect("lock").is_some_and(|until| until > now);
            (down, node.behind.load(Ordering::Relaxed))
        });
        let mut last_error = String::new();
        for node in order {
            let client = WeaviateClient::new(node.channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            match call(client).await {
                Ok(response) => {
                    *node.down_until.lock().expect("lock") = None;
                    return Ok(response.into_inner());
                }
                Err(status) if node_unreachable(&status) => {
                    *node.down_until.lock().expect("lock") = Some(Instant::now() + NODE_COOL_DOWN);
                    last_error = format!("{}: {}", node.address, status.message());
                }
                Err(status) => {
                    return Err(Error::Unavailable(format!(
                        "weaviate store: {operation} failed at {}: {}",
                        node.address,
                        status.message()
                    )));
                }
            }
        }
        Err(Error::Unavailable(format!(
            "weaviate store unreachable ({operation}): no node answered; last: {last_error}"
        )))
    }

    /// GET a JSON document from the first node that answers; `Ok(None)` for 404.
    pub async fn get_json(&self, path: &str) -> Result<Option<serde_json::Value>> {
        let started = Instant::now();
        let result = self.get_json_any(path).await;
        self.metrics.observe("weaviate", get_operation(path), started.elapsed(), result.is_ok());
        result
    }

    async fn get_json_any(&self, path: &str) -> Result<Option<serde_json::Value>> {
        let mut last_error = String::new();
        // Twice round: a pooled connection to a node that restarted fails once.
        for url in self.http_urls.iter().chain(&self.http_urls) {
            match self.http.get(format!("{url}{path}")).send().await {
                Ok(response) if response.status() == reqwest::StatusCode::NOT_FOUND => return Ok(None),
                Ok(response) if response.status().is_success() => {
                    return response
                        .json()
                        .await
                        .map(Some)
                        .map_err(|e| Error::Unavailable(format!("weaviate store at {url}: GET {path}: {e}")));
                }
                Ok(response) => last_error = format!("{url}: GET {path}: HTTP {}", response.status()),
                Err(e) => last_error = format!("{url}: {e}"),
            }
        }
        Err(Error::Unavailable(format!("weaviate store unreachable: {last_error}")))
    }

    /// Whether each configured HTTP node answers its liveness check now (in
    /// `--weaviate-http` order): for when no node can list the cluster, which
    /// Weaviate fails for a while after losing a member.
    pub async fn live_nodes(&self) -> Vec<bool> {
        let checks = self.http_urls.iter().map(|url| async move {
            let check = self.http.get(format!("{url}/v1/.well-known/live")).send().await;
            check.is_ok_and(|response| response.status().is_success())
        });
        futures::future::join_all(checks).await
    }

    /// Whether each HTTP node's own copy of the schema (not its Raft leader's) has
    /// collection `name`, in `--weaviate-http` order; `None` for a node that does not
    /// answer. Nodes apply a schema change a moment apart, and a node set to read
    /// collections locally (`COLLECTION_RETRIEVAL_STRATEGY=LocalOnly`) refuses writes
    /// to one it has not applied yet.
    pub async fn collection_on_each_node(&self, name: &str) -> Vec<Option<bool>> {
        let checks = self.http_urls.iter().map(|url| async move {
            // `consistency: false` answers from the node's own schema.
            let request = self.http.get(format!("{url}/v1/schema/{name}")).header("consistency", "false");
            match request.send().await {
                Ok(response) if response.status().is_success() => Some(true),
                Ok(response) if response.status() == reqwest::StatusCode::NOT_FOUND => Some(false),
                _ => None,
            }
        });
        futures::future::join_all(checks).await
    }

    /// DELETE a resource on the first node that answers: Ok for deleted or already gone
    /// (404). An object deleted by id touches only its own shard's replicas, where a
    /// batch delete by filter asks every shard (and fails while any shard misses one).
    pub async fn delete(&self, path: &str) -> Result<()> {
        let mut last_error = String::new();
        for url in self.http_urls.iter().chain(&self.http_urls) {
            match self.http.delete(format!("{url}{path}")).send().await {
                Ok(response) if response.status().is_success() => return Ok(()),
                Ok(response) if response.status() == reqwest::StatusCode::NOT_FOUND => return Ok(()),
                Ok(response) => {
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    // Weaviate's refusal for missing replicas: the next node would say the same.
                    return Err(Error::Unavailable(format!("weaviate store: DELETE {path}: HTTP {status}: {text}")));
                }
                Err(e) => last_error = format!("{url}: {e}"),
            }
        }
        Err(Error::Unavailable(format!("weaviate store unreachable: {last_error}")))
    }

    /// POST a JSON document to the first node that answers; returns the status and body.
    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> Result<(u16, String)> {
        self.send_json(reqwest::Method::POST, path, body).await
    }

    /// PUT a JSON document (a whole resource, as changed) to the first node that
    /// answers; returns the status and body.
    pub async fn put_json(&self, path: &str, body: &serde_json::Value) -> Result<(u16, String)> {
        self.send_json(reqwest::Method::PUT, path, body).await
    }

    async fn send_json(&self, method: reqwest::Method, path: &str, body: &serde_json::Value) -> Result<(u16, String)> {
        let mut last_error = String::new();
        for url in self.http_urls.iter().chain(&self.http_urls) {
            match self.http.request(method.clone(), format!("{url}{path}")).json(body).send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let text = response.text().await.unwrap_or_default();
                    return Ok((status, text));
                }
                Err(e) => last_error = format!("{url}: {e}"),
            }
        }
        Err(Error::Unavailable(format!("weaviate store unreachable: {last_error}")))
    }
}

/// The metrics label of a GET: what kind of resource it reads, so that `/metrics`
/// tells object reads (job records) from cluster status reads (the vector queues).
fn get_operation(path: &str) -> &'static str {
    if path.starts_with("/v1/objects/") {
        "read_object"
    } else if path.starts_with("/v1/nodes") {
        "read_nodes"
    } else if path.starts_with("/v1/schema") {
        "read_schema"
    } else {
        "http_get"
    }
}
