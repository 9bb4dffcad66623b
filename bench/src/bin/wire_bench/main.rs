//! wire-bench: JSON against binary in one run, on one server, with the same texts
//! (256 real query sentences per call by default) and the pseudo backend by
//! default, so that the transport and the encodings are all that differ:
//!
//! - gRPC Embed answering FLOAT32 bytes, FLOAT16, INT8, UBINARY and FLOAT32_LIST
//!   (the proto's `repeated float`);
//! - HTTP POST /v1/embeddings answering JSON floats, base64 and octet-stream, and
//!   the legacy POST /embed (JSON floats), served in-process on the same port.
//!
//! For each: requests/s and p50/p95/p99 under the same concurrency (16 workers, one
//! connection each: HTTP/1.1 keep-alive or HTTP/2), bytes per response counted on
//! the sockets, the server's encode time (its own code, in-process), the client's
//! decode time in Rust and in Python (json.loads against numpy.frombuffer, by
//! `bench/decode_bench.py`), and the server's CPU per call with one client. Both
//! sides run through the same load generator ([`embedwire_bench::closed_loop`]),
//! and every answer is decoded into vectors inside the timed call.
//!
//! Target: gRPC FLOAT32 bytes >= 3 x the requests/s of HTTP JSON floats, at <=
//! 0.45 x the bytes per response. A MISS is a result, not a failure.
//!
//! # Layout
//! - [`config`]: the flags and the amounts of work of a full or `--quick` run.
//! - [`variants`]: the encodings: requests, decoding, the load worker.
//! - [`micro`]: the server's encode step and the client's decode, timed in-process.
//! - [`python_decode`]: the captured answers through `bench/decode_bench.py`.
//! - [`report`]: targets, the table and the CSV files.

mod config;
mod micro;
mod python_decode;
mod report;
mod variants;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use embedwire_bench::closed_loop::{self, ClosedLoopRun};
use embedwire_bench::corpus;
use embedwire_bench::cpu::{CpuUse, CpuWindow};
use embedwire_bench::http_client::HttpConnection;
use embedwire_bench::latency::ms;
use embedwire_bench::load::Stop;
use embedwire_bench::server_binary;
use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use embedwire_bench::wire_count::ByteCounters;
use embedwire_proto::v1::EmbeddingDtype;

use crate::config::{BenchConfig, Plan};
use crate::report::{Results, VariantResults};
use crate::variants::{Answer, Decoded, Variant, VariantCaller};

/// Answers each variant gives before it is measured.
const WARMUP_CALLS: usize = 3;

fn main() -> anyhow::Result<()> {
    let config = BenchConfig::parse();
    config.validate().map_err(anyhow::Error::msg)?;
    let plan = config.plan();
    let variants = chosen_variants(&config)?;
    let python = corpus::python_or_venv(config.python.as_deref()).map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    let server_bin = server_binary::resolve(config.server_bin.as_deref())?;
    let docstrings = corpus::docstrings(&python, &config.cache_dir, false)?;
    let texts = corpus::select(&docstrings, 0, 0, config.texts)?.queries;
    drop(docstrings);
    println!(
        "wire-bench{}: {} backend, {} texts per call, {} workers (one connection each), {} variants",
        if config.quick { " --quick" } else { "" },
        config.backend.name(),
        texts.len(),
        config.concurrency,
        variants.len()
    );
    let command = server_command(&config, server_bin);
    let runtime = tokio::runtime::Runtime::new()?;
    let results = runtime.block_on(measure(&config, &plan, &command, &variants, &texts, &python))?;
    println!();
    print!("{}", report::table(&results));
    for path in report::write_csv(&config.results_dir, &results)? {
        println!("wrote {}", path.display());
    }
    println!("run time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn chosen_variants(config: &BenchConfig) -> anyhow::Result<Vec<Variant>> {
    if config.variants.is_empty() {
        return Ok(variants::ALL.to_vec());
    }
    config.variants.iter().map(|name| Variant::parse(name).with_context(|| format!("unknown variant {name}"))).collect()
}

/// The server's flags. Admission is raised to the offered load when it exceeds the
/// default, so that the comparison measures encodings, not RESOURCE_EXHAUSTED.
fn server_command(config: &BenchConfig, binary: PathBuf) -> ServerCommand {
    let in_flight = (config.concurrency * config.texts).max(4096);
    let defaults = vec![
        ("--backend", config.backend.name().into()),
        ("--intra-op-threads", config.intra_op_threads.to_string().into()),
        ("--max-in-flight-inputs", in_flight.to_string().into()),
    ];
    ServerCommand::new(binary, defaults, &config.server_args)
}

async fn measure(
    config: &BenchConfig,
    plan: &Plan,
    command: &ServerCommand,
    chosen: &[Variant],
    texts: &[String],
    python: &std::path::Path,
) -> anyhow::Result<Results> {
    let (server, _) = ServerProcess::start(command).await?;
    let address = server.address;
    let http = http_layer(address).await;
    let mut skipped = Vec::new();
    let mut runnable = Vec::new();
    for &variant in chosen {
        match (&http, variant.is_grpc()) {
            (Err(why), false) => skipped.push((variant.name().to_string(), why.clone())),
            _ => runnable.push(variant),
        }
    }

    // The vectors the server's encode step starts from: one real answer.
    let mut reference =
        VariantCaller::connect(Variant::Grpc(EmbeddingDtype::Float32), texts, address, ByteCounters::new()).await?;
    let Decoded::Floats { values, dim, .. } = reference.answer().await?.decoded else {
        anyhow::bail!("FLOAT32 answered bits");
    };
    drop(reference);

    let mut probes = Vec::new();
    for &variant in &runnable {
        let probe = probe(variant, texts, address, plan, &server, &values, dim).await?;
        println!(
            "{}: one call {} B on the wire ({} B body), encode {:.3} ms, decode {:.3} ms; c=1 {:.1} ms p50, server CPU {:.2} ms/call",
            variant.name(),
            probe.wire.0,
            probe.answer.body.len(),
            ms(probe.encode),
            ms(probe.decode),
            ms(probe.single.latency().p50),
            probe.single_cpu.server_cores * probe.single_cpu.wall.as_secs_f64() * 1e3 / probe.single.ok().max(1) as f64
        );
        probes.push((variant, probe));
    }

    let bodies_dir = config.results_dir.join("bodies");
    let captured: Vec<(Variant, Answer)> = probes.iter().map(|(v, p)| (*v, p.answer.clone())).collect();
    python_decode::write_bodies(&bodies_dir, &captured)?;
    let python_figures =
        python_decode::run(python, &config.decode_script, &config.proto_dir, &bodies_dir, plan.python_secs)?;

    let loads = load(&runnable, texts, address, config.concurrency, plan, &server).await?;
    server.stop().await?;

    let variants = probes
        .into_iter()
        .zip(loads)
        .map(|((variant, probe), load)| VariantResults {
            variant,
            body_bytes: probe.answer.body.len(),
            wire_received: probe.wire.0,
            wire_sent: probe.wire.1,
            server_encode: probe.encode,
            rust_decode: probe.decode,
            python: python_figures.get(variant.name()).cloned(),
            single: probe.single,
            single_cpu: probe.single_cpu,
            load: load.run,
            load_cpu: load.cpu,
            load_received: load.received,
            load_sent: load.sent,
        })
        .collect();
    Ok(Results {
        quick: config.quick,
        backend: config.backend.name(),
        texts: texts.len(),
        dim,
        concurrency: config.concurrency,
        variants,
        skipped,
    })
}

/// Ok when the server answers GET /healthz over HTTP/1.1, else why not.
async fn http_layer(address: std::net::SocketAddr) -> Result<(), String> {
    let mut connection = HttpConnection::open(address, ByteCounters::new()).await.map_err(|e| format!("{e:#}"))?;
    match connection.get("/healthz").await {
        Ok(answer) if answer.status.is_success() => Ok(()),
        Ok(answer) => Err(format!("the server's HTTP layer answered GET /healthz with {}", answer.status)),
        Err(error) => Err(format!("the server does not answer HTTP/1.1: {error:#}")),
    }
}

/// One variant's single-call figures.
struct Probe {
    answer: Answer,
    /// (received, sent) bytes of one call on an open connection.
    wire: (u64, u64),
    encode: std::time::Duration,
    decode: std::time::Duration,
    single: ClosedLoopRun,
    single_cpu: CpuUse,
}

async fn probe(
    variant: Variant,
    texts: &[String],
    address: std::net::SocketAddr,
    plan: &Plan,
    server: &ServerProcess,
    values: &[f32],
    dim: usize,
) -> anyhow::Result<Probe> {
    let counters = ByteCounters::new();
    let mut caller = VariantCaller::connect(variant, texts, address, counters.clone()).await?;
    for _ in 0..WARMUP_CALLS {
        caller.answer().await.with_context(|| format!("{} warm-up", variant.name()))?;
    }
    let before = counters.totals();
    let answer = caller.answer().await?;
    let after = counters.totals();
    let cpu = CpuWindow::start(server.pid)?;
    let single = closed_loop::run(vec![caller], Stop::After(plan.probe_time)).await?;
    let single_cpu = cpu.finish()?;
    let encode = micro::median_time(plan.micro_time, || micro::server_encode(variant, values, dim));
    micro::client_decode(variant, &answer)?;
    let decode = micro::median_time(plan.micro_time, || micro::client_decode(variant, &answer));
    Ok(Probe { answer, wire: (after.0 - before.0, after.1 - before.1), encode, decode, single, single_cpu })
}

/// One variant's concurrent load, rounds combined.
struct Load {
    run: ClosedLoopRun,
    cpu: CpuUse,
    received: u64,
    sent: u64,
}

/// The variants under load, alternating round by round.
async fn load(
    variants: &[Variant],
    texts: &[String],
    address: std::net::SocketAddr,
    concurrency: usize,
    plan: &Plan,
    server: &ServerProcess,
) -> anyhow::Result<Vec<Load>> {
    let round_time = plan.run_time / plan.rounds as u32;
    let mut parts: Vec<Vec<(ClosedLoopRun, CpuUse, (u64, u64))>> = vec![Vec::new(); variants.len()];
    for round in 0..plan.rounds {
        for (i, &variant) in variants.iter().enumerate() {
            if round == 0 {
                let warm = callers(variant, texts, address, concurrency, ByteCounters::new()).await?;
                closed_loop::run(warm, Stop::After(plan.warmup)).await?;
            }
            let counters = ByteCounters::new();
            let workers = callers(variant, texts, address, concurrency, counters.clone()).await?;
            let connected = counters.totals();
            let cpu = CpuWindow::start(server.pid)?;
            let run = closed_loop::run(workers, Stop::After(round_time)).await?;
            let cpu = cpu.finish()?;
            let done = counters.totals();
            println!(
                "{} round {}: {:.1} req/s ({} errors), p50 {:.1} ms, server {:.2} / bench {:.2} cores",
                variant.name(),
                round + 1,
                run.rate(),
                run.errors(),
                ms(run.latency().p50),
                cpu.server_cores,
                cpu.bench_cores
            );
            if let Some(error) = &run.first_error {
                println!("  first error: {error}");
            }
            parts[i].push((run, cpu, (done.0 - connected.0, done.1 - connected.1)));
        }
    }
    Ok(parts
        .into_iter()
        .map(|rounds| Load {
            run: ClosedLoopRun::combine(&rounds.iter().map(|(run, _, _)| run.clone()).collect::<Vec<_>>()),
            cpu: CpuUse::combine(&rounds.iter().map(|(_, cpu, _)| cpu.clone()).collect::<Vec<_>>()),
            received: rounds.iter().map(|(_, _, bytes)| bytes.0).sum(),
            sent: rounds.iter().map(|(_, _, bytes)| bytes.1).sum(),
        })
        .collect())
}

async fn callers(
    variant: Variant,
    texts: &[String],
    address: std::net::SocketAddr,
    concurrency: usize,
    counters: Arc<ByteCounters>,
) -> anyhow::Result<Vec<VariantCaller>> {
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        workers.push(VariantCaller::connect(variant, texts, address, counters.clone()).await?);
    }
    Ok(workers)
}
