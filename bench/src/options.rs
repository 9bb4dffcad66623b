//! The options every scenario flattens in, and what they resolve to: the work of a
//! full or `--quick` run, the server binary and flags, the model files, the results.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use clap::{Parser, builder::RangedU64ValueParser};
use embedwire_server::{ServerConfig, model::files::ModelFiles, model::onnx::OnnxSettings, model::precision};
use tonic::transport::Channel;

use crate::server_process::{ServerCommand, ServerProcess};

/// Options of every scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// A few seconds per part: every code path runs, the figures are rough (the tests run every scenario so).
    #[arg(long, env = "BENCH_QUICK")]
    pub quick: bool,
    /// The embedwire-server binary [default: build this workspace's in the bench's profile, use the one beside it].
    #[arg(long, env = "BENCH_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,
    /// One more server flag (`--server-arg=--max-batch-wait-us=0`), repeatable; replaces a bench default so named.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// Model directory, for the server and for in-process ceilings [default: the server's default].
    #[arg(long, env = "EMBEDWIRE_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// ONNX Runtime shared library [default: the server's default].
    #[arg(long, env = "EMBEDWIRE_ORT_LIBRARY")]
    pub ort_library: Option<PathBuf>,
    /// ONNX Runtime intra-op threads, in-process and in the server alike.
    #[arg(long, env = "BENCH_INTRA_OP_THREADS", default_value_t = 2, value_parser = at_least_one::<usize>())]
    pub intra_op_threads: usize,
    /// Where the results go [default: bench/results, or the scenario's folder in it].
    #[arg(long, env = "BENCH_RESULTS_DIR")]
    pub results_dir: Option<PathBuf>,
    /// Seconds of each measured run [default: the scenario's, shorter with --quick].
    #[arg(long, env = "BENCH_DURATION_SECS", value_parser = seconds)]
    pub duration_secs: Option<f64>,
    /// Seconds of unmeasured load before each run [default: the scenario's].
    #[arg(long, env = "BENCH_WARMUP_SECS", value_parser = seconds)]
    pub warmup_secs: Option<f64>,
    /// Concurrency levels to sweep, e.g. `1,4,16` [default: the scenario's].
    #[arg(long, env = "BENCH_CONCURRENCY", value_delimiter = ',', value_parser = at_least_one::<usize>())]
    pub concurrency: Vec<usize>,
}

/// The shape of a closed-loop Search load, for the scenarios that ingest and search.
#[derive(Debug, Clone, clap::Args)]
pub struct SearchLoad {
    /// Documents per Ingest call (at most the server's --max-documents-per-request).
    #[arg(long, default_value_t = 1000, value_parser = at_least_one::<usize>())]
    pub ingest_batch: usize,
    /// Concurrent clients of the Search runs (search: of its Embed runs too).
    #[arg(long, default_value_t = 16, value_parser = at_least_one::<usize>())]
    pub clients: usize,
    /// Clients sharing one HTTP/2 connection.
    #[arg(long, default_value_t = 4, value_parser = at_least_one::<usize>())]
    pub clients_per_connection: usize,
    /// Hits asked of each Search.
    #[arg(long, default_value_t = 5, value_parser = at_least_one::<u32>())]
    pub top_k: u32,
}

/// The parser of a count option: 0 is refused when the options are parsed, before anything is measured.
pub fn at_least_one<T>() -> RangedU64ValueParser<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    T::Error: std::error::Error + Send + Sync + 'static,
{
    RangedU64ValueParser::new().range(1..)
}

/// The parser of a seconds option: from 0 to an hour, so that a typo fails now, not after minutes of measuring.
pub fn seconds(text: &str) -> Result<f64, String> {
    let seconds: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if (0.0..3600.0).contains(&seconds) { Ok(seconds) } else { Err("not between 0 and 3600 seconds".into()) }
}

/// `count` HTTP/2 connections to `server`, for clients that share them.
pub async fn connections(server: &ServerProcess, count: usize) -> anyhow::Result<Vec<Channel>> {
    let mut channels = Vec::with_capacity(count);
    for _ in 0..count {
        channels.push(server.connect().await?);
    }
    Ok(channels)
}

pub use crate::child_process::program_output;

/// The model files the server and an in-process ceiling both load.
#[derive(Debug, Clone)]
pub struct ModelPaths {
    pub model_dir: PathBuf,
    /// The graph the precision picks in the model directory.
    pub graph: PathBuf,
    /// That precision, as the server's `--precision` names it.
    pub precision: &'static str,
    pub ort_library: PathBuf,
}

impl Common {
    pub fn pick<T>(&self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }

    /// `--duration-secs`, else the full or quick default.
    pub fn duration(&self, full_secs: f64, quick_secs: f64) -> Duration {
        Duration::from_secs_f64(self.duration_secs.unwrap_or(self.pick(full_secs, quick_secs)))
    }

    /// `--warmup-secs`, else the full or quick default.
    pub fn warmup(&self, full_secs: f64, quick_secs: f64) -> Duration {
        Duration::from_secs_f64(self.warmup_secs.unwrap_or(self.pick(full_secs, quick_secs)))
    }

    /// `--concurrency`, else the full or quick default.
    pub fn sweep(&self, full: &[usize], quick: &[usize]) -> Vec<usize> {
        if self.concurrency.is_empty() { self.pick(full, quick).to_vec() } else { self.concurrency.clone() }
    }

    /// `--results-dir`, else `bench/results/<folder>`.
    pub fn results(&self, folder: &str) -> PathBuf {
        let default = || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results").join(folder);
        self.results_dir.clone().unwrap_or_else(default)
    }

    /// The server binary to measure (built first when not given).
    pub fn server_binary(&self) -> anyhow::Result<PathBuf> {
        crate::server_binary::resolve(self.server_bin.as_deref())
    }

    /// The server's flags: the model files and thread count these options name, then the
    /// scenario's `defaults`, then `--server-arg`, each replacing an earlier flag of the same name.
    pub fn server_command(&self, binary: PathBuf, defaults: Vec<(&str, OsString)>) -> ServerCommand {
        let mut flags = vec![("--intra-op-threads", self.intra_op_threads.to_string().into())];
        flags.extend(self.model_flags());
        flags.retain(|(flag, _)| !defaults.iter().any(|(other, _)| other == flag));
        flags.extend(defaults);
        ServerCommand::new(binary, flags, &self.server_args)
    }

    /// The model directory, graph and ONNX Runtime library, resolved the way the
    /// server resolves them, so an in-process ceiling loads the same files.
    pub fn model_paths(&self, choice: precision::PrecisionChoice) -> anyhow::Result<ModelPaths> {
        let flags = self.model_flags().into_iter().flat_map(|(flag, path)| [flag.into(), path]);
        let server = ServerConfig::try_parse_from([OsString::from("embedwire-server")].into_iter().chain(flags))?;
        let model_dir = server.model_dir();
        let files = ModelFiles::read(&model_dir)?;
        let chosen = precision::resolve(choice, &model_dir, &files.onnx_path, precision::CpuInt8::detect())?;
        Ok(ModelPaths {
            model_dir,
            graph: chosen.graph,
            precision: chosen.precision.name(),
            ort_library: server.ort_library(),
        })
    }

    /// How the server runs ONNX Runtime with these options (its defaults, `--intra-op-threads`
    /// and any `--server-arg`), so an in-process ceiling runs the model as the server does.
    pub fn onnx_settings(&self) -> anyhow::Result<OnnxSettings> {
        let threads = [OsString::from("--intra-op-threads"), self.intra_op_threads.to_string().into()];
        let args = self.server_args.iter().map(OsString::from);
        let server =
            ServerConfig::try_parse_from([OsString::from("embedwire-server")].into_iter().chain(threads).chain(args))?;
        Ok(server.onnx_settings())
    }

    /// `--model-dir` and `--ort-library` where given: the server and the model files of a ceiling see the same.
    fn model_flags(&self) -> Vec<(&'static str, OsString)> {
        let given = [("--model-dir", &self.model_dir), ("--ort-library", &self.ort_library)];
        given.into_iter().filter_map(|(flag, path)| Some((flag, path.as_ref()?.into()))).collect()
    }
}
