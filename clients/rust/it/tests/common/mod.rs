//! Real servers for the client's tests: the workspace's `embedwire-server` binary,
//! started by embedwire-bench's `ServerProcess` (127.0.0.1:0, a fresh data dir,
//! readiness polled on the health service), and the `embedwire` CLI run as a
//! child process.
#![allow(dead_code)] // each test binary uses a different subset

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Output, Stdio};

use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use embedwire_client::{Client, ClientConfig};
use tokio::io::AsyncWriteExt;

/// Flags for the fast deterministic fake model (same dim as the real one).
pub const PSEUDO: &[&str] = &["--backend", "pseudo"];
/// Flags for the real all-MiniLM-L6-v2 model.
pub const ONNX: &[&str] = &["--backend", "onnx"];

/// The server binary of this workspace's release build. `make test` builds the whole
/// workspace first; alone, run `cargo build --release --workspace`.
pub fn server_binary() -> PathBuf {
    embedwire_bench::server_binary::workspace_release().unwrap()
}

/// The release build of the `embedwire` CLI, beside the server's (the client's own
/// `tests/binary.rs` is what makes `cargo test` build it: these tests are another
/// package, built without optimization, see its Cargo.toml).
pub fn cli_binary() -> PathBuf {
    let path = server_binary().with_file_name("embedwire");
    assert!(path.is_file(), "{} is missing: run `cargo build --release --workspace`", path.display());
    path
}

/// A running server with `flags`, SERVING.
pub async fn start(flags: &[&str]) -> ServerProcess {
    let command = ServerCommand { binary: server_binary(), args: flags.iter().map(OsString::from).collect() };
    let (server, _) = ServerProcess::start(&command).await.expect("the server starts");
    server
}

/// The server's address as the client takes it.
pub fn address(server: &ServerProcess) -> String {
    format!("http://{}", server.address)
}

/// A client of `servers` with default settings.
pub async fn client(servers: &[&ServerProcess]) -> Client {
    ClientConfig::new(servers.iter().map(|s| address(s))).connect().await.expect("connect")
}

/// An address nobody listens on: a port the OS just handed out and took back.
pub fn dead_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    address.to_string()
}

/// Distinct short texts.
pub fn texts(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("text number {i} of the order test, topic {}", i % 17)).collect()
}

/// Runs the `embedwire` CLI with `args` (and `stdin`), without the user's
/// EMBEDWIRE_* environment.
pub async fn cli(args: &[&str], stdin: Option<&str>) -> Output {
    cli_with_env(args, stdin, &[]).await
}

/// [`cli`] with these environment variables set.
pub async fn cli_with_env(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(cli_binary());
    command.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("EMBEDWIRE_") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    let mut child = command.spawn().expect("running embedwire");
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.unwrap();
    }
    drop(input);
    child.wait_with_output().await.unwrap()
}

/// stdout of a run that must have succeeded.
pub fn stdout_of(output: &Output) -> String {
    assert!(
        output.status.success(),
        "embedwire failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// A temporary directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        static CREATED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("embedwire-client-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
