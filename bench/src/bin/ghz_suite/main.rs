//! ghz-suite: the gRPC calls under ghz, the community's gRPC load tool, so that the
//! figures can be checked with a tool the bench did not write. For each backend
//! (pseudo: the transport alone; onnx: the real model), on a fresh server: the
//! configs of `bench/ghz/` (Embed with 1, 32 and 256 texts per call, EmbedStream
//! with 8 messages of 32 texts, Search on an index of docstring paragraphs) at
//! concurrency 1, 16 and 64, a few seconds each. ghz's JSON summaries go to
//! `bench/results/ghz/<backend>/`, one line per run to `ghz_summary.csv`.
//!
//! The server's admission limits are lifted: --max-in-flight-inputs is raised to the
//! largest offered load (64 x 256 texts) and the queue-time bound (--max-queue-ms)
//! is off, so that every cell measures throughput at saturation rather than
//! RESOURCE_EXHAUSTED answers; any error ghz sees is still reported. (The
//! overload-bench measures admission itself.)
//!
//! # Layout
//! - [`config`]: the flags and the amounts of work of a full or `--quick` run.
//! - [`configs`]: the checked-in ghz configs: writing and reading them.
//! - [`runner`]: one ghz run and its JSON report.
//! - [`report`]: the table and the CSV file.

mod config;
mod configs;
mod report;
mod runner;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use embedwire_bench::cpu::CpuWindow;
use embedwire_bench::latency::ms;
use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use embedwire_bench::{corpus, ingest, server_binary};
use embedwire_server::ServerConfig;

use crate::config::{Backend, Plan, SuiteConfig};
use crate::configs::SuiteFile;
use crate::report::Entry;

/// Documents per Ingest call when populating the index.
const INGEST_BATCH: usize = 500;

fn main() -> anyhow::Result<()> {
    let config = SuiteConfig::parse();
    config.validate().map_err(anyhow::Error::msg)?;
    let plan = config.plan();
    let python = corpus::python_or_venv(config.python.as_deref()).map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    if config.write_configs {
        let docstrings = corpus::docstrings(&python, &config.cache_dir, false)?;
        let queries = corpus::select(&docstrings, 0, 0, 256)?.queries;
        for path in configs::write_all(&config.configs_dir, &queries)? {
            println!("wrote {}", path.display());
        }
        return Ok(());
    }
    let files = configs::read_all(&config.configs_dir, &config.configs)?;
    let ghz = ghz_binary(&config)?;
    let server_bin = server_binary::resolve(config.server_bin.as_deref())?;
    let documents = if files.iter().any(|f| f.is_search) {
        let docstrings = corpus::docstrings(&python, &config.cache_dir, false)?;
        corpus::select(&docstrings, plan.search_documents, 0, 1)?.documents
    } else {
        Vec::new()
    };
    println!(
        "ghz-suite{}: {} configs x concurrency {:?} x backends {:?}, {:.1} s per run, {} documents for Search",
        if config.quick { " --quick" } else { "" },
        files.len(),
        plan.concurrency,
        config.backends.iter().map(|b| b.name()).collect::<Vec<_>>(),
        plan.run_time.as_secs_f64(),
        documents.len()
    );
    let runtime = tokio::runtime::Runtime::new()?;
    let mut entries = Vec::new();
    for &backend in &config.backends {
        let command = server_command(&config, &plan, &files, backend, server_bin.clone());
        entries.extend(runtime.block_on(run_backend(&config, &plan, &files, backend, &command, &ghz, &documents))?);
    }
    println!();
    print!("{}", report::table(&entries));
    println!("wrote {}", report::write_csv(&config.results_dir, &entries)?.display());
    println!("run time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The ghz binary: explicit, or where `make setup` installs it.
fn ghz_binary(config: &SuiteConfig) -> anyhow::Result<PathBuf> {
    let ghz = match &config.ghz {
        Some(path) => path.clone(),
        None => ServerConfig::try_parse_from(["embedwire-server"])?.cache_dir().join("bin/ghz"),
    };
    anyhow::ensure!(ghz.is_file(), "no ghz at {} (run `make setup`, or pass --ghz)", ghz.display());
    Ok(ghz)
}

fn server_command(
    config: &SuiteConfig,
    plan: &Plan,
    files: &[SuiteFile],
    backend: Backend,
    binary: PathBuf,
) -> ServerCommand {
    let most_texts = files.iter().map(|f| f.texts_per_call).max().unwrap_or(1);
    let offered = plan.concurrency.iter().max().unwrap_or(&1) * most_texts;
    let defaults = vec![
        ("--backend", backend.name().into()),
        ("--intra-op-threads", config.intra_op_threads.to_string().into()),
        ("--max-in-flight-inputs", offered.max(4096).to_string().into()),
        ("--max-queue-ms", "0".into()),
    ];
    ServerCommand::new(binary, defaults, &config.server_args)
}

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

async fn run_backend(
    config: &SuiteConfig,
    plan: &Plan,
    files: &[SuiteFile],
    backend: Backend,
    command: &ServerCommand,
    ghz: &Path,
    documents: &[corpus::Paragraph],
) -> anyhow::Result<Vec<Entry>> {
    let (server, _) = ServerProcess::start(command).await?;
    if !documents.is_empty() {
        let run = ingest::ingest(server.connect().await?, documents, ("doc-", 0), INGEST_BATCH).await?;
        println!("{}: ingested {} documents in {:.1} s", backend.name(), run.documents, run.completed.as_secs_f64());
    }
    let dir = config.results_dir.join(backend.name());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Warms the model and the connections' code paths; its report is dropped.
    let warm_file = files.iter().find(|f| !f.is_search).unwrap_or(&files[0]);
    let warm_path = dir.join("warmup.json");
    runner::run(ghz, workspace(), warm_file, server.address, 16, (plan.warmup, plan.duration_stop), &warm_path).await?;
    std::fs::remove_file(&warm_path)?;

    let mut entries = Vec::new();
    for file in files {
        for &concurrency in &plan.concurrency {
            let summary = dir.join(format!("{}_c{concurrency}.json", file.stem));
            let cpu = CpuWindow::start(server.pid)?;
            let run = runner::run(
                ghz,
                workspace(),
                file,
                server.address,
                concurrency,
                (plan.run_time, plan.duration_stop),
                &summary,
            )
            .await?;
            let cpu = cpu.finish()?;
            println!(
                "{} {} c={concurrency}: {:.1} calls/s ({:.0} texts/s), p50 {:.2} ms, p99 {:.2} ms, {} errors, server {:.2} cores",
                backend.name(),
                file.stem,
                run.ok_rps(),
                run.ok_rps() * file.texts_per_call as f64,
                ms(run.p50),
                ms(run.p99),
                run.errors.values().sum::<u64>(),
                cpu.server_cores
            );
            entries.push(Entry {
                backend: backend.name(),
                config: file.stem.clone(),
                call: file.call.clone(),
                texts_per_call: file.texts_per_call,
                concurrency,
                run,
                server_cores: cpu.server_cores,
            });
        }
    }
    server.stop().await?;
    Ok(entries)
}
