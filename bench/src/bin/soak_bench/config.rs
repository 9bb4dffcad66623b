//! Every setting of soak-bench: one clap struct, each flag with an env var twin.
//! Amounts left unset get the full or the `--quick` default in [`BenchConfig::plan`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// soak-bench: mixed Embed / Search / Ingest load on the real server at 80% of its
/// measured maximum, open loop, for ten minutes; reports errors, RSS growth and p99
/// drift against the targets.
#[derive(Debug, Clone, Parser)]
#[command(name = "soak-bench", version, about)]
pub struct BenchConfig {
    /// A run of about ten seconds of load (2 s windows), to keep the bench
    /// runnable from a test; its figures mean little.
    #[arg(long, env = "SOAK_BENCH_QUICK")]
    pub quick: bool,

    /// Seconds of soak load, the warm-up window included [default: 600, --quick: 6].
    #[arg(long, env = "SOAK_BENCH_DURATION_SECS")]
    pub duration_secs: Option<u64>,

    /// Seconds per window: RSS and p99 are compared window against window
    /// [default: 60, --quick: 2].
    #[arg(long, env = "SOAK_BENCH_WINDOW_SECS")]
    pub window_secs: Option<u64>,

    /// Leading windows left out of the comparison: allocators, ONNX Runtime's
    /// arena and the index settle in them.
    #[arg(long, env = "SOAK_BENCH_WARMUP_WINDOWS", default_value_t = 1)]
    pub warmup_windows: usize,

    /// The soak's rate as a fraction of the measured maximum.
    #[arg(long, env = "SOAK_BENCH_LOAD_FRACTION", default_value_t = 0.8)]
    pub load_fraction: f64,

    /// A fixed soak rate in calls/s instead of a fraction of a measured maximum
    /// (skips the maximum's measurement).
    #[arg(long, env = "SOAK_BENCH_RATE")]
    pub rate: Option<f64>,

    /// Seconds of the closed-loop run that measures the mix's maximum rate
    /// [default: 20, --quick: 2].
    #[arg(long, env = "SOAK_BENCH_MAX_SECS")]
    pub max_secs: Option<f64>,

    /// Concurrent closed-loop clients of that run: enough to keep the model busy
    /// (an Embed carries up to 32 paragraphs, tens of ms of model time each), few
    /// enough that their queue stays within the server's queue-time bound.
    #[arg(long, env = "SOAK_BENCH_MAX_CLIENTS", default_value_t = 8)]
    pub max_clients: usize,

    /// Percent of calls that are Embed, Search and Ingest.
    #[arg(long, env = "SOAK_BENCH_MIX", value_delimiter = ',', default_values_t = [70, 25, 5])]
    pub mix: Vec<u32>,

    /// Most texts of one Embed call (each call draws 1 to this many).
    #[arg(long, env = "SOAK_BENCH_EMBED_MAX_TEXTS", default_value_t = 32)]
    pub embed_max_texts: usize,

    /// Documents per Ingest call of the soak.
    #[arg(long, env = "SOAK_BENCH_INGEST_BATCH", default_value_t = 4)]
    pub ingest_batch: usize,

    /// Document ids the soak's ingests cycle through (upserts once they all
    /// exist), so the index stops growing and RSS growth shows leaks rather than
    /// data [default: 200, --quick: 40]: at 5% of a few calls/s and 4 documents a
    /// call, the ids wrap within the first minutes.
    #[arg(long, env = "SOAK_BENCH_INGEST_IDS")]
    pub ingest_ids: Option<usize>,

    /// Hits asked of each Search.
    #[arg(long, env = "SOAK_BENCH_TOP_K", default_value_t = 10)]
    pub top_k: u32,

    /// Documents ingested (to COMPLETED) before any load, so searches run on a
    /// real index [default: 3000, --quick: 200].
    #[arg(long, env = "SOAK_BENCH_DOCUMENTS")]
    pub documents: Option<usize>,

    /// HTTP/2 connections the load is spread over.
    #[arg(long, env = "SOAK_BENCH_CONNECTIONS", default_value_t = 4)]
    pub connections: usize,

    /// The embedwire-server binary [default: `cargo build -p embedwire-server` in this
    /// workspace, same profile as soak-bench, then the binary next to soak-bench].
    #[arg(long, env = "SOAK_BENCH_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,

    /// One more flag for the server, e.g. `--server-arg=--max-in-flight-inputs=256`;
    /// repeat for several. Otherwise the server runs with its defaults.
    #[arg(long = "server-arg", env = "SOAK_BENCH_SERVER_ARGS", value_delimiter = ' ', allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// The Python interpreter whose docstrings give the corpus [default: the venv
    /// `make setup` creates].
    #[arg(long, env = "SOAK_BENCH_PYTHON")]
    pub python: Option<PathBuf>,

    /// Where the extracted docstrings are cached (git-ignored; shared with
    /// search-bench).
    #[arg(long, env = "SOAK_BENCH_CACHE_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/tmp"))]
    pub cache_dir: PathBuf,

    /// Where soak_bench.csv and soak_bench_windows.csv go.
    #[arg(long, env = "SOAK_BENCH_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub results_dir: PathBuf,
}

/// The resolved amounts of work of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Documents ingested before the load.
    pub documents: usize,
    /// Texts the soak's ingests draw from (not in the index beforehand).
    pub ingest_texts: usize,
    /// Ids the soak's ingests cycle through.
    pub ingest_ids: usize,
    /// The closed-loop run measuring the maximum.
    pub max_time: Duration,
    /// One comparison window.
    pub window: Duration,
    /// Windows of the soak, warm-up included.
    pub windows: usize,
    /// Longest wait for the ingest backlog to drain after the load.
    pub drain_timeout: Duration,
}

impl Plan {
    /// The soak's length.
    pub fn soak_time(&self) -> Duration {
        self.window * self.windows as u32
    }
}

impl BenchConfig {
    /// Checks the flags, so that a bad value fails before minutes of measuring.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("--max-clients", self.max_clients),
            ("--embed-max-texts", self.embed_max_texts),
            ("--ingest-batch", self.ingest_batch),
            ("--ingest-ids", self.ingest_ids.unwrap_or(1)),
            ("--top-k", self.top_k as usize),
            ("--documents", self.documents.unwrap_or(1)),
            ("--connections", self.connections),
            ("--window-secs", self.window_secs.unwrap_or(1) as usize),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, value)| *value == 0) {
            return Err(format!("{flag} must be at least 1"));
        }
        if self.mix.len() != 3 || self.mix.iter().sum::<u32>() == 0 {
            return Err("--mix takes three percentages (Embed,Search,Ingest), not all zero".into());
        }
        if !(self.load_fraction > 0.0 && self.load_fraction <= 1.0) {
            return Err("--load-fraction must be in (0, 1]".into());
        }
        if self.rate.is_some_and(|rate| !(rate > 0.0 && rate.is_finite())) {
            return Err("--rate must be positive".into());
        }
        if self.max_secs.is_some_and(|s| !(s > 0.0 && s < 3600.0)) {
            return Err("--max-secs must be between 0 and 3600 seconds".into());
        }
        let plan = self.plan();
        if self.ingest_batch > plan.ingest_ids {
            return Err("--ingest-batch cannot exceed --ingest-ids (one call would upsert an id twice)".into());
        }
        if plan.windows < self.warmup_windows + 2 {
            return Err(format!(
                "--duration-secs {} holds {} windows of {} s: the warm-up ({}) and at least two more are needed \
                 (a first and a last to compare)",
                plan.soak_time().as_secs(),
                plan.windows,
                plan.window.as_secs(),
                self.warmup_windows
            ));
        }
        Ok(())
    }

    /// The amounts of work: explicit flags win, then the full or quick defaults.
    pub fn plan(&self) -> Plan {
        let count = |explicit: Option<usize>, full: usize, quick: usize| {
            explicit.unwrap_or(if self.quick { quick } else { full })
        };
        let window = count(self.window_secs.map(|s| s as usize), 60, 2).max(1) as u64;
        let duration = count(self.duration_secs.map(|s| s as usize), 600, 6) as u64;
        let ingest_ids = count(self.ingest_ids, 200, 40);
        Plan {
            documents: count(self.documents, 3000, 200),
            // Twice the ids, so an upsert usually brings a new text to embed.
            ingest_texts: 2 * ingest_ids,
            ingest_ids,
            max_time: Duration::from_secs_f64(self.max_secs.unwrap_or(if self.quick { 2.0 } else { 20.0 })),
            window: Duration::from_secs(window),
            windows: (duration / window) as usize,
            drain_timeout: Duration::from_secs(if self.quick { 30 } else { 120 }),
        }
    }

    /// The interpreter that extracts the corpus: explicit, or the venv of `make setup`.
    pub fn python(&self) -> Result<PathBuf, String> {
        embedwire_bench::corpus::python_or_venv(self.python.as_deref())
    }
}
