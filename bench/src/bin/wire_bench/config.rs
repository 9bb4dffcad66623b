//! Every setting of wire-bench: one clap struct, each flag with an env var twin.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// The server's embedding backend during the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Deterministic fake vectors: the transport and encodings alone (the target's
    /// setting).
    Pseudo,
    /// The real model: what the encoding costs next to the model.
    Onnx,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Pseudo => "pseudo",
            Backend::Onnx => "onnx",
        }
    }
}

/// wire-bench: the same texts embedded by the same server, answered as gRPC bytes
/// in each dtype and as HTTP JSON floats, base64 and octet-stream: requests/s,
/// latency percentiles, bytes per response on the wire, server encode and client
/// decode cost (Rust and Python), at the same concurrency with one connection per
/// worker on both sides.
#[derive(Debug, Clone, Parser)]
#[command(name = "wire-bench", version, about)]
pub struct BenchConfig {
    /// A run of a few seconds; its figures are rough.
    #[arg(long, env = "WIRE_BENCH_QUICK")]
    pub quick: bool,

    /// The server's backend.
    #[arg(long, env = "WIRE_BENCH_BACKEND", value_enum, default_value_t = Backend::Pseudo)]
    pub backend: Backend,

    /// Texts per call (real query sentences from the docstring corpus).
    #[arg(long, env = "WIRE_BENCH_TEXTS", default_value_t = 256)]
    pub texts: usize,

    /// Concurrent workers per variant, each with its own connection (HTTP/1.1
    /// keep-alive or HTTP/2), so both sides have the same connection count.
    #[arg(long, env = "WIRE_BENCH_CONCURRENCY", default_value_t = 16)]
    pub concurrency: usize,

    /// Variants to measure [default: all], by name: grpc_float32, grpc_float16,
    /// grpc_int8, grpc_ubinary, grpc_float32_list, http_json_float,
    /// http_json_base64, http_octet_stream, http_embed_json.
    #[arg(long, env = "WIRE_BENCH_VARIANTS", value_delimiter = ',')]
    pub variants: Vec<String>,

    /// Seconds of load per variant, split over the rounds [default: 5, --quick: 0.4].
    #[arg(long, env = "WIRE_BENCH_RUN_SECS")]
    pub run_secs: Option<f64>,

    /// Rounds the variants alternate in, so a change in the machine's load hits them
    /// alike [default: 2, --quick: 1].
    #[arg(long, env = "WIRE_BENCH_ROUNDS")]
    pub rounds: Option<usize>,

    /// Seconds of the one-client run per variant that measures server CPU per call
    /// [default: 1, --quick: 0.2].
    #[arg(long, env = "WIRE_BENCH_PROBE_SECS")]
    pub probe_secs: Option<f64>,

    /// ONNX Runtime intra-op threads (onnx backend).
    #[arg(long, env = "WIRE_BENCH_INTRA_OP_THREADS", default_value_t = 2)]
    pub intra_op_threads: usize,

    /// The embedwire-server binary [default: built from this workspace].
    #[arg(long, env = "WIRE_BENCH_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,

    /// One more flag for the server; repeat for several.
    #[arg(long = "server-arg", env = "WIRE_BENCH_SERVER_ARGS", value_delimiter = ' ', allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// The Python interpreter of the corpus extraction and the Python decode
    /// benchmark [default: CACHE/venv/bin/python].
    #[arg(long, env = "WIRE_BENCH_PYTHON")]
    pub python: Option<PathBuf>,

    /// The Python decode benchmark script.
    #[arg(long, env = "WIRE_BENCH_DECODE_SCRIPT", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/decode_bench.py"))]
    pub decode_script: PathBuf,

    /// The proto directory (for the Python decode benchmark's generated classes).
    #[arg(long, env = "WIRE_BENCH_PROTO_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto"))]
    pub proto_dir: PathBuf,

    /// Where the extracted docstrings are cached (git-ignored; shared with the other
    /// benches).
    #[arg(long, env = "WIRE_BENCH_CACHE_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/tmp"))]
    pub cache_dir: PathBuf,

    /// Where the CSV files go (the captured answers go to a `bodies` directory in it).
    #[arg(long, env = "WIRE_BENCH_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/wire"))]
    pub results_dir: PathBuf,
}

/// The resolved amounts of work.
#[derive(Debug, Clone)]
pub struct Plan {
    pub run_time: Duration,
    pub rounds: usize,
    pub probe_time: Duration,
    /// Unmeasured load of each variant before its first round.
    pub warmup: Duration,
    /// Time spent repeating each decode or encode in the microbenchmarks.
    pub micro_time: Duration,
    /// Seconds per variant of the Python decode benchmark.
    pub python_secs: f64,
}

impl BenchConfig {
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("--texts", self.texts),
            ("--concurrency", self.concurrency),
            ("--rounds", self.rounds.unwrap_or(1)),
            ("--intra-op-threads", self.intra_op_threads),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, value)| *value == 0) {
            return Err(format!("{flag} must be at least 1"));
        }
        let seconds = [("--run-secs", self.run_secs), ("--probe-secs", self.probe_secs)];
        if let Some((flag, _)) = seconds.iter().find(|(_, value)| value.is_some_and(|s| !(s > 0.0 && s < 3600.0))) {
            return Err(format!("{flag} must be between 0 and 3600 seconds"));
        }
        Ok(())
    }

    pub fn plan(&self) -> Plan {
        let pick = |explicit: Option<f64>, full: f64, quick: f64| {
            Duration::from_secs_f64(explicit.unwrap_or(if self.quick { quick } else { full }))
        };
        Plan {
            run_time: pick(self.run_secs, 5.0, 0.4),
            rounds: self.rounds.unwrap_or(if self.quick { 1 } else { 2 }),
            probe_time: pick(self.probe_secs, 1.0, 0.2),
            warmup: pick(None, 0.5, 0.1),
            micro_time: pick(None, 0.3, 0.05),
            python_secs: if self.quick { 0.05 } else { 0.3 },
        }
    }
}
