//! Child processes of the test clusters (`common::postgres`, `common::weaviate`): spawned
//! so that they die with the test binary although a shared cluster is a static that is
//! never dropped, one directory per cluster that a later run cleans up, signals that
//! never reach a reaped (possibly reused) pid, and a stop with a grace period.
//!
//! Everything here is blocking: a shared cluster outlives the tokio runtime of the
//! `#[tokio::test]` that started it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Starts of a cluster, each on new ports, before a lost port fails the test.
const PORT_ATTEMPTS: usize = 3;

/// The cluster `on_fresh_ports` makes, once `start` returned. The ports are picked free
/// and released before the servers bind them, so an outgoing connection of another
/// process can take one in between (a clean-clone `make test` lost weaviate-0's gRPC
/// port while another cluster started beside it): a start that panics while one of
/// `logs` says "address already in use" is tried again on new ports.
pub fn start_on_fresh_ports<C>(
    what: &str,
    on_fresh_ports: impl Fn() -> C,
    start: impl Fn(&C),
    logs: impl Fn(&C) -> Vec<PathBuf>,
) -> C {
    let lost_a_port = |cluster: &C| {
        let log = |path: &PathBuf| std::fs::read_to_string(path).unwrap_or_default().to_lowercase();
        logs(cluster).iter().any(|path| log(path).contains("address already in use"))
    };
    for attempt in 1..=PORT_ATTEMPTS {
        let cluster = on_fresh_ports();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| start(&cluster))) {
            Ok(()) => return cluster,
            Err(_) if attempt < PORT_ATTEMPTS && lost_a_port(&cluster) => {
                eprintln!("a {what} server lost its port to another process; starting again on new ports");
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// How long a server may take to exit after it was asked to stop before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

/// Spawns `command` from a thread that lives as long as the process, with
/// `PR_SET_PDEATHSIG = SIGKILL` in its own process group, so the child dies with the
/// test binary even when it never drops the handle. The signal follows the spawning
/// *thread* (spawning from a test's own thread would kill the child when that test
/// ends), hence the one long-lived thread. std runs `pre_exec` after switching to a
/// `uid`/`gid` set on the command, which matters: a credential change clears the
/// death signal.
pub fn spawn_tied_to_process(command: Command) -> Child {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("cluster-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let parent = std::process::id() as libc::pid_t;
                    command.process_group(0);
                    // SAFETY: only async-signal-safe calls between fork and exec.
                    unsafe {
                        command.pre_exec(move || {
                            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                            // The parent may have died before prctl took effect.
                            if libc::getppid() != parent {
                                libc::_exit(1);
                            }
                            Ok(())
                        });
                    }
                    let _ = reply.send(command.spawn());
                }
            })
            .unwrap();
        Mutex::new(tx)
    });
    let program = command.get_program().to_string_lossy().into_owned();
    let (reply, answer) = mpsc::channel();
    spawner.lock().unwrap_or_else(|p| p.into_inner()).send((command, reply)).unwrap();
    answer.recv().unwrap().unwrap_or_else(|e| panic!("spawn {program}: {e}"))
}

/// Appends the command's stdout and stderr to the file at `log` (created if missing),
/// so that every start of the same server adds to one log.
pub fn log_to(command: &mut Command, log: &Path) {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    command.stdout(file.try_clone().unwrap()).stderr(file);
}

/// Whether a child was started and has not exited.
pub fn is_running(child: &mut Option<Child>) -> bool {
    child.as_mut().is_some_and(|child| child.try_wait().unwrap().is_none())
}

/// Sends `signal` to the child, unless it has exited: once reaped, its pid may belong
/// to someone else.
pub fn signal(child: &mut Child, signal: libc::c_int) {
    send_unless_exited(child, child.id() as libc::pid_t, signal);
}

/// Sends `signal` to the child's process group (it leads its own, see
/// [`spawn_tied_to_process`]), unless it has exited.
pub fn signal_group(child: &mut Child, signal: libc::c_int) {
    send_unless_exited(child, -(child.id() as libc::pid_t), signal);
}

fn send_unless_exited(child: &mut Child, target: libc::pid_t, signal: libc::c_int) {
    if child.try_wait().unwrap().is_some() {
        return;
    }
    // SAFETY: the child is not reaped, so its pid (and group id) is still ours.
    unsafe {
        libc::kill(target, signal);
    }
}

/// Waits until a child that was asked to stop has exited; past `deadline` it reports
/// that `name` did not stop and calls `kill`, which must end and reap it.
pub fn wait_exit_or_kill(child: &mut Child, name: &str, deadline: Instant, kill: impl FnOnce(&mut Child)) {
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            eprintln!("{name} did not stop within {STOP_GRACE:?}; killing it");
            kill(child);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `done` every 100 ms; after `timeout` panics naming `what`, followed by
/// `context()` (a cluster's logs, or where they are).
pub fn poll_until(what: &str, timeout: Duration, context: impl Fn() -> String, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}{}", context());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A new directory for one cluster, `$TMPDIR/embedwire-<kind>/<pid>-<n>/`, after
/// removing those of test processes that have ended.
pub fn fresh_dir(kind: &str) -> PathBuf {
    static CREATED: AtomicUsize = AtomicUsize::new(0);
    let base = std::env::temp_dir().join(format!("embedwire-{kind}"));
    for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name.split('-').next().and_then(|p| p.parse::<libc::pid_t>().ok());
        if pid.is_some_and(|pid| !process_alive(pid)) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let n = CREATED.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!("{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes a cluster's directory once its servers are gone, or keeps it (and says
/// where) when the test failed, for its data and logs.
pub fn remove_dir_unless_panicking(dir: &Path, what: &str) {
    if std::thread::panicking() {
        eprintln!("{what} data and logs kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn process_alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) }
}

/// The cluster `make test` started for the whole run with `scripts/test-clusters.sh`,
/// when the environment variable `var` names its state directory (`scripts/cluster.sh`'s:
/// `ports.env`, `logs/`): the ports by name, and that directory. `None` without it (a
/// test run by hand), and the caller starts a cluster of its own.
pub fn external_cluster(var: &str) -> Option<(std::collections::HashMap<String, u16>, PathBuf)> {
    let dir = PathBuf::from(std::env::var_os(var)?);
    let path = dir.join("ports.env");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{var}={}: {e} (is `scripts/test-clusters.sh up` running?)", dir.display()));
    let ports = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, port)| {
            let port = port.trim().parse().unwrap_or_else(|e| panic!("{}: {name}={port}: {e}", path.display()));
            (name.trim().to_string(), port)
        })
        .collect();
    Some((ports, dir))
}
