//! Every setting of gateway-bench: one clap struct, each flag with an env var twin.
//! Amounts left unset get the full or the `--quick` default in [`BenchConfig::plan`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// The gateways gateway-bench can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// embedwire-server with the real model, its in-process HTTP layer on its port.
    Embedwire,
    /// bench/baseline/app.py: FastAPI + uvicorn + onnxruntime + numpy.
    Baseline,
}

impl Target {
    /// The name used in tables and file names.
    pub fn name(self) -> &'static str {
        match self {
            Target::Embedwire => "embedwire",
            Target::Baseline => "baseline",
        }
    }
}

/// gateway-bench: the /v1 HTTP contract under the existing gateways' load pattern
/// (N workers over one HTTP/1.1 keep-alive client, five warm-up searches, then
/// `{"query": "example query about RAG gateways", "top_k": 5}`), on an index of real
/// documents, for embedwire and for the Python baseline in the same run; and, on
/// embedwire, /v1/search against the gRPC Search rpc on the same index and queries.
#[derive(Debug, Clone, Parser)]
#[command(name = "gateway-bench", version, about)]
pub struct BenchConfig {
    /// A run of well under a minute: 300 documents, 1 s runs. Keeps the bench
    /// runnable from a test; its figures are rough.
    #[arg(long, env = "GATEWAY_BENCH_QUICK")]
    pub quick: bool,

    /// The gateways to measure, in this order, each alone on the machine.
    #[arg(long, env = "GATEWAY_BENCH_TARGETS", value_delimiter = ',', default_value = "embedwire,baseline")]
    pub targets: Vec<Target>,

    /// Documents of the corpus ingested into each gateway [default: 10000, --quick: 300].
    #[arg(long, env = "GATEWAY_BENCH_DOCUMENTS")]
    pub documents: Option<usize>,

    /// Documents per POST /v1/ingest.
    #[arg(long, env = "GATEWAY_BENCH_INGEST_BATCH", default_value_t = 500)]
    pub ingest_batch: usize,

    /// Concurrent workers of the headline run (the targets are judged here).
    #[arg(long, env = "GATEWAY_BENCH_CONCURRENCY", default_value_t = 16)]
    pub concurrency: usize,

    /// Concurrencies of the throughput-against-concurrency sweep [default: 1,4,16,64,
    /// --quick: 1,16].
    #[arg(long, env = "GATEWAY_BENCH_SWEEP", value_delimiter = ',')]
    pub sweep: Option<Vec<usize>>,

    /// Seconds of the headline run [default: 10, --quick: 1].
    #[arg(long, env = "GATEWAY_BENCH_RUN_SECS")]
    pub run_secs: Option<f64>,

    /// Seconds of each sweep step [default: 3, --quick: 0.5].
    #[arg(long, env = "GATEWAY_BENCH_SWEEP_SECS")]
    pub sweep_secs: Option<f64>,

    /// Seconds of each side of the HTTP-against-gRPC search comparison, split in
    /// alternating rounds [default: 9, --quick: 1].
    #[arg(long, env = "GATEWAY_BENCH_COMPARE_SECS")]
    pub compare_secs: Option<f64>,

    /// Alternating rounds of the HTTP-against-gRPC comparison, so that a change in
    /// the machine's load hits both sides alike.
    #[arg(long, env = "GATEWAY_BENCH_ROUNDS", default_value_t = 3)]
    pub rounds: usize,

    /// Real query sentences rotated through by the HTTP-against-gRPC comparison.
    #[arg(long, env = "GATEWAY_BENCH_QUERIES", default_value_t = 500)]
    pub queries: usize,

    /// ONNX Runtime intra-op threads of both gateways.
    #[arg(long, env = "GATEWAY_BENCH_INTRA_OP_THREADS", default_value_t = 2)]
    pub intra_op_threads: usize,

    /// The embedwire-server binary [default: `cargo build -p embedwire-server` in this
    /// workspace, then the binary next to gateway-bench].
    #[arg(long, env = "GATEWAY_BENCH_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,

    /// One more flag for embedwire-server; repeat for several.
    #[arg(long = "server-arg", env = "GATEWAY_BENCH_SERVER_ARGS", value_delimiter = ' ', allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// The Python interpreter of the baseline and of the corpus extraction [default:
    /// the venv `make setup` creates, CACHE/venv/bin/python].
    #[arg(long, env = "GATEWAY_BENCH_PYTHON")]
    pub python: Option<PathBuf>,

    /// The baseline gateway's script.
    #[arg(long, env = "GATEWAY_BENCH_BASELINE_APP", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/baseline/app.py"))]
    pub baseline_app: PathBuf,

    /// Where the extracted docstrings are cached (git-ignored; shared with search-bench).
    #[arg(long, env = "GATEWAY_BENCH_CACHE_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/tmp"))]
    pub cache_dir: PathBuf,

    /// Where the CSV files go.
    #[arg(long, env = "GATEWAY_BENCH_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/gateway"))]
    pub results_dir: PathBuf,
}

/// The resolved amounts of work of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub documents: usize,
    pub sweep: Vec<usize>,
    pub run_time: Duration,
    pub sweep_time: Duration,
    pub compare_time: Duration,
    /// Unmeasured load before the comparison rounds.
    pub compare_warmup: Duration,
}

impl BenchConfig {
    /// Checks the flags, so that a bad value fails before minutes of measuring.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("--documents", self.documents.unwrap_or(1)),
            ("--ingest-batch", self.ingest_batch),
            ("--concurrency", self.concurrency),
            ("--rounds", self.rounds),
            ("--queries", self.queries),
            ("--intra-op-threads", self.intra_op_threads),
            ("--targets", self.targets.len()),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, value)| *value == 0) {
            return Err(format!("{flag} must be at least 1"));
        }
        if self.sweep.as_ref().is_some_and(|sweep| sweep.is_empty() || sweep.contains(&0)) {
            return Err("--sweep must list concurrencies of at least 1".into());
        }
        let seconds =
            [("--run-secs", self.run_secs), ("--sweep-secs", self.sweep_secs), ("--compare-secs", self.compare_secs)];
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
        Plan {
            documents: self.documents.unwrap_or(if self.quick { 300 } else { 10_000 }),
            sweep: self.sweep.clone().unwrap_or_else(|| if self.quick { vec![1, 16] } else { vec![1, 4, 16, 64] }),
            run_time: pick(self.run_secs, 10.0, 1.0),
            sweep_time: pick(self.sweep_secs, 3.0, 0.5),
            compare_time: pick(self.compare_secs, 9.0, 1.0),
            compare_warmup: pick(None, 1.0, 0.2),
        }
    }
}
