//! gateway-bench's figures: the targets (embedwire against the Python baseline at
//! the headline concurrency; HTTP search against gRPC Search), the printed table,
//! and the CSV files `bench/report.py` reads.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use embedwire_bench::closed_loop::ClosedLoopRun;
use embedwire_bench::cpu::CpuUse;
use embedwire_bench::latency::{LatencySummary, ms};
use embedwire_bench::memory::{RssSeries, mib};
use embedwire_bench::targets::{self, Bound, Row};

use crate::config::Target;
use crate::populate::IngestRun;

/// embedwire's RPS at least this many times the baseline's.
const MIN_RPS_RATIO: f64 = 2.0;
/// embedwire's p95 at most this fraction of the baseline's.
const MAX_P95_RATIO: f64 = 0.5;
/// embedwire's RSS at most this fraction of the baseline's.
const MAX_RSS_RATIO: f64 = 0.5;
/// /v1/search through the in-process HTTP layer against gRPC Search (issue 4).
const MIN_HTTP_GRPC_RATIO: f64 = 0.9;

/// A measured load run with the server's RSS and the CPU during it.
#[derive(Debug, Clone)]
pub struct Measured {
    pub concurrency: usize,
    pub run: ClosedLoopRun,
    pub rss: RssSeries,
    pub cpu: CpuUse,
}

/// A stretch of a gateway's life, for the RSS-over-time plot.
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: String,
    /// From the start of RSS sampling.
    pub start: Duration,
    pub end: Duration,
}

/// The HTTP-against-gRPC search comparison on one embedwire server.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub concurrency: usize,
    pub http: ClosedLoopRun,
    pub grpc: ClosedLoopRun,
    pub http_cpu: CpuUse,
    pub grpc_cpu: CpuUse,
}

/// Every figure of one gateway.
#[derive(Debug, Clone)]
pub struct TargetResults {
    pub target: Target,
    pub cold_start: Duration,
    pub ingest: IngestRun,
    pub headline: Measured,
    pub sweep: Vec<Measured>,
    /// RSS from the first healthy answer to the end.
    pub rss_timeline: RssSeries,
    pub phases: Vec<Phase>,
    pub comparison: Option<Comparison>,
}

/// Every figure of the run.
#[derive(Debug, Clone)]
pub struct Results {
    pub quick: bool,
    pub documents: usize,
    pub targets: Vec<TargetResults>,
}

fn latency_text(l: &LatencySummary) -> String {
    format!("{:.1} / {:.1} / {:.1} ms", ms(l.p50), ms(l.p95), ms(l.p99))
}

fn run_text(m: &Measured) -> String {
    let errors = m.run.errors();
    let errors = if errors > 0 { format!(", {errors} errors") } else { String::new() };
    format!("{:.1} req/s ({} requests{errors})", m.run.rate(), m.run.ok())
}

/// The rows of the printed table.
fn rows(results: &Results) -> Vec<Row> {
    let mut rows = Vec::new();
    for t in &results.targets {
        let name = t.target.name();
        let h = &t.headline;
        let latency = h.run.latency();
        rows.push(Row::info(
            format!("{name} cold start (spawn to /healthz ok)"),
            t.cold_start.as_secs_f64(),
            "s",
            format!("{:.2} s", t.cold_start.as_secs_f64()),
        ));
        rows.push(Row::info(
            format!("{name} ingest {} docs via /v1/ingest", t.ingest.documents),
            t.ingest.rate(),
            "documents/s",
            format!(
                "{:.1} docs/s ({:.1} s, {} requests)",
                t.ingest.rate(),
                t.ingest.elapsed.as_secs_f64(),
                t.ingest.requests
            ),
        ));
        rows.push(Row::info(format!("{name} /v1/search c={}", h.concurrency), h.run.rate(), "requests/s", run_text(h)));
        rows.push(Row::info(
            format!("{name} /v1/search c={} p50 / p95 / p99", h.concurrency),
            ms(latency.p95),
            "ms",
            latency_text(&latency),
        ));
        rows.push(Row::info(
            format!("{name} RSS during c={} (peak / mean)", h.concurrency),
            mib(h.rss.peak()),
            "MiB",
            format!("{:.1} / {:.1} MiB", mib(h.rss.peak()), mib(h.rss.mean())),
        ));
        rows.push(Row::info(
            format!("{name} CPU c={}: server / bench", h.concurrency),
            h.cpu.server_cores,
            "cores",
            format!("{:.2} / {:.2} cores", h.cpu.server_cores, h.cpu.bench_cores),
        ));
    }
    let find = |target: Target| results.targets.iter().find(|t| t.target == target);
    if let (Some(ours), Some(base)) = (find(Target::Embedwire), find(Target::Baseline)) {
        let (a, b) = (&ours.headline, &base.headline);
        let c = a.concurrency;
        let rps = a.run.rate() / b.run.rate().max(1e-9);
        rows.push(
            Row::judged(
                format!("RPS c={c} embedwire / baseline"),
                rps,
                "x",
                format!("{rps:.2} x"),
                Bound::AtLeast(MIN_RPS_RATIO),
                format!(">= {MIN_RPS_RATIO:.1} x"),
            )
            .with_note(format!("{:.1} vs {:.1} req/s", a.run.rate(), b.run.rate())),
        );
        let (pa, pb) = (a.run.latency().p95, b.run.latency().p95);
        let p95 = ratio(pa, pb);
        rows.push(
            Row::judged(
                format!("p95 c={c} embedwire / baseline"),
                p95,
                "x",
                format!("{p95:.2} x"),
                Bound::AtMost(MAX_P95_RATIO),
                format!("<= {MAX_P95_RATIO:.1} x"),
            )
            .with_note(format!("{:.1} vs {:.1} ms", ms(pa), ms(pb))),
        );
        let rss = a.rss.peak() as f64 / (b.rss.peak() as f64).max(1.0);
        rows.push(
            Row::judged(
                format!("RSS peak c={c} embedwire / baseline"),
                rss,
                "x",
                format!("{rss:.2} x"),
                Bound::AtMost(MAX_RSS_RATIO),
                format!("<= {MAX_RSS_RATIO:.1} x"),
            )
            .with_note(format!("{:.0} vs {:.0} MiB", mib(a.rss.peak()), mib(b.rss.peak()))),
        );
        let cold = ratio(ours.cold_start, base.cold_start);
        rows.push(Row::info(
            "cold start embedwire / baseline",
            cold,
            "x",
            format!("{cold:.2} x ({:.2} vs {:.2} s)", ours.cold_start.as_secs_f64(), base.cold_start.as_secs_f64()),
        ));
    }
    if let Some(comparison) = find(Target::Embedwire).and_then(|t| t.comparison.as_ref()) {
        let c = comparison.concurrency;
        let (http, grpc) = (comparison.http.rate(), comparison.grpc.rate());
        let r = http / grpc.max(1e-9);
        rows.push(Row::info(
            format!("HTTP /v1/search c={c}, rotating queries"),
            http,
            "requests/s",
            format!("{http:.1} req/s, {}", latency_text(&comparison.http.latency())),
        ));
        rows.push(Row::info(
            format!("gRPC Search c={c}, same queries"),
            grpc,
            "requests/s",
            format!("{grpc:.1} req/s, {}", latency_text(&comparison.grpc.latency())),
        ));
        rows.push(
            Row::judged(
                format!("HTTP /v1/search / gRPC Search c={c}"),
                r,
                "x",
                format!("{r:.2} x"),
                Bound::AtLeast(MIN_HTTP_GRPC_RATIO),
                format!(">= {MIN_HTTP_GRPC_RATIO:.1} x"),
            )
            .with_note(format!(
                "server CPU {:.2} vs {:.2} cores",
                comparison.http_cpu.server_cores, comparison.grpc_cpu.server_cores
            )),
        );
    }
    rows
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// The final table, as printed.
pub fn table(results: &Results) -> String {
    targets::table(&rows(results))
}

/// Writes the CSV files into `dir` and returns their paths:
/// - `gateway_summary.csv`: the table's rows;
/// - `gateway_runs.csv`: one line per load run (sweep, headline, comparison);
/// - `requests_<target>.csv`: every call of the headline run;
/// - `rss_<target>.csv`: RSS over the gateway's life, each sample with its phase.
pub fn write_csv(dir: &Path, results: &Results) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    let mut write = |name: String, text: String| -> anyhow::Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
        Ok(())
    };
    let mut summary = rows(results);
    summary.push(Row::info("setup quick", f64::from(u8::from(results.quick)), "bool", String::new()));
    summary.push(Row::info("setup documents", results.documents as f64, "documents", String::new()));
    write("gateway_summary.csv".into(), targets::summary_csv(&summary))?;
    let mut runs = String::from(
        "target,run,concurrency,requests,errors,seconds,rps,p50_ms,p95_ms,p99_ms,rss_peak_mib,server_cores,bench_cores\n",
    );
    for t in &results.targets {
        let name = t.target.name();
        for (run, m) in t.sweep.iter().map(|m| ("sweep", m)).chain([("headline", &t.headline)]) {
            let l = m.run.latency();
            let _ = writeln!(
                runs,
                "{name},{run},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.1},{:.3},{:.3}",
                m.concurrency,
                m.run.ok(),
                m.run.errors(),
                m.run.elapsed.as_secs_f64(),
                m.run.rate(),
                ms(l.p50),
                ms(l.p95),
                ms(l.p99),
                mib(m.rss.peak()),
                m.cpu.server_cores,
                m.cpu.bench_cores
            );
        }
        if let Some(c) = &t.comparison {
            for (run, r, cpu) in [("compare_http", &c.http, &c.http_cpu), ("compare_grpc", &c.grpc, &c.grpc_cpu)] {
                let l = r.latency();
                let _ = writeln!(
                    runs,
                    "{name},{run},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},,{:.3},{:.3}",
                    c.concurrency,
                    r.ok(),
                    r.errors(),
                    r.elapsed.as_secs_f64(),
                    r.rate(),
                    ms(l.p50),
                    ms(l.p95),
                    ms(l.p99),
                    cpu.server_cores,
                    cpu.bench_cores
                );
            }
        }
        write(format!("requests_{name}.csv"), t.headline.run.csv())?;
        let mut rss = String::from("t_s,rss_mib,phase\n");
        for (at, bytes) in &t.rss_timeline.samples {
            let phase = t.phases.iter().find(|p| p.start <= *at && *at <= p.end).map_or("idle", |p| p.name.as_str());
            let _ = writeln!(rss, "{:.3},{:.2},{phase}", at.as_secs_f64(), mib(*bytes));
        }
        write(format!("rss_{name}.csv"), rss)?;
        let _ = writeln!(runs, "{name},cold_start,,,,{:.3},,,,,,,", t.cold_start.as_secs_f64());
        let _ = writeln!(
            runs,
            "{name},ingest,,{},,{:.3},{:.3},,,,,,",
            t.ingest.documents,
            t.ingest.elapsed.as_secs_f64(),
            t.ingest.rate()
        );
    }
    write("gateway_runs.csv".into(), runs)?;
    Ok(written)
}
