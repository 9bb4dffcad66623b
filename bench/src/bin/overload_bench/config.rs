//! Every setting of overload-bench: one clap struct, each flag with an env var
//! twin. Amounts left unset get the full or the `--quick` default in
//! [`BenchConfig::plan`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use embedwire_server::ServerConfig;

/// overload-bench: Embed offered at 3x the server's maximum throughput, open loop,
/// under several queue-time bounds (--max-queue-ms); reports how fast rejections
/// come and what accepted requests wait, against the targets.
#[derive(Debug, Clone, Parser)]
#[command(name = "overload-bench", version, about)]
pub struct BenchConfig {
    /// A run of a few seconds per phase, two bounds (the server's default and 20
    /// ms), to keep the bench runnable from a test; its figures mean little.
    #[arg(long, env = "OVERLOAD_BENCH_QUICK")]
    pub quick: bool,

    /// The --max-queue-ms values to overload after the server's default (derived
    /// from the model's speed, always run first), one fresh server each [default:
    /// 50, 20, 15, 10, 5; --quick: 20].
    #[arg(long, env = "OVERLOAD_BENCH_QUEUE_BOUNDS_MS", value_delimiter = ',')]
    pub queue_bounds_ms: Vec<u64>,

    /// Closed-loop clients measuring the maximum throughput (one text per call):
    /// several full batches (64) waiting at all times. With only one batch's worth,
    /// each batch's answers and the next requests leave the model idle in between:
    /// measured on a shared 2-core machine, 64 clients reached ~170 calls/s where
    /// 256 and 1024 reached ~270-300, as much as a deep open-loop queue.
    #[arg(long, env = "OVERLOAD_BENCH_MAX_CLIENTS", default_value_t = 256)]
    pub max_clients: usize,

    /// Seconds of the maximum's run [default: 10, --quick: 2].
    #[arg(long, env = "OVERLOAD_BENCH_MAX_SECS")]
    pub max_secs: Option<f64>,

    /// The unloaded latency's rate, as a fraction of the maximum.
    #[arg(long, env = "OVERLOAD_BENCH_UNLOADED_FRACTION", default_value_t = 0.5)]
    pub unloaded_fraction: f64,

    /// Seconds of the unloaded latency's run [default: 10, --quick: 2].
    #[arg(long, env = "OVERLOAD_BENCH_UNLOADED_SECS")]
    pub unloaded_secs: Option<f64>,

    /// The overload's rate, as a multiple of the maximum.
    #[arg(long, env = "OVERLOAD_BENCH_FACTOR", default_value_t = 3.0)]
    pub factor: f64,

    /// Seconds of each overload run [default: 20, --quick: 3].
    #[arg(long, env = "OVERLOAD_BENCH_OVERLOAD_SECS")]
    pub overload_secs: Option<f64>,

    /// HTTP/2 connections the load is spread over, at least: an overloaded
    /// server gets more, enough streams for every call its bound can admit (a
    /// connection carries 100 calls at once; see `STREAMS_PER_CONNECTION`).
    #[arg(long, env = "OVERLOAD_BENCH_CONNECTIONS", default_value_t = 8)]
    pub connections: usize,

    /// The embedwire-server binary [default: `cargo build -p embedwire-server` in this
    /// workspace, same profile as overload-bench, then the binary next to it].
    #[arg(long, env = "OVERLOAD_BENCH_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,

    /// One more flag for every server, e.g. `--server-arg=--max-batch-size=32`;
    /// repeat for several. Otherwise the servers run with their defaults (and the
    /// bound under test).
    #[arg(long = "server-arg", env = "OVERLOAD_BENCH_SERVER_ARGS", value_delimiter = ' ', allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// The Python interpreter whose docstrings give the texts [default: the venv
    /// `make setup` creates].
    #[arg(long, env = "OVERLOAD_BENCH_PYTHON")]
    pub python: Option<PathBuf>,

    /// Where the extracted docstrings are cached (git-ignored; shared with
    /// search-bench).
    #[arg(long, env = "OVERLOAD_BENCH_CACHE_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/tmp"))]
    pub cache_dir: PathBuf,

    /// Where overload_bench.csv and overload_bench_runs.csv go.
    #[arg(long, env = "OVERLOAD_BENCH_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub results_dir: PathBuf,
}

/// The resolved amounts of work of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Queue-time bounds to overload, in ms, in order; None is the server's
    /// default (no flag: derived from the model's measured speed).
    pub bounds_ms: Vec<Option<u64>>,
    /// Untimed calls on each fresh server before it is measured.
    pub warmup_calls: usize,
    pub max_time: Duration,
    pub unloaded_time: Duration,
    pub overload_time: Duration,
}

impl BenchConfig {
    /// Checks the flags, so that a bad value fails before minutes of measuring.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_clients == 0 || self.connections == 0 {
            return Err("--max-clients and --connections must be at least 1".into());
        }
        if self.queue_bounds_ms.contains(&0) {
            return Err("--queue-bounds-ms must be at least 1 each (0 turns the bound off)".into());
        }
        if !(self.unloaded_fraction > 0.0 && self.unloaded_fraction < 1.0) {
            return Err("--unloaded-fraction must be in (0, 1)".into());
        }
        if !(self.factor > 0.0 && self.factor.is_finite()) {
            return Err("--factor must be positive".into());
        }
        let seconds = [
            ("--max-secs", self.max_secs),
            ("--unloaded-secs", self.unloaded_secs),
            ("--overload-secs", self.overload_secs),
        ];
        if let Some((flag, _)) = seconds.iter().find(|(_, value)| value.is_some_and(|s| !(s > 0.0 && s < 3600.0))) {
            return Err(format!("{flag} must be between 0 and 3600 seconds"));
        }
        Ok(())
    }

    /// The amounts of work: explicit flags win, then the full or quick defaults.
    pub fn plan(&self) -> Result<Plan, String> {
        let server = ServerConfig::try_parse_from(["embedwire-server"]).map_err(|e| e.to_string())?;
        // The server's default: a fixed number when it has one, else no flag.
        let default_bound_ms = server.max_queue_ms;
        let bounds_ms = match (self.queue_bounds_ms.is_empty(), self.quick) {
            (false, _) => {
                std::iter::once(default_bound_ms).chain(self.queue_bounds_ms.iter().copied().map(Some)).collect()
            }
            (true, false) => vec![default_bound_ms, Some(50), Some(20), Some(15), Some(10), Some(5)],
            (true, true) => vec![default_bound_ms, Some(20)],
        };
        let pick = |explicit: Option<f64>, full: f64, quick: f64| {
            Duration::from_secs_f64(explicit.unwrap_or(if self.quick { quick } else { full }))
        };
        Ok(Plan {
            bounds_ms,
            warmup_calls: if self.quick { 64 } else { 512 },
            max_time: pick(self.max_secs, 10.0, 2.0),
            unloaded_time: pick(self.unloaded_secs, 10.0, 2.0),
            overload_time: pick(self.overload_secs, 20.0, 3.0),
        })
    }

    /// The interpreter that extracts the texts: explicit, or the venv of `make setup`.
    pub fn python(&self) -> Result<PathBuf, String> {
        embedwire_bench::corpus::python_or_venv(self.python.as_deref())
    }
}
