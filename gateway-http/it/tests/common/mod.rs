//! Shared by the HTTP tests: real embedwire-server processes (and the standalone
//! gateway) on 127.0.0.1:0, and a reqwest client.

#![allow(dead_code)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The release build of embedwire-server (`cargo test --release --workspace` builds it).
pub fn server_binary() -> PathBuf {
    embedwire_bench::server_binary::workspace_release().unwrap()
}

/// The release build of embedwire-gateway, beside the server's (the gateway's own
/// `tests/binary.rs` is what makes `cargo test` build it: these tests are another
/// package, built without optimization, see its Cargo.toml).
pub fn gateway_binary() -> PathBuf {
    embedwire_bench::server_binary::gateway_beside(&server_binary()).unwrap()
}

/// The Python of the project's venv (scripts/setup-model.sh and setup-python-dev.sh
/// install it with the SDKs the compatibility tests drive).
pub fn venv_python() -> PathBuf {
    let cache = std::env::var_os("EMBEDWIRE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/embedwire"));
    cache.join("venv/bin/python")
}

/// A running server with its HTTP base URL.
pub struct Server {
    pub process: ServerProcess,
    pub url: String,
}

/// Starts a server with `args` after `--listen 127.0.0.1:0 --data-dir <fresh>`.
pub async fn start_server(args: &[&str]) -> Server {
    let command = ServerCommand { binary: server_binary(), args: args.iter().map(OsString::from).collect() };
    let (process, _) = ServerProcess::start(&command).await.expect("server starts");
    let url = format!("http://{}", process.address);
    Server { process, url }
}

/// A pseudo-backend server: the transport without the model's cost.
pub async fn pseudo_server() -> Server {
    start_server(&["--backend", "pseudo"]).await
}

/// A server that can be killed and started again on the same address and data
/// directory, as an operator restarts one: the gateway knows its upstreams by
/// address, and the embedded index is kept on disk. (`ServerProcess` starts each
/// server on a new port with a new directory, so it cannot stand for a failback.)
pub struct RestartableServer {
    child: Option<Child>,
    data_dir: PathBuf,
    args: Vec<String>,
    /// The address it listens on, fixed by the first start.
    pub address: String,
    pub url: String,
}

impl RestartableServer {
    /// Starts it on a free port with a fresh data directory and `args`.
    pub async fn start(args: &[&str]) -> RestartableServer {
        let data_dir = embedwire_bench::server_process::fresh_data_dir();
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        let (child, address) = Self::spawn(&data_dir, "127.0.0.1:0", &args).await;
        let url = format!("http://{address}");
        RestartableServer { child: Some(child), data_dir, args, address, url }
    }

    /// SIGKILL, and waits for it to exit.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.start_kill().expect("kill the server");
            child.wait().await.expect("the server exits");
        }
    }

    /// Starts it again on its address, with its data directory.
    pub async fn restart(&mut self) {
        self.kill().await;
        let (child, address) = Self::spawn(&self.data_dir, &self.address, &self.args).await;
        assert_eq!(address, self.address, "restarted on its old address");
        self.child = Some(child);
    }

    /// Spawns the server on `listen`; returns it and its address once `/readyz` is 200.
    async fn spawn(data_dir: &std::path::Path, listen: &str, args: &[String]) -> (Child, String) {
        let mut child = Command::new(server_binary())
            .args(["--listen", listen])
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .env("RUST_LOG", "info,ort=warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the server starts");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let address = tokio::time::timeout(Duration::from_secs(60), async {
            let mut log = Vec::new();
            while let Some(line) = lines.next_line().await.expect("server log") {
                if let Some(address) = line.split("listening on ").nth(1) {
                    return address.split_whitespace().next().unwrap_or_default().to_string();
                }
                log.push(line);
            }
            panic!("the server exited before listening:\n{}", log.join("\n"));
        })
        .await
        .expect("the server listens within 60 s");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = http().get(format!("http://{address}/readyz")).send().await;
            if ready.is_ok_and(|response| response.status().is_success()) {
                return (child, address);
            }
            assert!(Instant::now() < deadline, "the server at {address} was not ready within 60 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for RestartableServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// The standalone gateway in front of `upstreams`.
pub struct Gateway {
    child: Child,
    pub url: String,
}

impl Gateway {
    pub async fn start(upstreams: &[&str]) -> Gateway {
        Self::start_with(upstreams, &[]).await
    }

    /// The gateway with extra flags.
    pub async fn start_with(upstreams: &[&str], args: &[&str]) -> Gateway {
        let mut child = Command::new(gateway_binary())
            .args(["--listen", "127.0.0.1:0", "--upstream", &upstreams.join(","), "--cool-down", "30"])
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("gateway starts");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let address = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(line) = lines.next_line().await.expect("gateway log") {
                if let Some(address) = line.split("listening on ").nth(1) {
                    return address.split_whitespace().next().unwrap_or_default().to_string();
                }
            }
            panic!("the gateway exited before listening");
        })
        .await
        .expect("the gateway listens within 20 s");
        // Keep draining the log so the gateway never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Gateway { child, url: format!("http://{address}") }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// An HTTP/1.1 keep-alive client, as the existing gateways' benchmark uses.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder().http1_only().timeout(Duration::from_secs(60)).build().expect("client")
}

/// POSTs `body` and returns the status and the parsed JSON answer.
pub async fn post(url: &str, body: &Value) -> (u16, Value) {
    let response = http().post(url).json(body).send().await.expect("request sent");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("{url} answered non-JSON: {text}")))
}

/// POSTs `body` and returns the status, the headers and the parsed JSON answer.
pub async fn post_with_headers(url: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = http().post(url).json(body).send().await.expect("request sent");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    (status, headers, serde_json::from_str(&text).unwrap_or_else(|_| panic!("{url} answered non-JSON: {text}")))
}

/// GETs `url` and returns the status and the parsed JSON answer.
pub async fn get(url: &str) -> (u16, Value) {
    let response = http().get(url).send().await.expect("request sent");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("{url} answered non-JSON: {text}")))
}

/// Ingests `documents` and polls the job until it ends; returns the final job.
pub async fn ingest_and_wait(base: &str, documents: Value) -> Value {
    ingest_at_and_wait(&format!("{base}/v1"), documents).await
}

/// [`ingest_and_wait`] through the routes under `at`: `{base}/v1` for the default
/// collection, `{base}/v1/collections/NAME` for a named one.
pub async fn ingest_at_and_wait(at: &str, documents: Value) -> Value {
    let (status, job) = post(&format!("{at}/ingest"), &json!({ "documents": documents })).await;
    assert_eq!(status, 200, "{job}");
    let job_id = job["job_id"].as_str().expect("job_id").to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, job) = get(&format!("{at}/jobs/{job_id}")).await;
        assert_eq!(status, 200, "{job}");
        if job["status"] == "completed" || job["status"] == "failed" {
            return job;
        }
        assert!(Instant::now() < deadline, "job still {} after 60 s", job["status"]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The error body's message, for assertions.
pub fn error_message(body: &Value) -> String {
    body["error"]["message"].as_str().unwrap_or_default().to_string()
}

/// Floats of a JSON array.
pub fn floats(value: &Value) -> Vec<f32> {
    value.as_array().expect("array").iter().map(|v| v.as_f64().expect("number") as f32).collect()
}

/// Little-endian f32 values of `bytes`.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}
