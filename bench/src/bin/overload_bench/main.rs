//! overload-bench: what the real server (real model) does when offered three times
//! the Embed calls it can answer, and which queue-time bound keeps both of the
//! issue's overload targets:
//!
//! 1. the maximum: 256 closed-loop clients, one text (a docstring sentence) per
//!    Embed call, for 10 s, on a reference server with default flags but no
//!    queue-time bound (`--max-queue-ms 0`): answered calls/s;
//! 2. the unloaded p99: on the same server, Embed offered open loop at 50% of
//!    that maximum for 10 s; the p99 of the answered calls (the definition is
//!    printed with the figures);
//! 3. the overload: for each queue-time bound (--max-queue-ms: the server's
//!    default, 50, 20, 15, 10, 5), steps 1 and 2 again on the
//!    reference server, then a fresh server with that bound offered 3 x the
//!    maximum just measured, open loop, for 20 s: calls leave on schedule
//!    whatever the answers, so a queue in the server shows up as latency. Rejections (RESOURCE_EXHAUSTED)
//!    and accepted calls are timed apart; targets: rejection p99 <= 5 ms,
//!    accepted p99 <= 2 x the unloaded p99. Goodput is answered calls/s over the
//!    run, the queue's drain included.
//!
//! Latency runs from the moment a call leaves the client to its answer; how late
//! the generator sent the calls (its own lag on a machine it shares with the
//! server) is printed beside it. A MISS is a result, not a failure: the exit
//! status is non-zero only when the bench could not run.
//!
//! # Layout
//! - [`config`]: the flags, and the amounts of work of a full or `--quick` run.
//! - [`runs`]: the open-loop Embed call and the summary of one run.
//! - [`report`]: the rows of the table and the CSV files.

mod config;
mod report;
mod runs;

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use embedwire_bench::corpus;
use embedwire_bench::cpu::{CpuUse, CpuWindow};
use embedwire_bench::latency::ms;
use embedwire_bench::load::{self, Rpc, Stop};
use embedwire_bench::server_binary;
use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use embedwire_bench::targets;
use tonic::transport::Channel;

use crate::config::{BenchConfig, Plan};
use crate::report::{Baseline, BoundRun};
use crate::runs::{EmbedOne, OpenRun};

/// Query sentences used as the Embed texts.
const TEXTS: usize = 500;
/// Closed-loop clients of the warm-up: one, so that nothing is ever queued ahead
/// of a call and no queue-time bound refuses it.
const WARMUP_CLIENTS: usize = 1;
/// Concurrent calls one client connection carries. The server announces no
/// SETTINGS_MAX_CONCURRENT_STREAMS (tonic's default), and the HTTP/2 client then
/// keeps its initial limit of 100 streams (hyper's default); calls beyond it wait
/// in the client, where the server's admission control never sees them.
const STREAMS_PER_CONNECTION: usize = 100;

fn main() -> anyhow::Result<()> {
    let config = BenchConfig::parse();
    config.validate().map_err(anyhow::Error::msg)?;
    let plan = config.plan().map_err(anyhow::Error::msg)?;
    let python = config.python().map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    let server_bin = server_binary::resolve(config.server_bin.as_deref())?;
    println!(
        "overload-bench{}: --max-queue-ms bounds {:?} (None: the server's default), {:.1}x the maximum for {:.0} s \
         each, server flags: [{}]",
        if config.quick { " --quick" } else { "" },
        plan.bounds_ms,
        config.factor,
        plan.overload_time.as_secs_f64(),
        config.server_args.join(" ")
    );
    println!("{} at the start", load_average());
    let docstrings = corpus::docstrings(&python, &config.cache_dir, false)?;
    let texts: Arc<[String]> = corpus::select(&docstrings, 0, 0, TEXTS)?.queries.into();
    drop(docstrings);

    let runtime = tokio::runtime::Runtime::new()?;
    let runs = runtime.block_on(measure(&config, &plan, &server_bin, texts))?;
    let rows = report::rows(&runs);
    println!();
    println!("{}", report::definition(config.unloaded_fraction));
    print!("{}", targets::table(&rows));
    let passing: Vec<String> = runs.iter().filter(|run| run.passes()).map(|run| run.bound_name()).collect();
    println!("--max-queue-ms bounds meeting both overload targets: {passing:?}");
    let paths = report::write_csv(&config.results_dir, &rows, &report::runs_csv(&runs))?;
    for path in paths {
        println!("wrote {}", path.display());
    }
    println!("run time {:.1} s; {}", started.elapsed().as_secs_f64(), load_average());
    Ok(())
}

/// For each bound: the baseline, measured again on the reference server (kept
/// running for this), then the overload on a fresh server with the bound.
/// Measuring the baseline right before each overload keeps "3 x the maximum" and
/// "the unloaded p99" true to the machine of the moment, which other work on a
/// shared machine changes from minute to minute.
async fn measure(
    config: &BenchConfig,
    plan: &Plan,
    server_bin: &std::path::Path,
    texts: Arc<[String]>,
) -> anyhow::Result<Vec<BoundRun>> {
    // The reference measures the capacity itself: no queue-time bound refuses its
    // closed-loop clients, however deep their queue.
    let unbounded: Vec<(&str, OsString)> = vec![("--max-queue-ms", "0".into())];
    let command = ServerCommand::new(server_bin.to_path_buf(), unbounded, &config.server_args);
    let (reference, reference_channels) = start_warm(&command, config.connections, plan, &texts).await?;
    let mut runs = Vec::new();
    for &bound_ms in &plan.bounds_ms {
        let baseline = measure_baseline(config, plan, &reference, &reference_channels, &texts).await?;
        let defaults: Vec<(&str, OsString)> =
            bound_ms.iter().map(|ms| ("--max-queue-ms", ms.to_string().into())).collect();
        let command = ServerCommand::new(server_bin.to_path_buf(), defaults, &config.server_args);
        let offered = baseline.max_rate * config.factor;
        let connections = config.connections.max(connections_for(offered, bound_ms.unwrap_or(DERIVED_BOUND_GUESS_MS)));
        let (server, channels) = start_warm(&command, connections, plan, &texts).await?;
        let call = Arc::new(EmbedOne::new(&channels, texts.clone()));
        let cpu = CpuWindow::start(server.pid)?;
        let run = runs::run(call, offered, plan.overload_time).await?;
        let cpu = cpu.finish()?;
        let default = bound_ms.is_none();
        let bound_run = BoundRun { bound_ms, default, baseline, run, server_cores: cpu.server_cores };
        print_run(&format!("overload, {}", bound_run.bound_name()), &bound_run.run, &cpu);
        server.stop().await?;
        runs.push(bound_run);
    }
    reference.stop().await?;
    Ok(runs)
}

/// The maximum (closed loop) and the unloaded latency (open loop at a fraction of
/// it) on the reference server.
async fn measure_baseline(
    config: &BenchConfig,
    plan: &Plan,
    server: &ServerProcess,
    channels: &[Channel],
    texts: &Arc<[String]>,
) -> anyhow::Result<Baseline> {
    let cpu = CpuWindow::start(server.pid)?;
    let max = load::run(channels, config.max_clients, texts.clone(), Rpc::Embed, Stop::After(plan.max_time)).await?;
    println!(
        "max: {:.0} Embed calls/s ({} clients, closed loop; p50 {:.1} ms, p99 {:.1} ms)\n  cpu: {}",
        max.rate(),
        config.max_clients,
        ms(max.latency.p50),
        ms(max.latency.p99),
        cpu.finish()?
    );
    let call = Arc::new(EmbedOne::new(channels, texts.clone()));
    let cpu = CpuWindow::start(server.pid)?;
    let unloaded = runs::run(call, max.rate() * config.unloaded_fraction, plan.unloaded_time).await?;
    print_run("unloaded", &unloaded, &cpu.finish()?);
    Ok(Baseline { max_rate: max.rate(), max_latency: max.latency, max_clients: config.max_clients, unloaded })
}

/// A fresh server, `connections` connections to it, and a few untimed calls so
/// first-batch allocations stay out of the figures (from a few clients, so none
/// is refused).
async fn start_warm(
    command: &ServerCommand,
    connections: usize,
    plan: &Plan,
    texts: &Arc<[String]>,
) -> anyhow::Result<(ServerProcess, Vec<Channel>)> {
    let (server, _) = ServerProcess::start(command).await?;
    let mut channels = Vec::with_capacity(connections);
    for _ in 0..connections {
        channels.push(server.connect().await?);
    }
    let per_client = plan.warmup_calls.div_ceil(WARMUP_CLIENTS);
    load::run(&channels, WARMUP_CLIENTS, texts.clone(), Rpc::Embed, Stop::Calls(per_client)).await?;
    Ok((server, channels))
}

/// The derived default bound is a few ms on this kind of machine; connections are
/// sized as if it were this (generously: more connections cost nothing measured).
const DERIVED_BOUND_GUESS_MS: u64 = 20;

/// Connections enough for the server to see every call of the overload at once:
/// twice the calls in flight when each accepted call waits its bound and a
/// little more (Little's law), so no call waits for a stream in the client.
fn connections_for(offered_per_s: f64, bound_ms: u64) -> usize {
    let in_flight = offered_per_s * (bound_ms as f64 + 100.0) / 1000.0;
    2 * (in_flight.ceil() as usize).div_ceil(STREAMS_PER_CONNECTION)
}

/// One run's figures as it ends, and where the CPU went meanwhile (the machine is
/// shared: a server short of cores shows here).
fn print_run(what: &str, run: &OpenRun, cpu: &CpuUse) {
    println!(
        "{what}: offered {:.0} calls/s, {} sent; {} accepted (p50 {:.1} / p99 {:.1} ms), {} rejected (p50 {:.2} / \
         p99 {:.2} ms), {} other errors; goodput {:.0} calls/s; generator lag p99 {:.1} ms",
        run.offered,
        run.sent,
        run.accepted.count,
        ms(run.accepted.p50),
        ms(run.accepted.p99),
        run.rejected,
        ms(run.rejections.p50),
        ms(run.rejections.p99),
        run.failed,
        run.goodput(),
        ms(run.lag.p99)
    );
    println!("  cpu: {cpu}");
    if let Some(error) = &run.first_error {
        println!("  first error: {error}");
    }
}

/// The machine's load averages, printed at the start and the end: the machine is
/// shared, and other work running meanwhile is part of what the figures mean.
fn load_average() -> String {
    let loads = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!("load average {}", loads.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}
