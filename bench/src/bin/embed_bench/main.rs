//! embed-bench: measures in one run how close the embedwire server comes to ONNX
//! Runtime called directly, and prints each figure against its target:
//!
//! 1. the in-process ceiling: sentences/s of the bare model at batch sizes 1..64;
//! 2. server throughput with 32 concurrent one-sentence clients, as a ratio to it;
//! 3. latency of one sequential client, against the in-process batch-1 time;
//! 4. the server's memory, idle and after the throughput run;
//! 5. cold start, from spawning the server to health SERVING.
//!
//! Both sides load the same model file with the same intra-op thread count. The
//! ceiling is measured first and its model dropped before the server starts, so the
//! two never compete for the cores. Figures are noisy on a shared machine; the ratios
//! are what to compare between runs. A MISS is a result, not a failure: the exit
//! status is non-zero only when the bench could not run.
//!
//! # Layout
//! - [`config`]: the flags, and the amounts of work of a full or `--quick` run.
//! - [`sentences`]: the deterministic 12-word input sentences.
//! - [`in_process`]: the in-process ceiling.
//! - [`report`]: targets, the final table and the CSV files.
//!
//! The server process, the client load, CPU time and latency summaries come from
//! the bench crate's library ([`embedwire_bench`]).

mod config;
mod in_process;
mod report;
mod sentences;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use embedwire_bench::latency::ms;
use embedwire_bench::load::{self, Rpc, Stop};
use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use embedwire_bench::{cpu, server_binary};

use crate::config::{BenchConfig, ModelPaths, Plan};
use crate::in_process::CeilingPlan;
use crate::report::{CpuShare, Results, RunSetup, ServerMemory};
use embedwire_bench::memory::{RssSampler, mib, rss_bytes};

/// Distinct sentences in rotation: enough that no batch or concurrent call repeats
/// a text, few enough to tokenize in a blink.
const SENTENCES: usize = 512;
/// RSS sampling interval during the throughput run.
const RSS_SAMPLE_INTERVAL: Duration = Duration::from_millis(50);

fn main() -> anyhow::Result<()> {
    let config = BenchConfig::parse();
    config.validate().map_err(anyhow::Error::msg)?;
    let plan = config.plan();
    let paths = config.model_paths().map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    let texts: Arc<[String]> = sentences::sentences(SENTENCES).into();
    // Before measuring anything: a build would disturb the ceiling, and a failed one
    // should not come after a minute of measuring.
    let server_bin = server_binary::resolve(config.server_bin.as_deref())?;

    println!(
        "embed-bench{}: model {} ({}, {}), {} intra-op threads",
        if config.quick { " --quick" } else { "" },
        paths.model_dir.display(),
        paths.precision,
        paths.graph.file_name().unwrap_or_default().to_string_lossy(),
        config.intra_op_threads
    );
    println!("in-process ceiling");
    let ceiling_plan = CeilingPlan {
        batch_sizes: &plan.batch_sizes,
        time_per_size: plan.ceiling_time,
        warmup: plan.ceiling_warmup,
        intra_op_threads: config.intra_op_threads,
    };
    let ceiling = in_process::measure(&paths, &texts, &ceiling_plan)?;

    // The client runtime starts only now, so its threads did not share the cores
    // with the ceiling measurement.
    let runtime = tokio::runtime::Runtime::new()?;
    let server = runtime.block_on(measure_server(&config, &plan, &paths, server_bin, texts))?;

    let results = Results {
        setup: RunSetup {
            quick: config.quick,
            intra_op_threads: config.intra_op_threads,
            clients: config.clients,
            clients_per_connection: config.clients_per_connection,
            server_args: config.server_args.clone(),
            precision: paths.precision,
        },
        ceiling,
        throughput: server.throughput,
        throughput_cpu: server.throughput_cpu,
        latency: server.latency,
        memory: server.memory,
        cold_starts: server.cold_starts,
    };
    println!();
    print!("{}", report::table(&results));
    let [measurements, summary] = report::write_csv(&config.results_dir, &results)?;
    println!("wrote {} and {}", measurements.display(), summary.display());
    println!("run time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// What the server measurements produce.
struct ServerFigures {
    cold_starts: Vec<Duration>,
    latency: load::LoadResult,
    throughput: load::LoadResult,
    throughput_cpu: CpuShare,
    memory: ServerMemory,
}

/// Cold starts first (each a fresh process), then, on the last server started: idle
/// memory, sequential latency, and throughput with memory and CPU sampled.
async fn measure_server(
    config: &BenchConfig,
    plan: &Plan,
    paths: &ModelPaths,
    binary: PathBuf,
    texts: Arc<[String]>,
) -> anyhow::Result<ServerFigures> {
    let command = server_command(config, paths, binary);
    let (cold_starts, server) = cold_starts(&command, plan.cold_starts).await?;

    let control = [server.connect().await?];
    load::run(&control, 1, texts.clone(), Rpc::Embed, Stop::Calls(1)).await?;
    let idle = rss_bytes(server.pid)?;
    println!("memory: RSS idle after one call {:.1} MiB", mib(idle));

    println!("latency: one sequential client, {:.0} s", plan.latency_time.as_secs_f64());
    load::run(&control, 1, texts.clone(), Rpc::Embed, Stop::Calls(plan.latency_warmup_calls)).await?;
    let latency = load::run(&control, 1, texts.clone(), Rpc::Embed, Stop::After(plan.latency_time)).await?;
    let l = latency.latency;
    println!(
        "  {} calls: p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  mean {:.2} ms",
        latency.calls,
        ms(l.p50),
        ms(l.p95),
        ms(l.p99),
        ms(l.mean)
    );

    let throughput = measure_throughput(config, plan, &server, texts).await?;
    server.stop().await?;
    Ok(ServerFigures {
        cold_starts,
        latency,
        throughput: throughput.load,
        throughput_cpu: throughput.cpu,
        memory: ServerMemory { idle, peak: throughput.rss_peak, after_throughput: throughput.rss_after },
    })
}

/// The server's flags: the bench's defaults (same model, library and thread count
/// as in-process), then the --server-arg flags, which replace a default of the same
/// name. Each server gets a fresh data directory from [`ServerProcess::start`].
fn server_command(config: &BenchConfig, paths: &ModelPaths, binary: PathBuf) -> ServerCommand {
    let defaults = vec![
        ("--backend", "onnx".into()),
        ("--intra-op-threads", config.intra_op_threads.to_string().into()),
        ("--model-dir", paths.model_dir.clone().into()),
        ("--precision", paths.precision.into()),
        // Throughput here is the capacity at 32 closed-loop callers of one sentence
        // each: every call waits for a full batch (~36 ms on 2 cores), which the
        // default latency bound refuses by design (overload-bench measures that).
        ("--max-queue-ms", "0".into()),
        ("--ort-library", paths.ort_library.clone().into()),
    ];
    ServerCommand::new(binary, defaults, &config.server_args)
}

/// Starts the server `count` times, timing spawn to SERVING. Each server is stopped
/// before the next start so two never overlap; the last one is returned running.
async fn cold_starts(command: &ServerCommand, count: usize) -> anyhow::Result<(Vec<Duration>, ServerProcess)> {
    println!("cold start: spawn to health SERVING, {count} start(s)");
    let mut times = Vec::with_capacity(count);
    for start in 1..=count {
        let (server, took) = ServerProcess::start(command).await?;
        println!("  start {start}: {:.0} ms", ms(took));
        times.push(took);
        if start == count {
            return Ok((times, server));
        }
        server.stop().await?;
    }
    anyhow::bail!("no server start requested")
}

/// The throughput run and what was sampled over the same window.
struct ThroughputRun {
    load: load::LoadResult,
    cpu: CpuShare,
    /// Server RSS: highest sample, and right at the end.
    rss_peak: u64,
    rss_after: u64,
}

/// The throughput run after its warm-up, with the server's RSS and the CPU of both
/// processes sampled.
async fn measure_throughput(
    config: &BenchConfig,
    plan: &Plan,
    server: &ServerProcess,
    texts: Arc<[String]>,
) -> anyhow::Result<ThroughputRun> {
    let connections = config.clients.div_ceil(config.clients_per_connection);
    println!(
        "throughput: {} clients over {connections} connections, {:.0} s",
        config.clients,
        plan.throughput_time.as_secs_f64()
    );
    let mut channels = Vec::with_capacity(connections);
    for _ in 0..connections {
        channels.push(server.connect().await?);
    }
    load::run(&channels, config.clients, texts.clone(), Rpc::Embed, Stop::After(plan.throughput_warmup)).await?;

    let sampler = RssSampler::start(server.pid, RSS_SAMPLE_INTERVAL);
    let bench_pid = std::process::id();
    let cpu_before = (cpu::cpu_time(server.pid)?, cpu::cpu_time(bench_pid)?);
    let throughput = load::run(&channels, config.clients, texts, Rpc::Embed, Stop::After(plan.throughput_time)).await?;
    let cpu_after = (cpu::cpu_time(server.pid)?, cpu::cpu_time(bench_pid)?);
    let after = rss_bytes(server.pid)?;
    let peak = sampler.finish(server.pid).await?.peak();
    let cpu = CpuShare {
        server_cores: cpu::cores(cpu_before.0, cpu_after.0, throughput.elapsed),
        bench_cores: cpu::cores(cpu_before.1, cpu_after.1, throughput.elapsed),
    };
    let t = throughput.latency;
    println!(
        "  {} calls: {:.0} sentences/s  latency p50 {:.1} ms  p95 {:.1} ms  p99 {:.1} ms",
        throughput.calls,
        throughput.rate(),
        ms(t.p50),
        ms(t.p95),
        ms(t.p99)
    );
    println!("  CPU: server {:.2} cores, bench clients {:.2} cores", cpu.server_cores, cpu.bench_cores);
    println!("memory: RSS after throughput {:.1} MiB (peak {:.1} MiB)", mib(after), mib(peak));
    Ok(ThroughputRun { load: throughput, cpu, rss_peak: peak, rss_after: after })
}
