//! rerank-bench: how many (query, passage) pairs per second the server's Rerank
//! scores, against what the same cross-encoder does in-process, and the latency of
//! one call:
//!
//! 1. the in-process ceiling: the cross-encoder loaded with the server crate's own
//!    code and the server's ONNX settings, pairs tokenized beforehand, run at several
//!    batch sizes; the best is the ceiling;
//! 2. the server with `--rerank-model-dir` (the real binary on 127.0.0.1:0) under
//!    closed-loop gRPC clients at concurrency 1..32, each call one query and 20
//!    passages of ~60 tokens: pairs/s, p50 / p99, RESOURCE_EXHAUSTED refusals, and
//!    where the CPU and the model's time went;
//! 3. the same sweep against a server without a cross-encoder (the bi-encoder
//!    fallback: the embedding model's cosine), for comparison.
//!
//! The target: the best cross-encoder pairs/s at least 0.9 x the ceiling. The two are
//! measured in rounds, each round every batch size in-process and then every
//! concurrency against the server, so that a drift of the machine's speed moves both
//! sides alike; they never run at the same time (the idle side sleeps: ONNX Runtime's
//! threads do not spin). On a small machine the server shares the cores with the
//! bench's own clients, which the in-process run does not have (the CPU columns show
//! it). A MISS is a result, not a failure: the exit status is non-zero only when the
//! bench could not run.
//!
//! # Layout
//! - [`config`]: the flags, the amounts of work of a full or `--quick` run, and the
//!   servers' flags.
//! - [`cross_encoder_dir`]: the cross-encoder measured (given, or built once).
//! - [`workload`]: the queries and passages, and each call's share of them.
//! - [`sweep`]: the closed-loop Rerank clients and one run per concurrency.
//! - [`report`]: the target, the tables, the CSV files and the markdown summary.
//!
//! The in-process runs, the server process, the closed loop, CPU accounting and the
//! server's /metrics come from the bench crate's library ([`embedwire_bench`]).

mod config;
mod cross_encoder_dir;
mod report;
mod sweep;
mod workload;

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use embedwire_bench::in_process::{self, BatchSizeRun, Ceiling, InProcess};
use embedwire_bench::latency::ms;
use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use embedwire_bench::{corpus, server_binary};
use embedwire_server::model::cross_encoder::CrossEncoder;
use embedwire_server::model::onnx::init_runtime;

use crate::config::BenchConfig;
use crate::report::{Results, RunSetup};
use crate::sweep::{Scorer, SweepPoint};
use crate::workload::Workload;

/// Calls whose pairs the in-process ceiling rotates through: enough that batches
/// keep changing, few enough to tokenize in a moment.
const CEILING_CALLS: usize = 100;

fn main() -> anyhow::Result<()> {
    let config = BenchConfig::parse();
    config.validate().map_err(anyhow::Error::msg)?;
    let plan = config.plan();
    let started = Instant::now();
    let python = config.python().map_err(anyhow::Error::msg)?;
    let docstrings = corpus::docstrings(&python, &config.cache_dir, false)?;
    let rerank_dir = cross_encoder_dir::resolve(config.rerank_model_dir.as_deref(), &python, &config.cache_dir)?;
    // Before measuring anything: a build would disturb the ceiling, and a failed one
    // should not come after minutes of measuring.
    let server_bin = server_binary::resolve(config.server_bin.as_deref())?;
    let cross_command = config.server_command(server_bin.clone(), Some(&rerank_dir));
    let bi_command = (!config.no_bi_encoder).then(|| config.server_command(server_bin, None));

    println!(
        "rerank-bench{}: cross-encoder {}, {} texts per call",
        if config.quick { " --quick" } else { "" },
        rerank_dir.display(),
        config.texts_per_call
    );
    let server = config::parsed(&cross_command).map_err(anyhow::Error::msg)?;
    let environment = init_runtime(&server.ort_library())?;
    let onnx = server.onnx_settings();
    let mut loaded = CrossEncoder::load(environment, &rerank_dir, onnx, server.precision)?;
    let workload = Workload::build(&docstrings, &loaded.tokenizer, config.texts_per_call)?;
    drop(docstrings);
    let (pairs, tokenizing) = workload.tokenize(&loaded.tokenizer, CEILING_CALLS)?;
    println!(
        "workload: {} queries, {} passages of {:.1} tokens on average; pairs of {:.1} tokens (longest {}); \
         tokenizing one call's {} pairs: {:.2} ms",
        workload.queries.len(),
        workload.passages.len(),
        workload.mean_passage_tokens(),
        tokenizing.mean_pair_tokens,
        tokenizing.max_pair_tokens,
        config.texts_per_call,
        ms(tokenizing.mean())
    );
    println!(
        "in-process: {}, {} intra-op threads, spin {}, arena {}; {} round(s)",
        loaded.precision.name(),
        onnx.intra_op_threads,
        onnx.spin,
        onnx.arena,
        plan.rounds
    );
    let precision = loaded.precision.name();
    let workload = Arc::new(workload);
    let runtime = tokio::runtime::Runtime::new()?;
    let rounds = plan.rounds as u32;
    let (ceiling_time, run_time) = (plan.ceiling.time_per_size / rounds, plan.run_time / rounds);
    let min_batches = in_process::MIN_BATCHES.div_ceil(plan.rounds);
    let sweep = |server: &ServerProcess, scorer: Scorer| {
        let (concurrency, per_connection) = (&plan.concurrency, config.clients_per_connection);
        runtime.block_on(sweep::pass(server, scorer, &workload, concurrency, per_connection, plan.warmup, run_time))
    };

    let mut in_process = InProcess::new(&mut loaded.model, &pairs)?;
    in_process.warm_up(plan.ceiling.warmup)?;
    let cross_server = runtime.block_on(start(&cross_command, Scorer::Cross))?;
    let (mut ceilings, mut cross_rounds) = (Vec::new(), Vec::new());
    for round in 1..=plan.rounds {
        println!("round {round} of {}: in-process, {:.1} s per batch size", plan.rounds, ceiling_time.as_secs_f64());
        ceilings.push(in_process.pass(&plan.ceiling, ceiling_time, min_batches, print_batch_size)?);
        println!(
            "round {round} of {}: cross-encoder server, {:.1} s per concurrency",
            plan.rounds,
            run_time.as_secs_f64()
        );
        cross_rounds.push(with_log(&cross_server, sweep(&cross_server, Scorer::Cross))?);
    }
    runtime.block_on(cross_server.stop())?;
    // The in-process model's threads and memory go before the other server starts.
    drop(in_process);
    drop(loaded);

    let mut bi_rounds = Vec::new();
    if let Some(command) = &bi_command {
        let bi_server = runtime.block_on(start(command, Scorer::Bi))?;
        for round in 1..=plan.rounds {
            println!(
                "round {round} of {}: bi-encoder server, {:.1} s per concurrency",
                plan.rounds,
                run_time.as_secs_f64()
            );
            bi_rounds.push(with_log(&bi_server, sweep(&bi_server, Scorer::Bi))?);
        }
        runtime.block_on(bi_server.stop())?;
    }
    let ceiling = Ceiling::combine(&ceilings);
    let (cross, bi) = (combine_rounds(&cross_rounds), combine_rounds(&bi_rounds));

    let results = Results {
        setup: RunSetup {
            quick: config.quick,
            texts_per_call: config.texts_per_call,
            clients_per_connection: config.clients_per_connection,
            rounds: plan.rounds,
            run_secs: plan.run_time.as_secs_f64(),
            rerank_model_dir: rerank_dir.clone(),
            precision,
            onnx: format!("{} intra-op threads, spin {}, arena {}", onnx.intra_op_threads, onnx.spin, onnx.arena),
            cross_server_flags: flags(&cross_command, Some(&rerank_dir)),
            bi_server_flags: bi_command.as_ref().map(|command| flags(command, None)),
            queries: workload.queries.len(),
            passages: workload.passages.len(),
            mean_passage_tokens: workload.mean_passage_tokens(),
        },
        ceiling,
        tokenizing,
        cross,
        bi,
    };
    print_results(&results);
    let written = report::write(&config.results_dir, &results)?;
    println!("wrote {}", written.iter().map(|path| path.display().to_string()).collect::<Vec<_>>().join(", "));
    println!("run time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Starts a server and waits for SERVING.
async fn start(command: &ServerCommand, scorer: Scorer) -> anyhow::Result<ServerProcess> {
    let (server, took) = ServerProcess::start(command).await?;
    println!("{} server: SERVING after {:.1} s", scorer.name(), took.as_secs_f64());
    Ok(server)
}

/// `result`, with the server's last log lines printed when it failed.
fn with_log<T>(server: &ServerProcess, result: anyhow::Result<T>) -> anyhow::Result<T> {
    if result.is_err() {
        eprintln!("the server's last log lines:\n{}", server.log_tail().join("\n"));
    }
    result
}

/// Each concurrency's rounds as one point, in the order of the first round.
fn combine_rounds(rounds: &[Vec<SweepPoint>]) -> Vec<SweepPoint> {
    let Some(first) = rounds.first() else { return Vec::new() };
    (0..first.len())
        .map(|i| SweepPoint::combine(&rounds.iter().map(|round| round[i].clone()).collect::<Vec<_>>()))
        .collect()
}

fn print_batch_size(run: &BatchSizeRun) {
    println!(
        "  batch {:>2}: {:>7.1} pairs/s   batch p50 {:>7.2} ms  p99 {:>7.2} ms",
        run.batch_size,
        run.rate(),
        ms(run.batch_latency.p50),
        ms(run.batch_latency.p99)
    );
}

/// A server's flags as recorded, the cross-encoder's directory shortened to its name.
fn flags(command: &ServerCommand, rerank_dir: Option<&Path>) -> String {
    let shown = |arg: &OsString| -> String {
        match rerank_dir {
            Some(dir) if Path::new(arg) == dir => {
                dir.file_name().map_or_else(|| arg.to_string_lossy().into_owned(), |n| n.to_string_lossy().into_owned())
            }
            _ => arg.to_string_lossy().into_owned(),
        }
    };
    command.args.iter().map(shown).collect::<Vec<_>>().join(" ")
}

fn print_results(results: &Results) {
    println!();
    print!("{}", report::sweep_table(results));
    println!();
    print!("{}", report::table(results));
}
