//! Every setting of ghz-suite: one clap struct, each flag with an env var twin.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// The server's embedding backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Deterministic fake vectors: the transport alone.
    Pseudo,
    /// The real model.
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

/// ghz-suite: runs ghz with the configs checked in under `bench/ghz/` (Embed with
/// 1, 32 and 256 texts per call, EmbedStream, Search) at several concurrencies,
/// against a server with the pseudo backend and one with the real model, and keeps
/// ghz's JSON summaries under `bench/results/ghz/`.
#[derive(Debug, Clone, Parser)]
#[command(name = "ghz-suite", version, about)]
pub struct SuiteConfig {
    /// A run of a few seconds: 0.3 s runs at concurrency 1 and 16, 100 documents,
    /// calls still in flight at the end of a run cancelled.
    #[arg(long, env = "GHZ_SUITE_QUICK")]
    pub quick: bool,

    /// Regenerate the checked-in configs from the docstring corpus, then stop.
    #[arg(long)]
    pub write_configs: bool,

    /// Backends, each on its own fresh server.
    #[arg(long, env = "GHZ_SUITE_BACKENDS", value_enum, value_delimiter = ',', default_value = "pseudo,onnx")]
    pub backends: Vec<Backend>,

    /// Concurrencies (ghz workers, one connection each) [default: 1,16,64, --quick: 1,16].
    #[arg(long, env = "GHZ_SUITE_CONCURRENCY", value_delimiter = ',')]
    pub concurrency: Option<Vec<usize>>,

    /// Configs to run, by file stem [default: every *.json in the configs directory].
    #[arg(long, env = "GHZ_SUITE_CONFIGS", value_delimiter = ',')]
    pub configs: Vec<String>,

    /// Seconds each ghz run sends calls; calls in flight at the end are waited for
    /// [default: 2, --quick: 0.3].
    #[arg(long, env = "GHZ_SUITE_RUN_SECS")]
    pub run_secs: Option<f64>,

    /// Documents ingested before the Search runs [default: 1000, --quick: 100].
    #[arg(long, env = "GHZ_SUITE_SEARCH_DOCUMENTS")]
    pub search_documents: Option<usize>,

    /// ONNX Runtime intra-op threads (onnx backend).
    #[arg(long, env = "GHZ_SUITE_INTRA_OP_THREADS", default_value_t = 2)]
    pub intra_op_threads: usize,

    /// The ghz binary [default: CACHE/bin/ghz, where `make setup` installs it].
    #[arg(long, env = "GHZ_SUITE_GHZ")]
    pub ghz: Option<PathBuf>,

    /// The embedwire-server binary [default: built from this workspace].
    #[arg(long, env = "GHZ_SUITE_SERVER_BIN")]
    pub server_bin: Option<PathBuf>,

    /// One more flag for the server; repeat for several.
    #[arg(long = "server-arg", env = "GHZ_SUITE_SERVER_ARGS", value_delimiter = ' ', allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// The Python interpreter of the corpus extraction [default: CACHE/venv/bin/python].
    #[arg(long, env = "GHZ_SUITE_PYTHON")]
    pub python: Option<PathBuf>,

    /// The checked-in ghz configs; their proto paths are relative to the workspace.
    #[arg(long, env = "GHZ_SUITE_CONFIGS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/ghz"))]
    pub configs_dir: PathBuf,

    /// Where the extracted docstrings are cached.
    #[arg(long, env = "GHZ_SUITE_CACHE_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/tmp"))]
    pub cache_dir: PathBuf,

    /// Where the JSON summaries and ghz_summary.csv go.
    #[arg(long, env = "GHZ_SUITE_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/ghz"))]
    pub results_dir: PathBuf,
}

/// The resolved amounts of work.
#[derive(Debug, Clone)]
pub struct Plan {
    pub concurrency: Vec<usize>,
    pub run_time: Duration,
    pub search_documents: usize,
    /// Unmeasured ghz run on each fresh server.
    pub warmup: Duration,
    /// ghz's --duration-stop: `wait` counts the calls in flight when the duration
    /// ends (a full run: a 256-text call on the real model is never cut off);
    /// `close` cancels them (they count as errors), so that a quick run ends on time.
    pub duration_stop: &'static str,
}

impl SuiteConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.concurrency.as_ref().is_some_and(|c| c.is_empty() || c.contains(&0)) {
            return Err("--concurrency must list values of at least 1".into());
        }
        if self.run_secs.is_some_and(|s| !(s > 0.0 && s < 3600.0)) {
            return Err("--run-secs must be between 0 and 3600 seconds".into());
        }
        if self.search_documents == Some(0) || self.intra_op_threads == 0 || self.backends.is_empty() {
            return Err("--search-documents, --intra-op-threads and --backends must not be 0 or empty".into());
        }
        Ok(())
    }

    pub fn plan(&self) -> Plan {
        let quick = self.quick;
        Plan {
            concurrency: self.concurrency.clone().unwrap_or_else(|| if quick { vec![1, 16] } else { vec![1, 16, 64] }),
            run_time: Duration::from_secs_f64(self.run_secs.unwrap_or(if quick { 0.3 } else { 2.0 })),
            search_documents: self.search_documents.unwrap_or(if quick { 100 } else { 1000 }),
            warmup: Duration::from_secs_f64(if quick { 0.2 } else { 1.0 }),
            duration_stop: if quick { "close" } else { "wait" },
        }
    }
}
