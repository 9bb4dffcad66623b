//! The figures against their targets: the final table, and the CSV files.
//!
//! Targets that depend on the in-process figures (throughput ratio, latency bound)
//! are computed from the same run, so a busy machine moves both sides together.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use embedwire_bench::latency::ms;
use embedwire_bench::load::LoadResult;
use embedwire_bench::targets::{self, Bound, Row, csv_field};

use crate::in_process::Ceiling;
use embedwire_bench::memory::mib;

/// Server throughput at least this fraction of the best in-process rate.
const MIN_THROUGHPUT_RATIO: f64 = 0.90;
/// Concurrency-1 p50 at most this factor of the in-process batch-1 p50 ...
const LATENCY_FACTOR: f64 = 1.25;
/// ... plus this much, in ms, for the network round trip and the request handling.
const LATENCY_SLACK_MS: f64 = 1.0;
/// RSS after load, before any traffic but one call, with the fp32 graph (issue 14:
/// the weights, 86 MiB in memory, are most of it).
const MAX_IDLE_RSS_MIB_FP32: f64 = 130.0;
/// The same with the int8 graph.
const MAX_IDLE_RSS_MIB_INT8: f64 = 100.0;
/// RSS at the end of the throughput run.
const MAX_LOADED_RSS_MIB: f64 = 300.0;
/// Spawn to health SERVING.
const MAX_COLD_START_SECS: f64 = 2.0;

/// How the run was set up, recorded next to its figures.
#[derive(Debug, Clone)]
pub struct RunSetup {
    pub quick: bool,
    pub intra_op_threads: usize,
    pub clients: usize,
    pub clients_per_connection: usize,
    /// Extra server flags (the variant measured).
    pub server_args: Vec<String>,
    /// The graph measured, as `--precision` names it (fp32 or int8).
    pub precision: &'static str,
}

/// Server RSS at the three moments measured.
#[derive(Debug, Clone, Copy)]
pub struct ServerMemory {
    /// After SERVING and one call.
    pub idle: u64,
    /// Highest sample during the throughput run.
    pub peak: u64,
    /// Right after the throughput run.
    pub after_throughput: u64,
}

/// Cores kept busy during the throughput run. On a small machine the clients share
/// the cores with the server, and what they take the server cannot use.
#[derive(Debug, Clone, Copy)]
pub struct CpuShare {
    pub server_cores: f64,
    pub bench_cores: f64,
}

/// Every figure of one run.
#[derive(Debug, Clone)]
pub struct Results {
    pub setup: RunSetup,
    pub ceiling: Ceiling,
    pub throughput: LoadResult,
    pub throughput_cpu: CpuShare,
    pub latency: LoadResult,
    pub memory: ServerMemory,
    /// Spawn to SERVING of each start.
    pub cold_starts: Vec<Duration>,
}

impl Results {
    fn cold_start_median(&self) -> Duration {
        let mut sorted = self.cold_starts.clone();
        sorted.sort_unstable();
        // The lower median for an even count: with 2 starts, the faster one.
        sorted[(sorted.len() - 1) / 2]
    }
}

fn rows(results: &Results) -> Vec<Row> {
    let best = results.ceiling.best();
    let batch_one_p50 = ms(results.ceiling.of(1).expect("batch size 1 is always measured").batch_latency.p50);
    let ceiling_rate = best.rate();
    let throughput = results.throughput.rate();
    let latency_limit = LATENCY_FACTOR * batch_one_p50 + LATENCY_SLACK_MS;
    let (tl, cl) = (&results.throughput.latency, &results.latency.latency);
    let cold = results.cold_start_median().as_secs_f64();
    let memory = results.memory;
    let max_idle_rss = if results.setup.precision == "int8" { MAX_IDLE_RSS_MIB_INT8 } else { MAX_IDLE_RSS_MIB_FP32 };
    vec![
        Row::info(
            "in-process ceiling (best)",
            ceiling_rate,
            "sentences/s",
            format!("{ceiling_rate:.0} s/s @ batch {}", best.batch_size),
        ),
        Row::info("in-process batch-1 p50", batch_one_p50, "ms", format!("{batch_one_p50:.2} ms")),
        Row {
            figure: format!("throughput ({} clients)", results.setup.clients),
            value: throughput,
            unit: "sentences/s",
            measured: format!("{throughput:.0} s/s"),
            target: Some((
                Bound::AtLeast(MIN_THROUGHPUT_RATIO * ceiling_rate),
                format!(
                    ">= {MIN_THROUGHPUT_RATIO:.2} x {ceiling_rate:.0} s/s ({:.0})",
                    MIN_THROUGHPUT_RATIO * ceiling_rate
                ),
            )),
            note: format!("{:.2} x", throughput / ceiling_rate),
        },
        Row::info(
            "throughput latency p50 / p99",
            ms(tl.p50),
            "ms",
            format!("{:.1} / {:.1} ms", ms(tl.p50), ms(tl.p99)),
        ),
        Row::info(
            "throughput CPU server / bench",
            results.throughput_cpu.server_cores,
            "cores",
            format!("{:.2} / {:.2} cores", results.throughput_cpu.server_cores, results.throughput_cpu.bench_cores),
        ),
        Row {
            figure: "latency c=1 p50".into(),
            value: ms(cl.p50),
            unit: "ms",
            measured: format!("{:.2} ms", ms(cl.p50)),
            target: Some((
                Bound::AtMost(latency_limit),
                format!("<= {LATENCY_FACTOR} x {batch_one_p50:.2} + {LATENCY_SLACK_MS} ms ({latency_limit:.2})"),
            )),
            note: format!("{:.2} x", ms(cl.p50) / batch_one_p50),
        },
        Row::info("latency c=1 p95 / p99", ms(cl.p95), "ms", format!("{:.2} / {:.2} ms", ms(cl.p95), ms(cl.p99))),
        Row {
            figure: "RSS idle".into(),
            value: mib(memory.idle),
            unit: "MiB",
            measured: format!("{:.1} MiB", mib(memory.idle)),
            target: Some((Bound::AtMost(max_idle_rss), format!("<= {max_idle_rss} MiB ({})", results.setup.precision))),
            note: String::new(),
        },
        Row {
            figure: "RSS after throughput".into(),
            value: mib(memory.after_throughput),
            unit: "MiB",
            measured: format!("{:.1} MiB", mib(memory.after_throughput)),
            target: Some((Bound::AtMost(MAX_LOADED_RSS_MIB), format!("<= {MAX_LOADED_RSS_MIB} MiB"))),
            note: format!("peak {:.1}", mib(memory.peak)),
        },
        Row {
            figure: format!("cold start (median of {})", results.cold_starts.len()),
            value: cold,
            unit: "s",
            measured: format!("{cold:.2} s"),
            target: Some((Bound::AtMost(MAX_COLD_START_SECS), format!("<= {MAX_COLD_START_SECS} s"))),
            note: String::new(),
        },
    ]
}

/// The final table, as printed.
pub fn table(results: &Results) -> String {
    targets::table(&rows(results))
}

/// Writes `embed_bench.csv` (one row per measurement) and `embed_bench_summary.csv`
/// (one row per figure of the table) into `dir`; returns their paths.
pub fn write_csv(dir: &Path, results: &Results) -> anyhow::Result<[PathBuf; 2]> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let measurements = dir.join("embed_bench.csv");
    let summary = dir.join("embed_bench_summary.csv");
    write(&measurements, &measurements_csv(results))?;
    write(&summary, &summary_csv(results))?;
    Ok([measurements, summary])
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn measurements_csv(results: &Results) -> String {
    let mut out = String::from("figure,parameter,value,unit\n");
    let mut row = |figure: &str, parameter: &str, value: String, unit: &str| {
        let _ = writeln!(out, "{figure},{},{},{unit}", csv_field(parameter), csv_field(&value));
    };
    let setup = &results.setup;
    row("setup", "quick", setup.quick.to_string(), "");
    row("setup", "intra_op_threads", setup.intra_op_threads.to_string(), "threads");
    row("setup", "clients", setup.clients.to_string(), "clients");
    row("setup", "clients_per_connection", setup.clients_per_connection.to_string(), "clients");
    row("setup", "server_args", setup.server_args.join(" "), "");
    row("setup", "precision", setup.precision.to_string(), "");
    for run in &results.ceiling.runs {
        let batch = format!("batch={}", run.batch_size);
        row("in_process", &batch, format!("{:.1}", run.rate()), "sentences/s");
        row("in_process_batch_mean", &batch, format!("{:.3}", ms(run.batch_latency.mean)), "ms");
        row("in_process_batch_p50", &batch, format!("{:.3}", ms(run.batch_latency.p50)), "ms");
        row("in_process_batches", &batch, run.batch_latency.count.to_string(), "batches");
    }
    for (figure, load) in [("throughput", &results.throughput), ("latency_c1", &results.latency)] {
        row(figure, "rate", format!("{:.1}", load.rate()), "sentences/s");
        row(figure, "calls", load.calls.to_string(), "calls");
        row(figure, "seconds", format!("{:.3}", load.elapsed.as_secs_f64()), "s");
        let l = &load.latency;
        for (name, value) in [("mean", l.mean), ("p50", l.p50), ("p95", l.p95), ("p99", l.p99), ("max", l.max)] {
            row(figure, name, format!("{:.3}", ms(value)), "ms");
        }
    }
    row("throughput_cpu", "server", format!("{:.3}", results.throughput_cpu.server_cores), "cores");
    row("throughput_cpu", "bench", format!("{:.3}", results.throughput_cpu.bench_cores), "cores");
    let memory = results.memory;
    for (name, bytes) in [("idle", memory.idle), ("peak", memory.peak), ("after_throughput", memory.after_throughput)] {
        row("rss", name, format!("{:.1}", mib(bytes)), "MiB");
    }
    for (i, start) in results.cold_starts.iter().enumerate() {
        row("cold_start", &format!("start={}", i + 1), format!("{:.1}", ms(*start)), "ms");
    }
    out
}

fn summary_csv(results: &Results) -> String {
    targets::summary_csv(&rows(results))
}
