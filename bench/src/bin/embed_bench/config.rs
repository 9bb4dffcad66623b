//! Every setting of embed-bench: one clap struct, each flag with an env var twin.
//! Durations left unset get the full or the `--quick` default in [`BenchConfig::plan`].

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use embedwire_server::ServerConfig;

/// embed-bench: measures in one run the in-process ONNX ceiling and the real server's
/// throughput, latency, memory and cold start, and compares them with their targets.
#[derive(Debug, Clone, Parser)]
#[command(name = "embed-bench", version, about)]
pub struct BenchConfig {
    /// A few seconds in total: three batch sizes, ~1 s runs, one cold start. Keeps
    /// the bench runnable from a test; its figures are rough.
    #[arg(long, env = "EMBED_BENCH_QUICK")]
    pub quick: bool,

    /// ONNX Runtime intra-op threads, for the in-process model and the server alike.
    #[arg(long, env = "EMBED_BENCH_INTRA_OP_THREADS", default_value_t = 2)]
    pub intra_op_threads: usize,

    /// The embedwire-server binary [default: `cargo build -p embedwire-server` in this
    /// workspace, same profile as embed-bench, then the binary next to embed-bench].
    #[arg(long, env = "EMBED_BENCH_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,

    /// Model directory, used in-process and passed to the server [default: the
    /// server's default].
    #[arg(long, env = "EMBEDWIRE_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,

    /// The graph to measure, in-process and in the server (`--precision`): fp32
    /// (model.onnx) or int8 (model_int8.onnx beside it). Run the bench once per
    /// precision, each into its own --results-dir, to compare them.
    #[arg(long, env = "EMBED_BENCH_PRECISION", value_enum, default_value = "fp32")]
    pub precision: embedwire_server::model::precision::PrecisionChoice,

    /// ONNX Runtime shared library, used in-process and passed to the server
    /// [default: the server's default].
    #[arg(long, env = "EMBEDWIRE_ORT_LIBRARY")]
    pub ort_library: Option<PathBuf>,

    /// One more flag for the server, e.g. `--server-arg=--max-batch-wait-us=0`;
    /// repeat for several.
    #[arg(long = "server-arg", env = "EMBED_BENCH_SERVER_ARGS", value_delimiter = ' ', allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// Concurrent clients of the throughput run.
    #[arg(long, env = "EMBED_BENCH_CLIENTS", default_value_t = 32)]
    pub clients: usize,

    /// Clients sharing one HTTP/2 connection in the throughput run.
    #[arg(long, env = "EMBED_BENCH_CLIENTS_PER_CONNECTION", default_value_t = 4)]
    pub clients_per_connection: usize,

    /// Seconds of each in-process batch size [default: 3, --quick: 0.5].
    #[arg(long, env = "EMBED_BENCH_CEILING_SECS")]
    pub ceiling_secs: Option<f64>,

    /// Seconds of the throughput run [default: 10, --quick: 1].
    #[arg(long, env = "EMBED_BENCH_THROUGHPUT_SECS")]
    pub throughput_secs: Option<f64>,

    /// Seconds of the concurrency-1 latency run [default: 5, --quick: 1].
    #[arg(long, env = "EMBED_BENCH_LATENCY_SECS")]
    pub latency_secs: Option<f64>,

    /// Server starts timed for the cold-start median [default: 3, --quick: 1].
    #[arg(long, env = "EMBED_BENCH_COLD_STARTS")]
    pub cold_starts: Option<usize>,

    /// Where the CSV files go.
    #[arg(long, env = "EMBED_BENCH_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub results_dir: PathBuf,
}

/// The resolved amounts of work of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// In-process batch sizes; always starts with 1, whose latency the target uses.
    pub batch_sizes: Vec<usize>,
    /// Measured time per in-process batch size.
    pub ceiling_time: Duration,
    /// Unmeasured in-process run before the first size, so allocation and thread
    /// start-up stay out of the figures.
    pub ceiling_warmup: Duration,
    /// Unmeasured server load before the throughput run.
    pub throughput_warmup: Duration,
    /// Measured throughput run.
    pub throughput_time: Duration,
    /// Measured concurrency-1 run.
    pub latency_time: Duration,
    /// Unmeasured sequential calls before the latency run.
    pub latency_warmup_calls: usize,
    /// Server starts timed.
    pub cold_starts: usize,
}

impl BenchConfig {
    /// Checks the flags, so that a bad value fails before minutes of measuring.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("--intra-op-threads", self.intra_op_threads),
            ("--clients", self.clients),
            ("--clients-per-connection", self.clients_per_connection),
            ("--cold-starts", self.cold_starts.unwrap_or(1)),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, value)| *value == 0) {
            return Err(format!("{flag} must be at least 1"));
        }
        let seconds = [
            ("--ceiling-secs", self.ceiling_secs),
            ("--throughput-secs", self.throughput_secs),
            ("--latency-secs", self.latency_secs),
        ];
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
            batch_sizes: if self.quick { vec![1, 8, 32] } else { vec![1, 2, 4, 8, 16, 32, 64] },
            ceiling_time: pick(self.ceiling_secs, 3.0, 0.5),
            ceiling_warmup: pick(None, 1.0, 0.2),
            throughput_warmup: pick(None, 2.0, 0.3),
            throughput_time: pick(self.throughput_secs, 10.0, 1.0),
            latency_time: pick(self.latency_secs, 5.0, 1.0),
            latency_warmup_calls: if self.quick { 10 } else { 50 },
            cold_starts: self.cold_starts.unwrap_or(if self.quick { 1 } else { 3 }),
        }
    }

    /// The model directory and ONNX Runtime library, resolved the way the server
    /// resolves them, so both sides load the same files.
    pub fn model_paths(&self) -> Result<ModelPaths, String> {
        let mut flags: Vec<OsString> = vec!["embedwire-server".into()];
        if let Some(dir) = &self.model_dir {
            flags.extend(["--model-dir".into(), dir.into()]);
        }
        if let Some(library) = &self.ort_library {
            flags.extend(["--ort-library".into(), library.into()]);
        }
        let server = ServerConfig::try_parse_from(flags).map_err(|e| e.to_string())?;
        let model_dir = server.model_dir();
        let files = embedwire_server::model::files::ModelFiles::read(&model_dir).map_err(|e| e.to_string())?;
        let cpu = embedwire_server::model::precision::CpuInt8::detect();
        let chosen = embedwire_server::model::precision::resolve(self.precision, &model_dir, &files.onnx_path, cpu)
            .map_err(|e| e.to_string())?;
        Ok(ModelPaths {
            model_dir,
            graph: chosen.graph,
            precision: chosen.precision.name(),
            ort_library: server.ort_library(),
        })
    }
}

/// The files both the in-process model and the server load.
#[derive(Debug, Clone)]
pub struct ModelPaths {
    /// The model directory (model.onnx, tokenizer.json, configs).
    pub model_dir: PathBuf,
    /// The graph the precision picks in it.
    pub graph: PathBuf,
    /// Its precision, as the server's --precision names it.
    pub precision: &'static str,
    /// The ONNX Runtime shared library.
    pub ort_library: PathBuf,
}
