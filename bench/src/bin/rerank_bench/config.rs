//! Every setting of rerank-bench: one clap struct, each flag with an env var twin.
//! Amounts left unset get the full or the `--quick` default in [`BenchConfig::plan`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use embedwire_bench::in_process::CeilingPlan;
use embedwire_bench::server_process::ServerCommand;
use embedwire_server::ServerConfig;

/// rerank-bench: Rerank calls of one query and 20 passages of ~60 tokens, closed loop
/// at concurrency 1..32, against a server with a cross-encoder (compared with the
/// same cross-encoder run in-process) and against one without (the bi-encoder
/// fallback).
#[derive(Debug, Clone, Parser)]
#[command(name = "rerank-bench", version, about)]
pub struct BenchConfig {
    /// A run of a few seconds: two batch sizes in-process, concurrency 1 and 4 for
    /// about a second each. Keeps the bench runnable from a test; its figures are rough.
    #[arg(long, env = "RERANK_BENCH_QUICK")]
    pub quick: bool,

    /// Cross-encoder directory, run in-process and passed to the server as
    /// --rerank-model-dir [default: built once by
    /// scripts/model/make_minilm_cross_encoder.py into CACHE_DIR/minilm-cross-encoder:
    /// all-MiniLM-L6-v2's encoder with a seeded head, a full-size 6-layer cross-encoder].
    #[arg(long, env = "EMBEDWIRE_RERANK_MODEL_DIR")]
    pub rerank_model_dir: Option<PathBuf>,

    /// Passages per Rerank call.
    #[arg(long, env = "RERANK_BENCH_TEXTS_PER_CALL", default_value_t = 20)]
    pub texts_per_call: usize,

    /// Concurrent closed-loop clients, one sweep point each [default: 1,2,4,8,16,32;
    /// --quick: 1,4].
    #[arg(long, env = "RERANK_BENCH_CONCURRENCY", value_delimiter = ',')]
    pub concurrency: Vec<usize>,

    /// Clients sharing one HTTP/2 connection.
    #[arg(long, env = "RERANK_BENCH_CLIENTS_PER_CONNECTION", default_value_t = 4)]
    pub clients_per_connection: usize,

    /// In-process batch sizes, in pairs per model call [default: 1,8,20,32,64;
    /// --quick: 1,20].
    #[arg(long, env = "RERANK_BENCH_BATCH_SIZES", value_delimiter = ',')]
    pub batch_sizes: Vec<usize>,

    /// Rounds the measurement is split into: each round runs every in-process batch
    /// size, then every concurrency against the cross-encoder server, so that on a
    /// machine whose speed drifts (this shared VM ran the same batch size at 38 and 60
    /// pairs/s a minute apart) the ceiling and the server sample the same stretch of
    /// it [default: 3, --quick: 1].
    #[arg(long, env = "RERANK_BENCH_ROUNDS")]
    pub rounds: Option<usize>,

    /// Seconds of each in-process batch size, split over the rounds [default: 3,
    /// --quick: 0.5].
    #[arg(long, env = "RERANK_BENCH_CEILING_SECS")]
    pub ceiling_secs: Option<f64>,

    /// Seconds of each concurrency's measured run, split over the rounds [default: 15,
    /// --quick: 1].
    #[arg(long, env = "RERANK_BENCH_RUN_SECS")]
    pub run_secs: Option<f64>,

    /// Seconds of unmeasured load before each measured run, in every round [default:
    /// 1, --quick: 0.3].
    #[arg(long, env = "RERANK_BENCH_WARMUP_SECS")]
    pub warmup_secs: Option<f64>,

    /// ONNX Runtime intra-op threads, for the in-process model and both servers alike
    /// [default: the server's default, the number of CPUs].
    #[arg(long, env = "RERANK_BENCH_INTRA_OP_THREADS")]
    pub intra_op_threads: Option<usize>,

    /// The embedwire-server binary [default: `cargo build -p embedwire-server` in this
    /// workspace, same profile as rerank-bench, then the binary next to it].
    #[arg(long, env = "RERANK_BENCH_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,

    /// One more flag for both servers, e.g. `--server-arg=--max-batch-tokens=8192`;
    /// repeat for several. Otherwise the servers run with their defaults, admission
    /// by queue time included (its refusals are counted, not hidden).
    #[arg(long = "server-arg", env = "RERANK_BENCH_SERVER_ARGS", value_delimiter = ' ', allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// Skip the bi-encoder sweep (a server without --rerank-model-dir).
    #[arg(long, env = "RERANK_BENCH_NO_BI_ENCODER")]
    pub no_bi_encoder: bool,

    /// The Python interpreter whose docstrings give the texts, and that builds the
    /// default cross-encoder [default: the venv `make setup` creates].
    #[arg(long, env = "RERANK_BENCH_PYTHON")]
    pub python: Option<PathBuf>,

    /// Where the extracted docstrings and the built cross-encoder are cached
    /// (git-ignored; the docstrings are shared with search-bench).
    #[arg(long, env = "RERANK_BENCH_CACHE_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/tmp"))]
    pub cache_dir: PathBuf,

    /// Where the CSV files and the markdown summary go.
    #[arg(long, env = "RERANK_BENCH_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/rerank"))]
    pub results_dir: PathBuf,
}

/// The resolved amounts of work of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The in-process batch sizes, their time in all (split over the rounds), and the
    /// warm-up before the first.
    pub ceiling: CeilingPlan,
    pub rounds: usize,
    /// Clients of each sweep point, in order.
    pub concurrency: Vec<usize>,
    /// Unmeasured load before each sweep point.
    pub warmup: Duration,
    /// Measured time of each sweep point, in all (split over the rounds).
    pub run_time: Duration,
}

impl BenchConfig {
    /// Checks the flags, so that a bad value fails before minutes of measuring.
    pub fn validate(&self) -> Result<(), String> {
        if self.texts_per_call == 0
            || self.clients_per_connection == 0
            || self.intra_op_threads == Some(0)
            || self.rounds == Some(0)
        {
            return Err(
                "--texts-per-call, --clients-per-connection, --intra-op-threads and --rounds must be at least 1".into(),
            );
        }
        if self.concurrency.contains(&0) || self.batch_sizes.contains(&0) {
            return Err("--concurrency and --batch-sizes must be at least 1 each".into());
        }
        let seconds =
            [("--ceiling-secs", self.ceiling_secs), ("--run-secs", self.run_secs), ("--warmup-secs", self.warmup_secs)];
        if let Some((flag, _)) = seconds.iter().find(|(_, value)| value.is_some_and(|s| !(0.0..3600.0).contains(&s))) {
            return Err(format!("{flag} must be between 0 and 3600 seconds"));
        }
        Ok(())
    }

    /// The amounts of work: explicit flags win, then the full or quick defaults.
    pub fn plan(&self) -> Plan {
        let pick = |explicit: Option<f64>, full: f64, quick: f64| {
            Duration::from_secs_f64(explicit.unwrap_or(if self.quick { quick } else { full }))
        };
        let or = |explicit: &Vec<usize>, full: &[usize], quick: &[usize]| {
            if !explicit.is_empty() {
                explicit.clone()
            } else if self.quick {
                quick.to_vec()
            } else {
                full.to_vec()
            }
        };
        Plan {
            ceiling: CeilingPlan {
                batch_sizes: or(&self.batch_sizes, &[1, 8, 20, 32, 64], &[1, 20]),
                time_per_size: pick(self.ceiling_secs, 3.0, 0.5),
                warmup: pick(None, 1.0, 0.2),
            },
            rounds: self.rounds.unwrap_or(if self.quick { 1 } else { 3 }),
            concurrency: or(&self.concurrency, &[1, 2, 4, 8, 16, 32], &[1, 4]),
            warmup: pick(self.warmup_secs, 1.0, 0.3),
            run_time: pick(self.run_secs, 15.0, 1.0),
        }
    }

    /// The interpreter that extracts the texts and builds the default cross-encoder.
    pub fn python(&self) -> Result<PathBuf, String> {
        embedwire_bench::corpus::python_or_venv(self.python.as_deref())
    }

    /// How to start a server: the bench's flags (the ONNX backend, the thread count
    /// when set, the cross-encoder when given), then --server-arg, which replaces a
    /// flag of the same name.
    pub fn server_command(&self, binary: PathBuf, rerank_model_dir: Option<&Path>) -> ServerCommand {
        let mut defaults: Vec<(&str, OsString)> = vec![("--backend", "onnx".into())];
        if let Some(threads) = self.intra_op_threads {
            defaults.push(("--intra-op-threads", threads.to_string().into()));
        }
        if let Some(dir) = rerank_model_dir {
            defaults.push(("--rerank-model-dir", dir.into()));
        }
        ServerCommand::new(binary, defaults, &self.server_args)
    }
}

/// The configuration a server started with `command` gives itself, so the in-process
/// model is loaded with exactly the ONNX settings, library and precision the server
/// runs with (its defaults, unless --server-arg changed them).
pub fn parsed(command: &ServerCommand) -> Result<ServerConfig, String> {
    let flags = std::iter::once(OsString::from("embedwire-server")).chain(command.args.iter().cloned());
    ServerConfig::try_parse_from(flags).map_err(|e| format!("the server's flags {:?}: {e}", command.args))
}
