//! Every setting of store-bench: one clap struct, each flag with an env var twin.
//! Amounts left unset get the full or the `--quick` default in [`BenchConfig::plan`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// store-bench: the same corpus ingested and searched through one embedwire server on
/// each store (the embedded store, and Weaviate clusters of 1 and 3 nodes), with the
/// real model; throughput, latency and the CPU each search and each chunk costs in
/// embedwire and in Weaviate.
#[derive(Debug, Clone, Parser)]
#[command(name = "store-bench", version, about)]
pub struct BenchConfig {
    /// A run of well under a minute: 200 documents, the embedded store and a 1-node
    /// Weaviate, 2 s of search each. Keeps the bench runnable from a test; its figures
    /// are rough.
    #[arg(long, env = "STORE_BENCH_QUICK")]
    pub quick: bool,

    /// Weaviate cluster sizes to measure, comma separated (one cluster and one server
    /// each, next to the embedded store) [default: 1,3, --quick: 1]. The targets are
    /// judged on the largest.
    #[arg(long, env = "STORE_BENCH_NODES", value_delimiter = ',')]
    pub nodes: Vec<usize>,

    /// ONNX Runtime intra-op threads of each server.
    #[arg(long, env = "STORE_BENCH_INTRA_OP_THREADS", default_value_t = 2)]
    pub intra_op_threads: usize,

    /// The embedwire-server binary [default: `cargo build -p embedwire-server` in this
    /// workspace, same profile as store-bench, then the binary next to store-bench].
    #[arg(long, env = "STORE_BENCH_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,

    /// One more flag for every server, e.g. `--server-arg=--write-consistency=ONE`;
    /// repeat for several (Weaviate flags reach the embedded server too, which
    /// ignores them).
    #[arg(long = "server-arg", env = "STORE_BENCH_SERVER_ARGS", value_delimiter = ' ', allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// The Python interpreter whose standard library and installed packages give the
    /// corpus [default: the venv `make setup` creates, CACHE/venv/bin/python].
    #[arg(long, env = "STORE_BENCH_PYTHON")]
    pub python: Option<PathBuf>,

    /// Where the extracted docstrings are cached (git-ignored; shared with search-bench).
    #[arg(long, env = "STORE_BENCH_CACHE_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/tmp"))]
    pub cache_dir: PathBuf,

    /// Documents ingested into every store [default: 10000, --quick: 200]: the same
    /// corpus as search-bench's.
    #[arg(long, env = "STORE_BENCH_DOCUMENTS")]
    pub documents: Option<usize>,

    /// Query texts (first sentences of one-line docstrings, not in the corpus).
    #[arg(long, env = "STORE_BENCH_QUERIES", default_value_t = 500)]
    pub queries: usize,

    /// Slices the corpus is ingested in: slice k goes into every store before slice
    /// k+1 goes into any, so that a change in the machine's load (other jobs) during
    /// the minutes this takes hits every store alike. Short turns (20 s or so) follow
    /// the load of other jobs better: a build landing on one store's 2-minute turn
    /// skewed a run by 2 x [default: 10, --quick: 1].
    #[arg(long, env = "STORE_BENCH_SLICES")]
    pub slices: Option<usize>,

    /// Documents per Ingest call (at most the server's --max-documents-per-request).
    #[arg(long, env = "STORE_BENCH_INGEST_BATCH", default_value_t = 1000)]
    pub ingest_batch: usize,

    /// Concurrent clients of the Search runs.
    #[arg(long, env = "STORE_BENCH_CLIENTS", default_value_t = 16)]
    pub clients: usize,

    /// Clients sharing one HTTP/2 connection.
    #[arg(long, env = "STORE_BENCH_CLIENTS_PER_CONNECTION", default_value_t = 4)]
    pub clients_per_connection: usize,

    /// Hits asked of each Search.
    #[arg(long, env = "STORE_BENCH_TOP_K", default_value_t = 5)]
    pub top_k: u32,

    /// Seconds of closed-loop Search on each store [default: 30, --quick: 2].
    #[arg(long, env = "STORE_BENCH_RUN_SECS")]
    pub run_secs: Option<f64>,

    /// The Search runs of the stores alternate in this many rounds of run-secs /
    /// rounds each, for the same reason as --slices [default: 6, --quick: 1].
    #[arg(long, env = "STORE_BENCH_ROUNDS")]
    pub rounds: Option<usize>,

    /// Where store_bench.csv and store_bench_stores.csv go.
    #[arg(long, env = "STORE_BENCH_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/store"))]
    pub results_dir: PathBuf,
}

/// The resolved amounts of work of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Weaviate cluster sizes, ascending, each once.
    pub nodes: Vec<usize>,
    /// Corpus documents.
    pub documents: usize,
    /// Ingest slices.
    pub slices: usize,
    /// One-text Embed calls on each fresh server before anything is measured, so
    /// that the model's first-batch allocations stay out of the figures.
    pub warmup_calls: usize,
    /// Unmeasured Search load on each store before its first round.
    pub search_warmup: Duration,
    /// Measured Search time of each store in total.
    pub run_time: Duration,
    /// Rounds the run time is split into.
    pub rounds: usize,
}

impl BenchConfig {
    /// Checks the flags, so that a bad value fails before minutes of measuring.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("--intra-op-threads", self.intra_op_threads),
            ("--documents", self.documents.unwrap_or(1)),
            ("--queries", self.queries),
            ("--slices", self.slices.unwrap_or(1)),
            ("--ingest-batch", self.ingest_batch),
            ("--clients", self.clients),
            ("--clients-per-connection", self.clients_per_connection),
            ("--top-k", self.top_k as usize),
            ("--rounds", self.rounds.unwrap_or(1)),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, value)| *value == 0) {
            return Err(format!("{flag} must be at least 1"));
        }
        if self.nodes.iter().any(|&n| n == 0 || n > 9) {
            return Err("--nodes: cluster sizes from 1 to 9".into());
        }
        if self.run_secs.is_some_and(|s| !(s > 0.0 && s < 3600.0)) {
            return Err("--run-secs must be between 0 and 3600 seconds".into());
        }
        Ok(())
    }

    /// The amounts of work: explicit flags win, then the full or quick defaults.
    pub fn plan(&self) -> Plan {
        let count = |explicit: Option<usize>, full: usize, quick: usize| {
            explicit.unwrap_or(if self.quick { quick } else { full })
        };
        let mut nodes =
            if self.nodes.is_empty() { if self.quick { vec![1] } else { vec![1, 3] } } else { self.nodes.clone() };
        nodes.sort_unstable();
        nodes.dedup();
        Plan {
            nodes,
            documents: count(self.documents, 10_000, 200),
            slices: count(self.slices, 10, 1),
            warmup_calls: count(None, 64, 16),
            search_warmup: Duration::from_secs_f64(if self.quick { 0.5 } else { 2.0 }),
            run_time: Duration::from_secs_f64(self.run_secs.unwrap_or(if self.quick { 2.0 } else { 30.0 })),
            rounds: count(self.rounds, 6, 1),
        }
    }

    /// The interpreter that extracts the corpus: explicit, or the venv of `make setup`.
    pub fn python(&self) -> Result<PathBuf, String> {
        embedwire_bench::corpus::python_or_venv(self.python.as_deref())
    }
}
