//! One real embedwire-server process: spawned on 127.0.0.1:0, its address read from
//! its "listening on" log line, readiness polled on the health service, killed at
//! the end (also when dropped, so an error never leaves a server running).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Longest wait for a server to listen and then to report SERVING.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Health polling interval: small against the 2 s cold-start target.
const POLL_INTERVAL: Duration = Duration::from_millis(2);
/// Server log lines kept to explain a failed start.
const STDERR_TAIL_LINES: usize = 20;

/// How to start the server.
#[derive(Debug, Clone)]
pub struct ServerCommand {
    pub binary: PathBuf,
    /// Flags after `--listen 127.0.0.1:0 --data-dir <fresh dir>`.
    pub args: Vec<OsString>,
}

impl ServerCommand {
    /// The bench's `defaults`, then the user's `extra` flags (e.g. from
    /// `--server-arg`), which replace a default of the same name: the server refuses
    /// a flag given twice. `--listen` and `--data-dir` are [`ServerProcess::start`]'s.
    pub fn new(binary: PathBuf, defaults: Vec<(&str, OsString)>, extra: &[String]) -> Self {
        let overridden = |flag: &str| extra.iter().any(|arg| arg == flag || arg.starts_with(&format!("{flag}=")));
        let mut args: Vec<OsString> = Vec::new();
        for (flag, value) in defaults.into_iter().filter(|(flag, _)| !overridden(flag)) {
            args.extend([flag.into(), value]);
        }
        args.extend(extra.iter().map(OsString::from));
        ServerCommand { binary, args }
    }
}

/// A running server.
pub struct ServerProcess {
    child: Child,
    pub pid: u32,
    pub address: SocketAddr,
    /// The last log lines, for error messages.
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// A fresh, empty document store for this process, removed when it ends.
    data_dir: PathBuf,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// A data directory of its own for each server the bench starts.
pub fn fresh_data_dir() -> PathBuf {
    static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("embedwire-bench-data-{}-{n}", std::process::id()))
}

impl ServerProcess {
    /// Spawns the server and waits for health SERVING. Also returns the cold start:
    /// the time from spawning the process to the first SERVING answer.
    pub async fn start(command: &ServerCommand) -> anyhow::Result<(Self, Duration)> {
        let data_dir = fresh_data_dir();
        let spawned = Instant::now();
        let mut child = Command::new(&command.binary)
            .args(["--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(&command.args)
            // The address comes from an info line, so info must be on, and plain.
            .env("RUST_LOG", "info,ort=warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", command.binary.display()))?;
        let pid = child.id().context("the server exited at once")?;
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let (address_tx, address_rx) = oneshot::channel();
        tokio::spawn(read_log(
            BufReader::new(child.stderr.take().context("no stderr pipe")?),
            address_tx,
            stderr_tail.clone(),
        ));

        // The sender goes away when the log ends, so a server that exits early ends
        // this wait too, with its whole log already in the tail.
        let listening = tokio::time::timeout(READY_TIMEOUT, address_rx).await;
        let Ok(Ok(address)) = listening else {
            return Err(failure(&stderr_tail, "embedwire-server did not log its address (exited, or too slow)"));
        };
        let mut server = ServerProcess { child, pid, address, stderr_tail, data_dir };
        server.wait_serving().await?;
        Ok((server, spawned.elapsed()))
    }

    /// A new HTTP/2 connection to the server.
    pub async fn connect(&self) -> anyhow::Result<Channel> {
        let channel =
            endpoint(self.address)?.connect().await.with_context(|| format!("connecting to {}", self.address))?;
        Ok(channel)
    }

    /// The server's last log lines (warnings during a run show up here).
    pub fn log_tail(&self) -> Vec<String> {
        self.stderr_tail.lock().map(|tail| tail.iter().cloned().collect()).unwrap_or_default()
    }

    /// Kills the server and reaps it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.child.start_kill().context("killing the server")?;
        self.child.wait().await.context("waiting for the server to exit")?;
        Ok(())
    }

    /// Polls Health/Check, reconnecting until the server accepts, until SERVING.
    async fn wait_serving(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut health: Option<HealthClient<Channel>> = None;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Err(self.failure(&format!("exited while loading ({status})")));
            }
            if health.is_none() {
                health = endpoint(self.address)?.connect().await.ok().map(HealthClient::new);
            }
            if let Some(client) = health.as_mut() {
                match client.check(HealthCheckRequest { service: String::new() }).await {
                    Ok(response) if response.get_ref().status == ServingStatus::Serving as i32 => return Ok(()),
                    Ok(_) => {}
                    Err(_) => health = None,
                }
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        Err(self.failure("did not report SERVING in time"))
    }

    fn failure(&self, what: &str) -> anyhow::Error {
        failure(&self.stderr_tail, &format!("embedwire-server {what}"))
    }
}

/// An error that says what went wrong and shows the server's last log lines.
pub(crate) fn failure(tail: &Mutex<VecDeque<String>>, what: &str) -> anyhow::Error {
    let tail = tail.lock().map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default();
    anyhow::anyhow!("{what}; its last log lines:\n{tail}")
}

fn endpoint(address: SocketAddr) -> anyhow::Result<Endpoint> {
    Ok(Endpoint::from_shared(format!("http://{address}"))?.tcp_nodelay(true))
}

/// Reads the server's log to its end (so the pipe never fills and blocks it), sends
/// the address of the first "listening on" line, and keeps the last lines.
pub(crate) async fn read_log(
    stderr: BufReader<tokio::process::ChildStderr>,
    address: oneshot::Sender<SocketAddr>,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut address = Some(address);
    let mut lines = stderr.lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = strip_ansi(&line);
        if let Some(found) = listening_address(&line)
            && let Some(sender) = address.take()
        {
            let _ = sender.send(found);
        }
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
}

/// The address in a "... listening on 127.0.0.1:PORT" line.
fn listening_address(line: &str) -> Option<SocketAddr> {
    line.split("listening on ").nth(1)?.split_whitespace().next()?.parse().ok()
}

/// Removes ANSI escape sequences (ESC [ ... letter), in case colors are forced on
/// despite NO_COLOR.
fn strip_ansi(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip to the sequence's final byte, a letter.
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
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

    #[test]
    fn finds_the_address_in_a_colored_log_line() {
        let line = "\u{1b}[2m2026-01-01T00:00:00Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2membedwire_server\u{1b}[0m\u{1b}[2m:\u{1b}[0m listening on 127.0.0.1:40123";
        assert_eq!(listening_address(&strip_ansi(line)), Some("127.0.0.1:40123".parse().unwrap()));
        assert_eq!(listening_address("INFO model ready"), None);
    }
}
