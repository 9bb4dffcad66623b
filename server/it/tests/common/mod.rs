//! Starts real servers for the integration tests: in-process on 127.0.0.1:0 (with
//! access to the engine's counters) or as the real binary. Readiness is polled on
//! the health service, never slept for.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::{EmbedRequest, EmbedResponse, EmbeddingDtype};
use embedwire_server::engine::EmbeddingEngine;
use embedwire_server::{EmbedServer, ServerConfig};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

pub mod child;
pub mod collection_access;
pub mod collection_contract;
pub mod grouping_contract;
pub mod hybrid_contract;
pub mod ports;
pub mod postgres;
pub mod store_contract;
pub mod store_faults;
pub mod weaviate;

/// How long a test waits for a server to become ready before failing.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A directory under the system temp dir, unique to this process and name, removed
/// when dropped (also when the test fails).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        static CREATED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("embedwire-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    /// The path as a flag value.
    pub fn flag(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the server binary `binary` with `args`, expects it to refuse to start, and
/// returns what it printed on stderr (without colours), for the test to check.
pub async fn start_error(binary: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> String {
    let output = tokio::process::Command::new(binary).args(args).env("NO_COLOR", "1").output().await.unwrap();
    assert!(!output.status.success(), "the server started with {args:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The cache `make setup` fills: `$EMBEDWIRE_CACHE` or `~/.cache/embedwire`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("EMBEDWIRE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/embedwire"))
}

/// The `embedwire-server` binary of the workspace's release build. Cargo builds it when
/// it builds the workspace's tests (`server/tests/binary.rs` asks for it); these suites
/// are another package, so `env!("CARGO_BIN_EXE_embedwire-server")` is not set for them.
pub fn server_bin() -> PathBuf {
    embedwire_bench::server_binary::workspace_release().unwrap()
}

/// The Python of the venv `make setup` creates (onnx, onnxruntime, numpy).
pub fn venv_python() -> PathBuf {
    let python = cache_dir().join("venv/bin/python");
    assert!(python.is_file(), "{} not found: run `make setup`", python.display());
    python
}

/// Adds `--data-dir` with a fresh temp dir unless `args` name one, so servers never
/// share (or leave behind) a store. Returns the args and the dir to keep alive.
fn with_data_dir(args: &[&str]) -> (Vec<String>, Option<TempDir>) {
    let mut owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    if args.contains(&"--data-dir") {
        return (owned, None);
    }
    let dir = TempDir::new("data");
    owned.extend(["--data-dir".to_string(), dir.flag()]);
    (owned, Some(dir))
}

/// A server running inside the test process.
pub struct InProcessServer {
    pub address: String,
    pub engine: Arc<EmbeddingEngine>,
    /// The corpus, once the server is ready.
    pub corpus: Arc<std::sync::OnceLock<Arc<embedwire_server::corpus::Corpus>>>,
    _data_dir: Option<TempDir>,
    shutdown: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<embedwire_server::Result<()>>,
}

impl InProcessServer {
    /// Starts a server with `args` (flags as on the command line) and waits for SERVING.
    pub async fn start(args: &[&str]) -> Self {
        let server = Self::start_unready(args).await;
        wait_serving(&server.address).await;
        server
    }

    /// Starts a server without waiting for its backend.
    pub async fn start_unready(args: &[&str]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(listener, args)
    }

    /// Starts a server on an already bound listener.
    pub fn start_on(listener: tokio::net::TcpListener, args: &[&str]) -> Self {
        let address = format!("http://{}", listener.local_addr().unwrap());
        let (args, data_dir) = with_data_dir(args);
        let config =
            ServerConfig::parse_from(std::iter::once("embedwire-server").chain(args.iter().map(String::as_str)));
        let server = EmbedServer::new(config).expect("valid configuration");
        let engine = server.engine();
        let corpus = server.corpus();
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(listener, async move {
            let _ = stop.await;
        }));
        InProcessServer { address, engine, corpus, _data_dir: data_dir, shutdown: Some(shutdown), task }
    }

    /// Signals shutdown (the same path as SIGTERM) without waiting.
    pub fn begin_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Signals shutdown and waits for the server to stop.
    pub async fn stop(mut self) -> embedwire_server::Result<()> {
        self.begin_shutdown();
        self.task.await.expect("server task")
    }

    /// A client for this server.
    pub async fn client(&self) -> EmbedServiceClient<Channel> {
        client(&self.address).await
    }
}

/// Flags for the real model with settings tests rely on.
pub const ONNX: &[&str] = &["--backend", "onnx"];
/// Flags for the pseudo backend.
pub const PSEUDO: &[&str] = &["--backend", "pseudo"];

/// A connected EmbedService client with generous message limits.
pub async fn client(address: &str) -> EmbedServiceClient<Channel> {
    let channel = Channel::from_shared(address.to_string()).unwrap().connect().await.expect("connect");
    EmbedServiceClient::new(channel).max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20)
}

/// Polls the health service until it reports SERVING.
pub async fn wait_serving(address: &str) {
    wait_health(address, ServingStatus::Serving).await
}

/// Polls the health service until it reports `wanted` for the whole server.
pub async fn wait_health(address: &str, wanted: ServingStatus) {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if health_status(address).await == Some(wanted) {
            return;
        }
        assert!(Instant::now() < deadline, "{address} not {wanted:?} within {READY_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The server's overall health, or None when it cannot be reached.
pub async fn health_status(address: &str) -> Option<ServingStatus> {
    let channel = Channel::from_shared(address.to_string()).ok()?.connect().await.ok()?;
    let response = HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await.ok()?;
    ServingStatus::try_from(response.into_inner().status).ok()
}

/// An Embed request for `texts` with default options.
pub fn embed_request(texts: &[&str]) -> EmbedRequest {
    EmbedRequest { inputs: texts.iter().map(|t| t.to_string()).collect(), ..Default::default() }
}

/// Decoded float32 rows of a FLOAT32 response.
pub fn rows(response: &EmbedResponse) -> Vec<Vec<f32>> {
    let values = embedwire_proto::vectors::decode_rows(
        &response.embeddings,
        &response.row_scales,
        &response.values,
        response.count as usize,
        response.dim as usize,
        EmbeddingDtype::try_from(response.dtype).unwrap(),
    )
    .expect("decodable response");
    values.chunks(response.dim as usize).map(|r| r.to_vec()).collect()
}

/// Largest absolute difference between two vectors.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// One item of the reference file.
pub struct ReferenceItem {
    pub text: String,
    pub input_ids: Vec<u32>,
    pub embedding: Vec<f32>,
}

/// The sentence-transformers reference embeddings shipped in tests/data.
pub fn reference_items() -> Vec<ReferenceItem> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/all-MiniLM-L6-v2.json");
    let json: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| ReferenceItem {
            text: item["text"].as_str().unwrap().to_string(),
            input_ids: item["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect(),
            embedding: item["embedding"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect(),
        })
        .collect()
}

/// The real `embedwire-server` binary, started with `args` on 127.0.0.1:0.
pub struct ServerProcess {
    pub child: tokio::process::Child,
    pub address: String,
    pub stderr_lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    _data_dir: Option<TempDir>,
}

impl ServerProcess {
    /// Spawns the binary and reads its address from the "listening on" log line.
    pub async fn spawn(args: &[&str]) -> Self {
        let (args, data_dir) = with_data_dir(args);
        let mut child = tokio::process::Command::new(server_bin())
            .args(["--listen", "127.0.0.1:0"])
            .args(&args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info,ort=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn embedwire-server");
        let (lines_tx, mut lines_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        // The pid tells apart the lines of two servers in one test's output.
        let pid = child.id().unwrap_or_default();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("[server {pid}] {line}");
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let address = tokio::time::timeout(READY_TIMEOUT, async {
            while let Some(line) = lines_rx.recv().await {
                if let Some(address) = line.split("listening on ").nth(1) {
                    return format!("http://{}", address.trim());
                }
            }
            panic!("server exited before listening");
        })
        .await
        .expect("server did not log its address");
        ServerProcess { child, address, stderr_lines: lines_rx, _data_dir: data_dir }
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
    }
}

/// `count` distinct sentences of about `words` words.
pub fn sentences(count: usize, words: usize) -> Vec<String> {
    const VOCABULARY: [&str; 24] = [
        "vector",
        "search",
        "gateway",
        "model",
        "embedding",
        "server",
        "query",
        "document",
        "batch",
        "token",
        "latency",
        "index",
        "stream",
        "client",
        "memory",
        "engine",
        "network",
        "result",
        "score",
        "cluster",
        "filter",
        "chunk",
        "storage",
        "request",
    ];
    (0..count)
        .map(|i| {
            (0..words)
                .map(|w| VOCABULARY[(i * 7 + w * 5 + i / 24 + w * w) % VOCABULARY.len()])
                .collect::<Vec<_>>()
                .join(" ")
                + &format!(" {i}")
        })
        .collect()
}

/// Waits (at most 30 s) until the server at `address` has loaded `sessions` sessions
/// for the parts of split batches: they load after SERVING (`embedwire_batch_part_sessions`).
pub async fn wait_for_batch_part_sessions(address: &str, sessions: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let gauge = format!("embedwire_batch_part_sessions {sessions}");
    loop {
        let page = reqwest::get(format!("{address}/metrics")).await.unwrap().text().await.unwrap();
        if page.lines().any(|line| line == gauge) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the batch part sessions did not load in 30 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
