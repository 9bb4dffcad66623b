//! Every setting of search-bench: one clap struct, each flag with an env var twin.
//! Amounts left unset get the full or the `--quick` default in [`BenchConfig::plan`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// search-bench: measures in one run, with the real model, how ingest and search
/// compare with plain Embed on the same texts (a corpus of Python docstrings found on
/// this machine), and search latency while an ingest runs.
#[derive(Debug, Clone, Parser)]
#[command(name = "search-bench", version, about)]
pub struct BenchConfig {
    /// A run of well under a minute: 1k documents, 2 s runs. Keeps the bench runnable
    /// from a test; its figures are rough.
    #[arg(long, env = "SEARCH_BENCH_QUICK")]
    pub quick: bool,

    /// ONNX Runtime intra-op threads of the server.
    #[arg(long, env = "SEARCH_BENCH_INTRA_OP_THREADS", default_value_t = 2)]
    pub intra_op_threads: usize,

    /// The embedwire-server binary [default: `cargo build -p embedwire-server` in this
    /// workspace, same profile as search-bench, then the binary next to search-bench].
    #[arg(long, env = "SEARCH_BENCH_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,

    /// One more flag for the server, e.g. `--server-arg=--ingest-batch-documents=256`;
    /// repeat for several. Otherwise the server runs with its defaults.
    #[arg(long = "server-arg", env = "SEARCH_BENCH_SERVER_ARGS", value_delimiter = ' ', allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// The Python interpreter whose standard library and installed packages give the
    /// corpus [default: the venv `make setup` creates, CACHE/venv/bin/python: its
    /// packages are pinned, so every set-up machine gets the same corpus].
    #[arg(long, env = "SEARCH_BENCH_PYTHON")]
    pub python: Option<PathBuf>,

    /// Where the extracted docstrings are cached (git-ignored).
    #[arg(long, env = "SEARCH_BENCH_CACHE_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/tmp"))]
    pub cache_dir: PathBuf,

    /// Extract the docstrings again even when the cache is there.
    #[arg(long, env = "SEARCH_BENCH_REFRESH_CORPUS")]
    pub refresh_corpus: bool,

    /// Documents of the corpus: embedded with Embed, then ingested [default: 10000,
    /// --quick: 1000].
    #[arg(long, env = "SEARCH_BENCH_DOCUMENTS")]
    pub documents: Option<usize>,

    /// Further documents ingested while search latency is measured [default: 1000,
    /// --quick: 100]. They are texts not in the corpus, so they really cost
    /// embedding (a re-ingested text would reuse its stored vector).
    #[arg(long, env = "SEARCH_BENCH_SECOND_INGEST_DOCUMENTS")]
    pub second_ingest_documents: Option<usize>,

    /// Query texts (first sentences of one-line docstrings, not in the corpus).
    #[arg(long, env = "SEARCH_BENCH_QUERIES", default_value_t = 500)]
    pub queries: usize,

    /// Texts per Embed call when embedding the corpus.
    #[arg(long, env = "SEARCH_BENCH_EMBED_BATCH", default_value_t = 64)]
    pub embed_batch: usize,

    /// Concurrent clients embedding the corpus.
    #[arg(long, env = "SEARCH_BENCH_EMBED_CLIENTS", default_value_t = 4)]
    pub embed_clients: usize,

    /// Slices the corpus is cut into for the ingest comparison: each slice is
    /// embedded on the Embed server, then ingested on the Ingest server, so that a
    /// change in the machine's load (other jobs) hits both sides alike; 1 measures
    /// each side in one go [default: 5, --quick: 2].
    #[arg(long, env = "SEARCH_BENCH_SLICES")]
    pub slices: Option<usize>,

    /// Documents per Ingest call (at most the server's --max-documents-per-request).
    #[arg(long, env = "SEARCH_BENCH_INGEST_BATCH", default_value_t = 1000)]
    pub ingest_batch: usize,

    /// Concurrent clients of the Search and Embed runs.
    #[arg(long, env = "SEARCH_BENCH_CLIENTS", default_value_t = 16)]
    pub clients: usize,

    /// Clients sharing one HTTP/2 connection.
    #[arg(long, env = "SEARCH_BENCH_CLIENTS_PER_CONNECTION", default_value_t = 4)]
    pub clients_per_connection: usize,

    /// Hits asked of each Search.
    #[arg(long, env = "SEARCH_BENCH_TOP_K", default_value_t = 5)]
    pub top_k: u32,

    /// Seconds of the concurrent Search run, and of the Embed run [default: 10,
    /// --quick: 2].
    #[arg(long, env = "SEARCH_BENCH_RUN_SECS")]
    pub run_secs: Option<f64>,

    /// The concurrent Search and Embed runs alternate in this many rounds of
    /// run-secs / rounds each, for the same reason as --slices.
    #[arg(long, env = "SEARCH_BENCH_ROUNDS", default_value_t = 4)]
    pub rounds: usize,

    /// Seconds of the idle one-client Search latency run [default: 10, --quick: 2].
    #[arg(long, env = "SEARCH_BENCH_LATENCY_SECS")]
    pub latency_secs: Option<f64>,

    /// Milliseconds between the searches of the one-client latency runs (idle and
    /// during the second ingest). The client is open-loop: a search leaves on
    /// schedule even when the previous one is still waiting, so searches sample the
    /// server at moments that do not depend on how fast it answers.
    #[arg(long, env = "SEARCH_BENCH_LATENCY_INTERVAL_MS", default_value_t = 50)]
    pub latency_interval_ms: u64,

    /// Where search_bench.csv goes.
    #[arg(long, env = "SEARCH_BENCH_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub results_dir: PathBuf,
}

/// The resolved amounts of work of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Corpus documents.
    pub documents: usize,
    /// Documents of the ingest that runs under the latency measurement.
    pub second_ingest_documents: usize,
    /// Slices of the Embed / Ingest comparison.
    pub slices: usize,
    /// Texts embedded (untimed) on each fresh server before it is measured, so
    /// first-batch allocations stay out of the figures.
    pub warmup_texts: usize,
    /// Unmeasured load before each concurrent run.
    pub run_warmup: Duration,
    /// Measured concurrent Search and Embed runs, each side in total.
    pub run_time: Duration,
    /// Alternating rounds the run time is split into.
    pub rounds: usize,
    /// Unmeasured one-client searches before the idle latency run.
    pub latency_warmup_calls: usize,
    /// Measured idle one-client Search run.
    pub latency_time: Duration,
    /// Time between the searches of the one-client runs.
    pub latency_interval: Duration,
}

impl BenchConfig {
    /// Checks the flags, so that a bad value fails before minutes of measuring.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("--intra-op-threads", self.intra_op_threads),
            ("--documents", self.documents.unwrap_or(1)),
            ("--second-ingest-documents", self.second_ingest_documents.unwrap_or(1)),
            ("--queries", self.queries),
            ("--embed-batch", self.embed_batch),
            ("--embed-clients", self.embed_clients),
            ("--ingest-batch", self.ingest_batch),
            ("--slices", self.slices.unwrap_or(1)),
            ("--rounds", self.rounds),
            ("--clients", self.clients),
            ("--clients-per-connection", self.clients_per_connection),
            ("--top-k", self.top_k as usize),
            ("--latency-interval-ms", self.latency_interval_ms as usize),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, value)| *value == 0) {
            return Err(format!("{flag} must be at least 1"));
        }
        let seconds = [("--run-secs", self.run_secs), ("--latency-secs", self.latency_secs)];
        if let Some((flag, _)) = seconds.iter().find(|(_, value)| value.is_some_and(|s| !(s > 0.0 && s < 3600.0))) {
            return Err(format!("{flag} must be between 0 and 3600 seconds"));
        }
        Ok(())
    }

    /// The amounts of work: explicit flags win, then the full or quick defaults.
    pub fn plan(&self) -> Plan {
        let pick = |explicit: Option<f64>, full: f64, quick: f64| {
            Duration::from_secs_f64(explicit.unwrap_or(if self.quick { quick } else { full }))
        };
        let count = |explicit: Option<usize>, full: usize, quick: usize| {
            explicit.unwrap_or(if self.quick { quick } else { full })
        };
        Plan {
            documents: count(self.documents, 10_000, 1_000),
            second_ingest_documents: count(self.second_ingest_documents, 1_000, 100),
            slices: count(self.slices, 5, 2),
            warmup_texts: count(None, 512, 128),
            run_warmup: pick(None, 2.0, 0.5),
            run_time: pick(self.run_secs, 10.0, 2.0),
            rounds: self.rounds,
            latency_warmup_calls: count(None, 50, 10),
            latency_time: pick(self.latency_secs, 10.0, 2.0),
            latency_interval: Duration::from_millis(self.latency_interval_ms),
        }
    }

    /// The interpreter that extracts the corpus: explicit, or the venv of `make setup`.
    pub fn python(&self) -> Result<PathBuf, String> {
        embedwire_bench::corpus::python_or_venv(self.python.as_deref())
    }
}
