//! The processes a bench starts, handled once: a measured process (the server, an HTTP gateway, the Python baseline) is
//! spawned, its address taken from its first "listening on HOST:PORT" log line, ready when a probe says so, and killed
//! at the end (also when dropped on an error). Every one is started and judged the same way, so their cold starts
//! compare. Helper programs run to their end.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex, atomic},
    time::{Duration, Instant},
};

use anyhow::Context;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, ChildStderr, Command},
    sync::oneshot,
};

/// Log lines kept to explain a failed start.
const STDERR_TAIL_LINES: usize = 20;

pub struct ChildProcess {
    /// What messages call it ("embedwire-server", "baseline").
    pub name: String,
    pub pid: u32,
    pub address: SocketAddr,
    child: Child,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// A directory the process owns (its data directory), removed when it ends.
    scratch_dir: Option<PathBuf>,
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(dir) = &self.scratch_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl ChildProcess {
    /// Spawns `command`, reads its address from its log, then asks `ready` every `interval` on a connection from
    /// `connect` (reopened after an error) until it says yes. Fails when the process exits first or either wait passes
    /// `timeout`. Also returns the cold start: from the spawn to the first yes.
    pub async fn start<C>(
        name: &str,
        mut command: Command,
        scratch_dir: Option<PathBuf>,
        (timeout, interval): (Duration, Duration),
        connect: impl AsyncFn(SocketAddr) -> anyhow::Result<C>,
        ready: impl AsyncFn(&mut C) -> anyhow::Result<bool>,
    ) -> anyhow::Result<(Self, Duration)> {
        let spawned = Instant::now();
        // NO_COLOR keeps the log plain (tracing-subscriber honours it), so the line parses.
        command.env("NO_COLOR", "1").kill_on_drop(true);
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child =
            command.spawn().with_context(|| format!("starting {name} ({:?})", command.as_std().get_program()))?;
        let pid = child.id().with_context(|| format!("{name} exited at once"))?;
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let (address_tx, address_rx) = oneshot::channel();
        let stderr = child.stderr.take().context("no stderr pipe")?;
        tokio::spawn(read_log(stderr, address_tx, stderr_tail.clone()));
        // The sender goes away when the log ends, so a process that exits early ends
        // this wait too, with its whole log already in the tail.
        let address = tokio::time::timeout(timeout, address_rx).await;
        // Until it logs an address; meanwhile drop kills it and removes its directory.
        let unknown = ([127, 0, 0, 1], 0).into();
        let mut process =
            ChildProcess { name: name.to_string(), pid, address: unknown, child, stderr_tail, scratch_dir };
        let Ok(Ok(address)) = address else {
            return Err(process.failure("did not log its address (exited, or too slow)"));
        };
        process.address = address;
        let (mut connection, deadline) = (None, Instant::now() + timeout);
        while Instant::now() < deadline {
            if let Some(status) = process.child.try_wait()? {
                return Err(process.failure(&format!("exited while loading ({status})")));
            }
            if connection.is_none() {
                connection = connect(address).await.ok();
            }
            if let Some(open) = connection.as_mut() {
                match ready(open).await {
                    Ok(true) => return Ok((process, spawned.elapsed())),
                    Ok(false) => {}
                    Err(_) => connection = None,
                }
            }
            tokio::time::sleep(interval).await;
        }
        Err(process.failure("was not ready in time"))
    }

    /// The last log lines (warnings during a run show up here).
    pub fn log_tail(&self) -> Vec<String> {
        self.stderr_tail.lock().map(|tail| tail.iter().cloned().collect()).unwrap_or_default()
    }

    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.child.start_kill().with_context(|| format!("killing {}", self.name))?;
        self.child.wait().await.map(drop).with_context(|| format!("waiting for {} to exit", self.name))
    }

    fn failure(&self, what: &str) -> anyhow::Error {
        anyhow::anyhow!("{} {what}; its last log lines:\n{}", self.name, self.log_tail().join("\n"))
    }
}

/// A directory of its own, not there yet, for each process the bench starts.
pub fn fresh_dir(what: &str) -> PathBuf {
    static STARTED: atomic::AtomicUsize = atomic::AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("embedwire-bench-{what}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs a helper program to its end and returns its stdout; when it fails, an error
/// with its status, its output and `hint` (what to do about it).
pub fn program_output(command: &mut std::process::Command, hint: &str) -> anyhow::Result<String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let output = command.output().with_context(|| format!("running {program} ({hint})"))?;
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    anyhow::ensure!(output.status.success(), "{program} failed ({}; {hint}):\n{stdout}{stderr}", output.status);
    Ok(stdout.into_owned())
}

/// Reads the log to its end (so the pipe never fills and blocks the process), sends
/// the address of the first "listening on" line, and keeps the last lines.
async fn read_log(stderr: ChildStderr, address: oneshot::Sender<SocketAddr>, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut address = Some(address);
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
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

fn listening_address(line: &str) -> Option<SocketAddr> {
    line.split("listening on ").nth(1)?.split_whitespace().next()?.parse().ok()
}
