//! gateway-bench: the /v1 HTTP contract of the existing embedding gateways, driven
//! the way their benchmark client drives it, against embedwire and against the
//! Python baseline (`bench/baseline/app.py`) on the same machine, model and corpus,
//! one after the other, each alone on the machine:
//!
//! 1. cold start: from spawning the process to the first `GET /healthz` that says
//!    the model is loaded;
//! 2. the index: 10k paragraphs of Python docstrings through `POST /v1/ingest`,
//!    followed to completed (never an empty index);
//! 3. the headline run: five warm-up searches `{"query": "warmup", "top_k": 3}`,
//!    then N = 16 workers, each over its own keep-alive HTTP/1.1 connection (one
//!    client's pool), sending `{"query": "example query about RAG gateways",
//!    "top_k": 5}`; requests, RPS, p50/p95/p99, the server's RSS sampled from
//!    /proc/PID/status during the run, and every call in a CSV;
//! 4. a sweep of concurrencies for the throughput-against-concurrency plot;
//! 5. embedwire only: /v1/search through its in-process HTTP layer against the
//!    gRPC Search rpc on the same index, real query sentences in rotation, the two
//!    alternating in rounds.
//!
//! Targets: embedwire >= 2 x the baseline's RPS, <= 0.5 x its p95 and RSS at
//! concurrency 16; HTTP search >= 0.9 x gRPC Search. A MISS is a result, not a
//! failure: the exit status is non-zero only when the bench could not run.
//!
//! # Layout
//! - [`config`]: the flags, and the amounts of work of a full or `--quick` run.
//! - [`populate`]: ingestion through /v1/ingest and /v1/jobs.
//! - [`callers`]: the HTTP and gRPC search calls the workers repeat.
//! - [`report`]: targets, the final table and the CSV files.

mod callers;
mod config;
mod populate;
mod report;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use embedwire_bench::closed_loop::{self, ClosedLoopRun};
use embedwire_bench::corpus::{self, Corpus};
use embedwire_bench::cpu::CpuWindow;
use embedwire_bench::http_process::{HttpServerCommand, HttpServerProcess};
use embedwire_bench::latency::ms;
use embedwire_bench::load::Stop;
use embedwire_bench::memory::{RssSampler, mib};
use embedwire_bench::server_binary;
use embedwire_bench::server_process::fresh_data_dir;
use embedwire_bench::wire_count::ByteCounters;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use tonic::transport::Endpoint;

use crate::callers::{GrpcSearch, HttpSearch, KNOWN_QUERY, WARMUP_CALLS, WARMUP_QUERY, search_body};
use crate::config::{BenchConfig, Plan, Target};
use crate::report::{Comparison, Measured, Phase, Results, TargetResults};

/// RSS sampling interval, over a gateway's whole life and during each run.
const RSS_INTERVAL: Duration = Duration::from_millis(100);
/// Hits asked of each search, as the known client asks.
const TOP_K: u32 = 5;

fn main() -> anyhow::Result<()> {
    let config = BenchConfig::parse();
    config.validate().map_err(anyhow::Error::msg)?;
    let plan = config.plan();
    let python = corpus::python_or_venv(config.python.as_deref()).map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    let server_bin = if config.targets.contains(&Target::Embedwire) {
        Some(server_binary::resolve(config.server_bin.as_deref())?)
    } else {
        None
    };
    let docstrings = corpus::docstrings(&python, &config.cache_dir, false)?;
    let corpus = corpus::select(&docstrings, plan.documents, 0, config.queries)?;
    drop(docstrings);
    println!(
        "gateway-bench{}: {} documents, headline c={}, sweep {:?}, targets {}",
        if config.quick { " --quick" } else { "" },
        corpus.documents.len(),
        config.concurrency,
        plan.sweep,
        config.targets.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
    );

    let runtime = tokio::runtime::Runtime::new()?;
    let mut targets = Vec::new();
    for &target in &config.targets {
        let command = match target {
            Target::Embedwire => embedwire_command(&config, server_bin.clone().context("no server binary")?),
            Target::Baseline => baseline_command(&config, python.clone()),
        };
        targets.push(runtime.block_on(measure_target(&config, &plan, target, &command, &corpus))?);
    }
    let results = Results { quick: config.quick, documents: corpus.documents.len(), targets };
    println!();
    print!("{}", report::table(&results));
    for path in report::write_csv(&config.results_dir, &results)? {
        println!("wrote {}", path.display());
    }
    println!("run time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// embedwire-server with the real model; its HTTP layer answers on the same port.
fn embedwire_command(config: &BenchConfig, binary: PathBuf) -> HttpServerCommand {
    let data_dir = fresh_data_dir();
    let mut args: Vec<OsString> =
        vec!["--listen".into(), "127.0.0.1:0".into(), "--data-dir".into(), data_dir.clone().into()];
    let defaults = [("--backend", "onnx".to_string()), ("--intra-op-threads", config.intra_op_threads.to_string())];
    for (flag, value) in defaults {
        if !config.server_args.iter().any(|arg| arg == flag || arg.starts_with(&format!("{flag}="))) {
            args.extend([flag.into(), value.into()]);
        }
    }
    args.extend(config.server_args.iter().map(OsString::from));
    HttpServerCommand {
        name: "embedwire".into(),
        program: binary,
        args,
        // The address comes from an info line.
        env: vec![("RUST_LOG".into(), "info,ort=warn".into())],
        scratch_dir: Some(data_dir),
    }
}

/// The baseline on the same model, with the same ONNX Runtime thread count.
fn baseline_command(config: &BenchConfig, python: PathBuf) -> HttpServerCommand {
    HttpServerCommand {
        name: "baseline".into(),
        program: python,
        args: vec![
            config.baseline_app.clone().into(),
            "--port".into(),
            "0".into(),
            "--threads".into(),
            config.intra_op_threads.to_string().into(),
        ],
        env: Vec::new(),
        scratch_dir: None,
    }
}

/// Steps 1 to 5 on one gateway.
async fn measure_target(
    config: &BenchConfig,
    plan: &Plan,
    target: Target,
    command: &HttpServerCommand,
    corpus: &Corpus,
) -> anyhow::Result<TargetResults> {
    let name = target.name();
    println!("{name}: starting");
    let (gateway, cold_start) = HttpServerProcess::start(command).await?;
    println!("{name}: healthy after {:.2} s (pid {}, {})", cold_start.as_secs_f64(), gateway.pid, gateway.address);
    let timeline = RssSampler::start(gateway.pid, RSS_INTERVAL);
    let born = Instant::now();
    let mut phases = Vec::new();
    let mut phase = |name: String, from: Instant| phases.push(Phase { name, start: from - born, end: born.elapsed() });

    let from = Instant::now();
    let ingest = populate::ingest(&gateway, &corpus.documents, config.ingest_batch).await?;
    phase("ingest".into(), from);
    println!(
        "{name}: ingested {} documents in {:.1} s ({:.1} docs/s)",
        ingest.documents,
        ingest.elapsed.as_secs_f64(),
        ingest.rate()
    );

    let mut warmup = gateway.connect(ByteCounters::new()).await?;
    for _ in 0..WARMUP_CALLS {
        HttpSearch::search(&mut warmup, search_body(WARMUP_QUERY, 3)).await.context("warm-up search")?;
    }
    drop(warmup);
    let known: Arc<[Bytes]> = vec![search_body(KNOWN_QUERY, TOP_K)].into();
    let from = Instant::now();
    let headline = measure_http(&gateway, config.concurrency, plan.run_time, known.clone()).await?;
    phase(format!("c={} headline", config.concurrency), from);
    print_run(name, "headline", &headline);

    let mut sweep = Vec::new();
    for &concurrency in &plan.sweep {
        let from = Instant::now();
        let measured = measure_http(&gateway, concurrency, plan.sweep_time, known.clone()).await?;
        phase(format!("c={concurrency}"), from);
        print_run(name, "sweep", &measured);
        sweep.push(measured);
    }

    let comparison = if target == Target::Embedwire {
        let from = Instant::now();
        let comparison = compare(&gateway, config, plan, &corpus.queries).await?;
        phase("HTTP vs gRPC".into(), from);
        Some(comparison)
    } else {
        None
    };
    let rss_timeline = timeline.finish(gateway.pid).await?;
    gateway.stop().await?;
    Ok(TargetResults { target, cold_start, ingest, headline, sweep, rss_timeline, phases, comparison })
}

fn print_run(name: &str, what: &str, m: &Measured) {
    let l = m.run.latency();
    println!(
        "{name}: {what} c={}: {:.1} req/s ({} ok, {} errors), p50 {:.1} p95 {:.1} p99 {:.1} ms, RSS peak {:.0} MiB, CPU server {:.2} bench {:.2}",
        m.concurrency,
        m.run.rate(),
        m.run.ok(),
        m.run.errors(),
        ms(l.p50),
        ms(l.p95),
        ms(l.p99),
        mib(m.rss.peak()),
        m.cpu.server_cores,
        m.cpu.bench_cores
    );
    if let Some(error) = &m.run.first_error {
        println!("  first error: {error}");
    }
}

/// One closed-loop /v1/search run: `concurrency` workers, each on its own
/// keep-alive connection, bodies in rotation, RSS and CPU recorded around it.
async fn measure_http(
    gateway: &HttpServerProcess,
    concurrency: usize,
    time: Duration,
    bodies: Arc<[Bytes]>,
) -> anyhow::Result<Measured> {
    let callers = http_callers(gateway, concurrency, bodies).await?;
    let rss = RssSampler::start(gateway.pid, RSS_INTERVAL);
    let cpu = CpuWindow::start(gateway.pid)?;
    let run = closed_loop::run(callers, Stop::After(time)).await?;
    let cpu = cpu.finish()?;
    let rss = rss.finish(gateway.pid).await?;
    Ok(Measured { concurrency, run, rss, cpu })
}

async fn http_callers(
    gateway: &HttpServerProcess,
    concurrency: usize,
    bodies: Arc<[Bytes]>,
) -> anyhow::Result<Vec<HttpSearch>> {
    let counters = ByteCounters::new();
    let mut callers = Vec::with_capacity(concurrency);
    for k in 0..concurrency {
        let connection = gateway.connect(counters.clone()).await?;
        // Workers start far apart in the rotation, so concurrent calls differ.
        callers.push(HttpSearch { connection, bodies: bodies.clone(), first: k * bodies.len() / concurrency });
    }
    Ok(callers)
}

async fn grpc_callers(
    gateway: &HttpServerProcess,
    concurrency: usize,
    queries: Arc<[String]>,
) -> anyhow::Result<Vec<GrpcSearch>> {
    let endpoint = Endpoint::from_shared(format!("http://{}", gateway.address))?.tcp_nodelay(true);
    let mut callers = Vec::with_capacity(concurrency);
    for k in 0..concurrency {
        let client = SearchServiceClient::new(endpoint.connect().await.context("gRPC connection")?);
        callers.push(GrpcSearch {
            client,
            queries: queries.clone(),
            first: k * queries.len() / concurrency,
            top_k: TOP_K,
        });
    }
    Ok(callers)
}

/// /v1/search against gRPC Search at the headline concurrency, the same query
/// sentences in the same rotation, one connection per worker on both sides,
/// alternating in rounds.
async fn compare(
    gateway: &HttpServerProcess,
    config: &BenchConfig,
    plan: &Plan,
    queries: &[String],
) -> anyhow::Result<Comparison> {
    let concurrency = config.concurrency;
    let texts: Arc<[String]> = queries.into();
    let bodies: Arc<[Bytes]> = queries.iter().map(|q| search_body(q, TOP_K)).collect();
    let round = plan.compare_time / config.rounds as u32;
    let warm = http_callers(gateway, concurrency, bodies.clone()).await?;
    closed_loop::run(warm, Stop::After(plan.compare_warmup)).await?;
    let warm = grpc_callers(gateway, concurrency, texts.clone()).await?;
    closed_loop::run(warm, Stop::After(plan.compare_warmup)).await?;
    let (mut http, mut grpc, mut http_cpu, mut grpc_cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..config.rounds {
        let callers = http_callers(gateway, concurrency, bodies.clone()).await?;
        let cpu = CpuWindow::start(gateway.pid)?;
        http.push(closed_loop::run(callers, Stop::After(round)).await?);
        http_cpu.push(cpu.finish()?);
        let callers = grpc_callers(gateway, concurrency, texts.clone()).await?;
        let cpu = CpuWindow::start(gateway.pid)?;
        grpc.push(closed_loop::run(callers, Stop::After(round)).await?);
        grpc_cpu.push(cpu.finish()?);
    }
    let comparison = Comparison {
        concurrency,
        http: ClosedLoopRun::combine(&http),
        grpc: ClosedLoopRun::combine(&grpc),
        http_cpu: embedwire_bench::cpu::CpuUse::combine(&http_cpu),
        grpc_cpu: embedwire_bench::cpu::CpuUse::combine(&grpc_cpu),
    };
    println!(
        "embedwire: HTTP /v1/search {:.1} req/s ({} errors), gRPC Search {:.1} req/s ({} errors), c={concurrency}",
        comparison.http.rate(),
        comparison.http.errors(),
        comparison.grpc.rate(),
        comparison.grpc.errors()
    );
    Ok(comparison)
}
