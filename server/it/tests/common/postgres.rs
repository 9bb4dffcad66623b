//! A real PostgreSQL (with pgvector) for the `--store postgres` tests: a primary and one
//! hot-standby replica that streams its WAL, both on 127.0.0.1 on free ports, run from the
//! binaries `make setup` installs (`$EMBEDWIRE_CACHE/bin/pg`, see scripts/setup-postgres.sh).
//!
//! Everything here is blocking (std processes, `psql` for SQL), like `common::weaviate`:
//! a shared cluster outlives the tokio runtime of the `#[tokio::test]` that started it.
//!
//! PostgreSQL refuses to run as root. When the tests run as root, `initdb`, `postgres`
//! and `pg_basebackup` run as the system user `embedwire-pg` (created by the setup
//! script) and the cluster's directory belongs to it; otherwise they run as the test.
//! `psql` (a client) always runs as the test. The binaries are reached through the
//! canonical path of the `bin/pg` link, so that user never has to traverse `/root`.
//!
//! The servers die with the test binary although statics are never dropped: each
//! postmaster is spawned by [`child::spawn_tied_to_process`]; its backends and workers
//! notice its death and exit.
//! Every one of them leads its own session (PostgreSQL calls `setsid`), so killing a
//! server like a crash means killing each of its processes, and a new postmaster on the
//! same data refuses to start until the last of them has let go of the old shared
//! memory: [`PostgresCluster::kill`] does both before it returns. The primary
//! runs with `fsync = on`: a killed primary restarts from its WAL with every committed row.
//!
//! Data and logs live under `$TMPDIR/embedwire-postgres/<pid>-<n>/` (`primary/`,
//! `replica/`, `primary.log`, `replica.log`, and the Unix sockets); directories of test
//! processes that are no longer alive are removed when the next cluster starts.

use std::ffi::CString;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::child::{self, STOP_GRACE};
use super::ports;

/// How long a test waits for a server to accept connections, a replica to stream or
/// catch up (a cold start of both takes a few seconds).
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// The user the servers run as when the tests run as root (scripts/setup-postgres.sh
/// creates it).
const SERVER_USER: &str = "embedwire-pg";

/// Settings of both servers (the replica gets the primary's `postgresql.conf` through
/// `pg_basebackup`). The port and the socket directory differ per server and are given
/// on the command line instead.
const SETTINGS: &str = "
# embedwire test cluster (server/it/tests/common/postgres.rs)
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 4
hot_standby = on
# Small: a test database holds a few thousand rows at most.
shared_buffers = 32MB
# Connection pools of several servers, from tests running in parallel.
max_connections = 200
# The durability tests kill the primary and expect every committed row back.
fsync = on
synchronous_commit = on
full_page_writes = on
# A replica reconnects to a restarted primary within this (default 5 s).
wal_retrieve_retry_interval = '200ms'
";

/// Which of the two servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
        }
    }

    /// What `pg_is_in_recovery()` answers on this server once it is up.
    fn in_recovery(self) -> &'static str {
        match self {
            Role::Primary => "f",
            Role::Replica => "t",
        }
    }
}

/// One server: what it needs to be started again the same way, and the running process.
#[derive(Debug)]
struct Server {
    role: Role,
    port: u16,
    /// Its data directory (`PGDATA`).
    data: PathBuf,
    /// Its stdout and stderr, appended to on every start.
    log: PathBuf,
    child: Option<Child>,
}

/// A PostgreSQL primary and one streaming hot-standby replica on loopback.
#[derive(Debug)]
pub struct PostgresCluster {
    /// Holds both data directories, their logs and the Unix sockets.
    dir: PathBuf,
    /// `.../pginstall/bin`, canonical (not through `/root`).
    bin: PathBuf,
    /// `(uid, gid)` of [`SERVER_USER`] when the tests run as root; `None` runs the
    /// servers as the test itself.
    owner: Option<(u32, u32)>,
    /// `[primary, replica]`, behind a mutex so that a `&'static` shared cluster can
    /// still be faulted.
    servers: Mutex<[Server; 2]>,
    /// Started outside the test (`make test`'s, see [`PostgresCluster::shared_store`]):
    /// running all along, and not the test's to stop or kill.
    external: bool,
}

impl PostgresCluster {
    /// A cluster that this test owns: the primary accepts connections and the replica
    /// streams from it on return; both are killed (and the directory removed unless the
    /// test panicked) when dropped. Use it for tests that kill or stop a server, so that
    /// they do not disturb other tests.
    pub fn start() -> PostgresCluster {
        let logs = |cluster: &PostgresCluster| cluster.servers().iter().map(|server| server.log.clone()).collect();
        child::start_on_fresh_ports("postgres", PostgresCluster::on_fresh_ports, PostgresCluster::start_both, logs)
    }

    /// The cluster's directory and servers, not initialized yet.
    fn on_fresh_ports() -> PostgresCluster {
        let link = super::cache_dir().join("bin/pg");
        let bin = link
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}: run `make setup` (scripts/setup-postgres.sh)", link.display()))
            .join("bin");
        // SAFETY: geteuid has no preconditions.
        let owner = (unsafe { libc::geteuid() } == 0).then(|| user_ids(SERVER_USER));
        let dir = child::fresh_dir("postgres");
        if let Some((uid, gid)) = owner {
            // initdb and pg_basebackup create the data directories in it, the servers
            // their sockets.
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
        }
        let [primary_port, replica_port] = free_ports();
        let server = |role: Role, port| Server {
            role,
            port,
            data: dir.join(role.name()),
            log: dir.join(format!("{}.log", role.name())),
            child: None,
        };
        PostgresCluster {
            servers: Mutex::new([server(Role::Primary, primary_port), server(Role::Replica, replica_port)]),
            dir,
            bin,
            owner,
            external: false,
        }
    }

    /// The primary and replica that `make test` started for the whole run
    /// (`scripts/test-clusters.sh`, whose state directory `EMBEDWIRE_TEST_POSTGRES`
    /// names), if it did.
    fn external() -> Option<PostgresCluster> {
        let (ports, dir) = child::external_cluster("EMBEDWIRE_TEST_POSTGRES")?;
        let link = super::cache_dir().join("bin/pg");
        let bin =
            link.canonicalize().unwrap_or_else(|e| panic!("{}: {e}: run `make setup`", link.display())).join("bin");
        let server = |role: Role| Server {
            role,
            port: ports[&format!("POSTGRES_{}_PORT", role.name().to_uppercase())],
            data: dir.join("data/postgres").join(role.name()),
            log: dir.join(format!("logs/postgres-{}.log", role.name())),
            child: None,
        };
        let servers = Mutex::new([server(Role::Primary), server(Role::Replica)]);
        Some(PostgresCluster { servers, dir, bin, owner: None, external: true })
    }

    fn start_both(&self) {
        self.init_primary();
        self.spawn(Role::Primary);
        self.wait_up(Role::Primary);
        self.init_replica();
        self.spawn(Role::Replica);
        self.wait_up(Role::Replica);
    }

    /// The cluster shared by every test of this binary that asks for it, started by the
    /// first one. Do not kill or stop its servers: other tests are using it at the same
    /// time (use [`PostgresCluster::start`] for that). Give each test its own database.
    pub fn shared() -> &'static PostgresCluster {
        static SHARED: OnceLock<PostgresCluster> = OnceLock::new();
        // A start that panicked leaves it empty; the next caller simply tries again.
        SHARED.get_or_init(PostgresCluster::start)
    }

    /// For tests that only read and write (each in its own database): the cluster that
    /// `make test` started once for the whole run, which every such test of every
    /// process shares, else [`PostgresCluster::shared`]. Under nextest each test is a
    /// process of its own, so without it each would start a cluster.
    pub fn shared_store() -> &'static PostgresCluster {
        static EXTERNAL: OnceLock<Option<PostgresCluster>> = OnceLock::new();
        EXTERNAL.get_or_init(PostgresCluster::external).as_ref().unwrap_or_else(PostgresCluster::shared)
    }

    /// `postgres://postgres@127.0.0.1:PORT/db` of the primary (trust authentication).
    pub fn primary_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port(Role::Primary))
    }

    /// `postgres://postgres@127.0.0.1:PORT/db` of the replica (read-only).
    pub fn replica_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port(Role::Replica))
    }

    /// Flags of a server on `collection` in database `db` (which must exist), writing to
    /// the primary and reading from the replica.
    pub fn server_flags(&self, db: &str, collection: &str) -> Vec<String> {
        let (write, read) = (self.primary_url(db), self.replica_url(db));
        ["--store", "postgres", "--postgres-url", &write, "--postgres-read-url", &read, "--collection", collection]
            .map(String::from)
            .to_vec()
    }

    /// The directory holding both data directories and `primary.log` / `replica.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates database `name` on the primary and, when the replica runs, waits until
    /// the replica has it too, so [`PostgresCluster::replica_url`] works at once.
    pub fn create_database(&self, name: &str) {
        self.sql("postgres", &format!("CREATE DATABASE \"{name}\""));
        if self.is_running(Role::Replica) {
            self.wait_replica_caught_up();
        }
    }

    /// Runs `statement` (one or more SQL statements) in database `db` on the primary
    /// and returns what psql prints unaligned: one line per row, columns separated by
    /// `|`, no headers; panics with psql's error and the server's log on failure.
    pub fn sql(&self, db: &str, statement: &str) -> String {
        self.try_sql(db, statement).unwrap_or_else(|error| panic!("{error}\n{}", self.logs()))
    }

    /// [`PostgresCluster::sql`] on the replica.
    pub fn replica_sql(&self, db: &str, statement: &str) -> String {
        self.try_replica_sql(db, statement).unwrap_or_else(|error| panic!("{error}\n{}", self.logs()))
    }

    /// [`PostgresCluster::sql`] that returns psql's error instead of panicking (for a
    /// primary that is down, or a statement that should fail).
    pub fn try_sql(&self, db: &str, statement: &str) -> Result<String, String> {
        self.psql(Role::Primary, db, statement)
    }

    /// [`PostgresCluster::try_sql`] on the replica.
    pub fn try_replica_sql(&self, db: &str, statement: &str) -> Result<String, String> {
        self.psql(Role::Replica, db, statement)
    }

    /// Kills `role`'s postmaster and every process it started with SIGKILL (no shutdown,
    /// like a crash) and waits until they are gone, so that open connections fail at
    /// once and [`PostgresCluster::start_server`] can follow.
    pub fn kill(&self, role: Role) {
        self.assert_owned();
        let mut servers = self.servers();
        let server = &mut servers[role as usize];
        if let Some(mut child) = server.child.take() {
            kill_server(&mut child);
            let data = server.data.clone();
            drop(servers);
            self.wait_for(&format!("the killed {}'s processes to release its shared memory", role.name()), || {
                shared_memory_released(&data)
            });
        }
    }

    /// Stops `role` cleanly with a fast shutdown (sessions are cut, a checkpoint is
    /// written): SIGINT, where SIGTERM would wait for every session to end.
    pub fn stop(&self, role: Role) {
        self.assert_owned();
        let mut servers = self.servers();
        let Some(mut child) = servers[role as usize].child.take() else { return };
        child::signal(&mut child, libc::SIGINT);
        let deadline = Instant::now() + STOP_GRACE;
        child::wait_exit_or_kill(&mut child, &format!("the {}", role.name()), deadline, kill_server);
    }

    /// Starts `role` again on its port and data (a primary replays its WAL) and waits
    /// until it accepts connections; a replica also has to stream from the primary (so
    /// the primary must run). A server that runs is only waited for.
    pub fn start_server(&self, role: Role) {
        self.assert_owned();
        if !self.is_running(role) {
            self.spawn(role);
        }
        self.wait_up(role);
    }

    /// Whether `role`'s process runs (it may not accept connections yet).
    pub fn is_running(&self, role: Role) -> bool {
        self.external || child::is_running(&mut self.servers()[role as usize].child)
    }

    fn assert_owned(&self) {
        assert!(!self.external, "the cluster make test shares ({}) is not a test's to fault", self.dir.display());
    }

    /// Waits until the replica has replayed everything the primary had written when
    /// this was called (both must run; the replica reconnects to a restarted primary
    /// within a fraction of a second).
    pub fn wait_replica_caught_up(&self) {
        let lsn = self.sql("postgres", "SELECT pg_current_wal_lsn()");
        self.wait_for(&format!("the replica to replay the primary's WAL up to {lsn}"), || {
            self.try_replica_sql("postgres", &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")).as_deref()
                == Ok("t")
        });
    }

    /// The last lines of both servers' logs, for assertion messages.
    pub fn logs(&self) -> String {
        const LINES: usize = 30;
        let mut out = String::new();
        for role in [Role::Primary, Role::Replica] {
            let path = self.servers()[role as usize].log.clone();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out += &format!("--- last lines of {}:\n", path.display());
            for line in &lines[lines.len().saturating_sub(LINES)..] {
                out += line;
                out.push('\n');
            }
        }
        out
    }

    fn servers(&self) -> std::sync::MutexGuard<'_, [Server; 2]> {
        self.servers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn port(&self, role: Role) -> u16 {
        self.servers()[role as usize].port
    }

    /// A command for one of the PostgreSQL binaries with nothing of the test's
    /// environment (no `PG*` variables, no `HOME` that the server user cannot read).
    fn command(&self, binary: &str) -> Command {
        let mut command = Command::new(self.bin.join(binary));
        command.env_clear().env("PATH", "/usr/bin:/bin").env("LC_ALL", "C").stdin(Stdio::null());
        command
    }

    /// [`PostgresCluster::command`] running as the servers' owner.
    fn owned_command(&self, binary: &str) -> Command {
        let mut command = self.command(binary);
        if let Some((uid, gid)) = self.owner {
            command.uid(uid).gid(gid);
        }
        command
    }

    /// Runs a setup step (initdb, pg_basebackup) to completion; panics with its output.
    fn run_step(&self, mut command: Command) {
        let output = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
        assert!(
            output.status.success(),
            "{command:?} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn init_primary(&self) {
        let data = self.servers()[Role::Primary as usize].data.clone();
        let mut initdb = self.owned_command("initdb");
        // --no-sync: the files only have to outlive a killed server, not a crashed
        // machine (the servers themselves run with fsync on); syncing them costs 1-4 s.
        initdb.arg("-D").arg(&data).args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"]);
        self.run_step(initdb);
        append(&data.join("postgresql.conf"), SETTINGS);
        append(&data.join("pg_hba.conf"), "host replication all 127.0.0.1/32 trust\n");
    }

    /// Copies the running primary into the replica's data directory; `-R` writes its
    /// `primary_conninfo` and `standby.signal`. `--checkpoint=fast`: the default spread
    /// checkpoint makes the copy wait about 90 s. `--no-sync` as for initdb.
    fn init_replica(&self) {
        let data = self.servers()[Role::Replica as usize].data.clone();
        let mut basebackup = self.owned_command("pg_basebackup");
        basebackup
            .args(["-h", "127.0.0.1", "-p", &self.port(Role::Primary).to_string(), "-U", "postgres", "-D"])
            .arg(&data)
            .args(["-R", "-X", "stream", "--checkpoint=fast", "--no-sync"]);
        self.run_step(basebackup);
    }

    /// Starts `postgres` itself as the child (no pg_ctl), so its pid is the postmaster's.
    /// The sockets go to the cluster directory, not into the data directories, where
    /// pg_basebackup would warn about them.
    fn spawn(&self, role: Role) {
        let mut servers = self.servers();
        let server = &mut servers[role as usize];
        let mut command = self.owned_command("postgres");
        command
            .arg("-D")
            .arg(&server.data)
            .args(["-p", &server.port.to_string(), "-c"])
            .arg(format!("unix_socket_directories={}", self.dir.display()))
            .current_dir(&self.dir);
        child::log_to(&mut command, &server.log);
        server.child = Some(child::spawn_tied_to_process(command));
    }

    /// Waits until `role` accepts connections in its role; a replica also has to stream.
    fn wait_up(&self, role: Role) {
        self.wait_for(&format!("the {} to accept connections", role.name()), || {
            assert!(self.is_running(role), "the {} exited\n{}", role.name(), self.logs());
            self.psql(role, "postgres", "SELECT pg_is_in_recovery()").as_deref() == Ok(role.in_recovery())
        });
        if role == Role::Replica {
            self.wait_for("the replica to stream from the primary", || {
                self.try_replica_sql("postgres", "SELECT status FROM pg_stat_wal_receiver").as_deref()
                    == Ok("streaming")
            });
        }
    }

    fn psql(&self, role: Role, db: &str, statement: &str) -> Result<String, String> {
        let port = self.port(role).to_string();
        let output = self
            .command("psql")
            .env("PGCONNECT_TIMEOUT", "5")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", &port])
            .args(["-U", "postgres", "-d", db, "-c", statement])
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim_end().to_string())
        } else {
            Err(format!(
                "psql on the {} ({db}) failed ({}) on {statement:?}: {}",
                role.name(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end()
            ))
        }
    }

    /// Polls `done` every 100 ms; after [`CLUSTER_TIMEOUT`] panics with the logs.
    fn wait_for(&self, what: &str, done: impl FnMut() -> bool) {
        child::poll_until(what, CLUSTER_TIMEOUT, || format!("\n{}", self.logs()), done);
    }
}

impl Drop for PostgresCluster {
    fn drop(&mut self) {
        self.kill(Role::Replica);
        self.kill(Role::Primary);
        child::remove_dir_unless_panicking(&self.dir, "postgres cluster");
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

/// `(uid, gid)` of `user`; panics with the way to create it.
fn user_ids(user: &str) -> (u32, u32) {
    let name = CString::new(user).unwrap();
    // SAFETY: a valid C string; the entry is copied out at once. getpwnam is not
    // thread-safe, but this runs once per cluster start and nothing else in the tests
    // reads the user database.
    unsafe {
        let entry = libc::getpwnam(name.as_ptr());
        assert!(
            !entry.is_null(),
            "the tests run as root and PostgreSQL does not: user {user} is missing, run `make setup` \
             (scripts/setup-postgres.sh creates it)"
        );
        ((*entry).pw_uid, (*entry).pw_gid)
    }
}

/// Two distinct free loopback ports, both held until both are picked.
fn free_ports() -> [u16; 2] {
    let free = || loop {
        if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, ports::candidate())) {
            return listener;
        }
    };
    let (a, b) = (free(), free());
    [a.local_addr().unwrap().port(), b.local_addr().unwrap().port()]
}

/// SIGKILL to the postmaster and to every process it started (found before the
/// postmaster dies: afterwards they belong to init), then reaps the postmaster.
fn kill_server(child: &mut Child) {
    if child.try_wait().unwrap().is_none() {
        let children = children_of(child.id() as libc::pid_t);
        child::signal(child, libc::SIGKILL);
        for pid in children {
            // SAFETY: at worst a pid reused since the scan (a backend that exited in
            // between), a risk a test machine can take.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    let _ = child.wait();
}

/// The processes whose parent is `parent` (from `/proc/<pid>/stat`).
fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        if ppid == Some(parent) {
            children.push(pid);
        }
    }
    children
}

/// Whether no process is attached to the shared memory named in the data directory's
/// `postmaster.pid` (line 7: "key id") any more: what a new postmaster checks before it
/// agrees to start there.
fn shared_memory_released(data: &Path) -> bool {
    let Ok(pid_file) = std::fs::read_to_string(data.join("postmaster.pid")) else { return true };
    let Some(id) = pid_file.lines().nth(6).and_then(|l| l.split_whitespace().nth(1)?.parse::<libc::c_int>().ok())
    else {
        return true;
    };
    // SAFETY: IPC_STAT only fills the struct; a removed segment makes it fail.
    unsafe {
        let mut stat: libc::shmid_ds = std::mem::zeroed();
        libc::shmctl(id, libc::IPC_STAT, &mut stat) != 0 || stat.shm_nattch == 0
    }
}
