//! embed: how close the server comes to ONNX Runtime called directly: the in-process
//! ceiling (sentences/s of the bare model at batch sizes 1..64) against the server's
//! throughput with 32 one-sentence clients, one sequential client against the batch-1
//! time, the server's memory idle and loaded, its cold start. Both sides load the same
//! graph with the same threads; the ceiling's model is dropped before the server starts.

use std::{sync::Arc, time::Duration};

use embedwire_bench::{
    cpu::CpuWindow,
    in_process::{self, Ceiling, CeilingPlan},
    latency::ms,
    load::{self, LoadResult, Rpc, Stop},
    memory::{RssSampler, mib, rss_bytes},
    options::{Common, ModelPaths, connections},
    report::{Report, Row, Table},
    sentences,
    server_process::{ServerCommand, ServerProcess},
};
use embedwire_server::model::{
    files::ModelFiles,
    onnx::{OnnxModel, init_runtime},
    precision::PrecisionChoice,
    tokenizer::TextTokenizer,
};

/// Server throughput at least this share of the in-process ceiling.
const MIN_THROUGHPUT_RATIO: f64 = 0.90;
/// c=1 latency at most this factor of the in-process batch-1 p50, plus the slack.
const LATENCY_FACTOR: f64 = 1.25;
const LATENCY_SLACK_MS: f64 = 1.0;
const MAX_IDLE_RSS_MIB_FP32: f64 = 130.0;
const MAX_IDLE_RSS_MIB_INT8: f64 = 100.0;
const MAX_LOADED_RSS_MIB: f64 = 300.0;
const MAX_COLD_START_SECS: f64 = 2.0;
/// Distinct sentences in rotation: no batch or concurrent call repeats a text.
const SENTENCES: usize = 512;
/// Concurrent one-sentence clients of the throughput run, 4 to an HTTP/2 connection.
const CLIENTS: usize = 32;
const CLIENTS_PER_CONNECTION: usize = 4;

/// Options of the embed scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The graph to measure, in-process and in the server (`--precision`).
    #[arg(long, value_enum, default_value = "fp32")]
    pub precision: PrecisionChoice,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let paths = common.model_paths(args.precision)?;
    let mut report = Report::new(common.results(""), "embed_bench")?;
    let texts: Arc<[String]> = sentences::sentences(SENTENCES).into();
    let binary = common.server_binary()?; // before measuring: a build would disturb the ceiling
    let threads = common.intra_op_threads;
    println!("embed: model {} ({}), {threads} intra-op threads", paths.model_dir.display(), paths.precision);

    let ceiling = measure_ceiling(common, &paths, &texts)?;
    let command = common.server_command(
        binary,
        vec![
            ("--backend", "onnx".into()),
            ("--model-dir", paths.model_dir.clone().into()),
            ("--precision", paths.precision.into()),
            ("--ort-library", paths.ort_library.clone().into()),
        ],
    );
    let server = tokio::runtime::Runtime::new()?.block_on(measure_server(common, &command, texts))?;
    report.figures(judge(&paths, &ceiling, &server));
    report.table("embed_bench.csv", &measurements(common, &paths, &ceiling, &server))?;
    report.finish()
}

fn measure_ceiling(common: &Common, paths: &ModelPaths, texts: &[String]) -> anyhow::Result<Ceiling> {
    println!("in-process ceiling");
    let files = ModelFiles::read(&paths.model_dir)?;
    let tokenizer = TextTokenizer::from_file(&files.tokenizer_path, files.max_input_tokens)?;
    let settings = common.onnx_settings()?;
    let mut model = OnnxModel::load(init_runtime(&paths.ort_library)?, &files, &paths.graph, settings, None)?;
    let sequences = texts.iter().map(|text| tokenizer.tokenize(text).map(|t| t.ids)).collect::<Result<Vec<_>, _>>()?;
    let plan = CeilingPlan {
        batch_sizes: common.pick(vec![1, 2, 4, 8, 16, 32, 64], vec![1, 8, 32]),
        time_per_size: common.duration(3.0, 0.5),
        warmup: common.warmup(1.0, 0.2),
    };
    in_process::measure(&mut model, &sequences, &plan, |run| {
        let (size, rate, p50) = (run.batch_size, run.rate(), ms(run.batch_latency.p50));
        println!("  batch {size:>2}: {rate:>7.1} sentences/s  batch p50 {p50:>6.2} ms");
    })
}

/// What the server runs produce.
struct ServerFigures {
    cold_starts: Vec<Duration>,
    latency: LoadResult,
    throughput: LoadResult,
    /// CPU cores used over the throughput run: (server, bench clients).
    cores: (f64, f64),
    /// RSS: idle after one call, highest during throughput, right after it.
    rss: (u64, u64, u64),
}

/// Cold starts for their median (each a fresh process, stopped before the next), then
/// on the last one: idle memory, sequential latency, throughput with RSS and CPU sampled.
async fn measure_server(
    common: &Common,
    command: &ServerCommand,
    texts: Arc<[String]>,
) -> anyhow::Result<ServerFigures> {
    let mut cold_starts = Vec::new();
    let server = loop {
        let (server, took) = ServerProcess::start(command).await?;
        println!("cold start: {:.0} ms", ms(took));
        cold_starts.push(took);
        if cold_starts.len() >= common.pick(3, 1) {
            break server;
        }
        server.stop().await?;
    };
    let control = [server.connect().await?];
    server.wait_settled(command).await?;
    load::run(&control, 1, texts.clone(), Rpc::Embed, Stop::Calls(1)).await?;
    let idle = rss_bytes(server.pid)?;
    load::run(&control, 1, texts.clone(), Rpc::Embed, Stop::Calls(common.pick(50, 10))).await?;
    let latency = load::run(&control, 1, texts.clone(), Rpc::Embed, Stop::After(common.duration(5.0, 1.0))).await?;
    println!("latency c=1: p50 {:.2} ms  p99 {:.2} ms", ms(latency.latency.p50), ms(latency.latency.p99));

    let channels = connections(&server, CLIENTS.div_ceil(CLIENTS_PER_CONNECTION)).await?;
    load::run(&channels, CLIENTS, texts.clone(), Rpc::Embed, Stop::After(common.warmup(2.0, 0.3))).await?;
    let sampler = RssSampler::start(server.pid, Duration::from_millis(50));
    let throughput = load::run(&channels, CLIENTS, texts, Rpc::Embed, Stop::After(common.duration(10.0, 1.0)));
    let (throughput, cpu) = CpuWindow::around(server.pid, throughput).await?;
    let rss_after = rss_bytes(server.pid)?;
    let peak = sampler.finish(server.pid).await?.peak();
    let cores = (cpu.server_cores, cpu.bench_cores);
    println!("throughput: {:.0} sentences/s, server {:.2} cores, clients {:.2}", throughput.rate(), cores.0, cores.1);
    server.stop().await?;
    Ok(ServerFigures { cold_starts, latency, throughput, cores, rss: (idle, peak, rss_after) })
}

fn judge(paths: &ModelPaths, ceiling: &Ceiling, server: &ServerFigures) -> Vec<Row> {
    let (best, batch_one) = (ceiling.best(), ceiling.of(1).expect("batch size 1 is always measured"));
    let (ceiling_rate, batch_one) = (best.rate(), ms(batch_one.batch_latency.p50));
    let (rate, tl, cl) = (server.throughput.rate(), &server.throughput.latency, &server.latency.latency);
    let min_rate = MIN_THROUGHPUT_RATIO * ceiling_rate;
    let latency_limit = LATENCY_FACTOR * batch_one + LATENCY_SLACK_MS;
    let max_idle = if paths.precision == "int8" { MAX_IDLE_RSS_MIB_INT8 } else { MAX_IDLE_RSS_MIB_FP32 };
    let mut starts = server.cold_starts.clone();
    starts.sort_unstable();
    let cold = starts[(starts.len() - 1) / 2].as_secs_f64();
    let (idle, peak, loaded) = (mib(server.rss.0), mib(server.rss.1), mib(server.rss.2));
    let (server_cores, bench_cores) = server.cores;
    let best_text = format!("{ceiling_rate:.0} s/s @ batch {}", best.batch_size);
    let loaded_text = format!("{:.1} / {:.1} ms", ms(tl.p50), ms(tl.p99));
    let cores_text = format!("{server_cores:.2} / {bench_cores:.2} cores");
    let latency_target = format!("<= {LATENCY_FACTOR} x {batch_one:.2} + {LATENCY_SLACK_MS} ms ({latency_limit:.2})");
    vec![
        Row::info("in-process ceiling (best)", ceiling_rate, "sentences/s", best_text),
        Row::info("in-process batch-1 p50", batch_one, "ms", format!("{batch_one:.2} ms")),
        Row::info(format!("throughput ({CLIENTS} clients)"), rate, "sentences/s", format!("{rate:.0} s/s"))
            .at_least(min_rate, format!(">= {MIN_THROUGHPUT_RATIO:.2} x {ceiling_rate:.0} s/s ({min_rate:.0})"))
            .with_note(format!("{:.2} x", rate / ceiling_rate)),
        Row::info("throughput latency p50 / p99", ms(tl.p50), "ms", loaded_text),
        Row::info("throughput CPU server / bench", server_cores, "cores", cores_text),
        Row::info("latency c=1 p50", ms(cl.p50), "ms", format!("{:.2} ms", ms(cl.p50)))
            .at_most(latency_limit, latency_target)
            .with_note(format!("{:.2} x", ms(cl.p50) / batch_one)),
        Row::info("latency c=1 p95 / p99", ms(cl.p95), "ms", format!("{:.2} / {:.2} ms", ms(cl.p95), ms(cl.p99))),
        Row::info("RSS idle", idle, "MiB", format!("{idle:.1} MiB"))
            .at_most(max_idle, format!("<= {max_idle} MiB ({})", paths.precision)),
        Row::info("RSS after throughput", loaded, "MiB", format!("{loaded:.1} MiB"))
            .at_most(MAX_LOADED_RSS_MIB, format!("<= {MAX_LOADED_RSS_MIB} MiB"))
            .with_note(format!("peak {peak:.1}")),
        Row::info(format!("cold start (median of {})", starts.len()), cold, "s", format!("{cold:.2} s"))
            .at_most(MAX_COLD_START_SECS, format!("<= {MAX_COLD_START_SECS} s")),
    ]
}

/// Every measurement, one per line: `figure,parameter,value,unit`.
fn measurements(common: &Common, paths: &ModelPaths, ceiling: &Ceiling, server: &ServerFigures) -> Table {
    let mut table = Table::new("figure,parameter,value,unit");
    let mut row =
        |figure: &str, parameter: &str, value: String, unit: &str| table.row([figure, parameter, &value, unit]);
    row("setup", "quick", common.quick.to_string(), "");
    row("setup", "intra_op_threads", common.intra_op_threads.to_string(), "threads");
    row("setup", "clients", CLIENTS.to_string(), "clients");
    row("setup", "clients_per_connection", CLIENTS_PER_CONNECTION.to_string(), "clients");
    row("setup", "server_args", common.server_args.join(" "), "");
    row("setup", "precision", paths.precision.to_string(), "");
    for run in &ceiling.runs {
        let (batch, l) = (format!("batch={}", run.batch_size), &run.batch_latency);
        row("in_process", &batch, format!("{:.1}", run.rate()), "sentences/s");
        row("in_process_batch_mean", &batch, format!("{:.3}", ms(l.mean)), "ms");
        row("in_process_batch_p50", &batch, format!("{:.3}", ms(l.p50)), "ms");
        row("in_process_batches", &batch, l.count.to_string(), "batches");
    }
    for (figure, load) in [("throughput", &server.throughput), ("latency_c1", &server.latency)] {
        row(figure, "rate", format!("{:.1}", load.rate()), "sentences/s");
        row(figure, "calls", load.calls.to_string(), "calls");
        row(figure, "seconds", format!("{:.3}", load.elapsed.as_secs_f64()), "s");
        let l = &load.latency;
        for (name, value) in [("mean", l.mean), ("p50", l.p50), ("p95", l.p95), ("p99", l.p99), ("max", l.max)] {
            row(figure, name, format!("{:.3}", ms(value)), "ms");
        }
    }
    row("throughput_cpu", "server", format!("{:.3}", server.cores.0), "cores");
    row("throughput_cpu", "bench", format!("{:.3}", server.cores.1), "cores");
    for (name, bytes) in [("idle", server.rss.0), ("peak", server.rss.1), ("after_throughput", server.rss.2)] {
        row("rss", name, format!("{:.1}", mib(bytes)), "MiB");
    }
    for (i, start) in server.cold_starts.iter().enumerate() {
        row("cold_start", &format!("start={}", i + 1), format!("{:.1}", ms(*start)), "ms");
    }
    table
}
