//! The overload's figures: the rows of the final table (judged against the
//! issue's targets, for every queue-time bound tried), the summary CSV and a CSV
//! with one line per bound.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use embedwire_bench::latency::{LatencySummary, ms};
use embedwire_bench::targets::{self, Bound, Row};

use crate::runs::OpenRun;

/// Slowest acceptable rejection p99, ms.
const MAX_REJECTION_P99_MS: f64 = 5.0;
/// Most accepted p99 under overload, as a multiple of the unloaded p99.
const MAX_ACCEPTED_P99_RATIO: f64 = 2.0;

/// The reference figures an overload run is compared with, measured just before
/// it on a reference server (default flags, queue-time bound off).
#[derive(Debug, Clone)]
pub struct Baseline {
    /// Embed calls/s at saturation, closed loop.
    pub max_rate: f64,
    /// Its latency (closed loop: for context only).
    pub max_latency: LatencySummary,
    pub max_clients: usize,
    /// The open-loop run at a fraction of the maximum.
    pub unloaded: OpenRun,
}

/// The definition printed with the figures.
pub fn definition(unloaded_fraction: f64) -> String {
    format!(
        "unloaded p99 = p99 latency of answered Embed calls (one text each) offered open loop at {:.0}% of the \
         maximum (closed loop, measured just before), on a server with default flags but no queue-time bound; \
         measured again before each bound's overload run",
        unloaded_fraction * 100.0
    )
}

/// One overload run under one queue-time bound, with its baseline.
#[derive(Debug, Clone)]
pub struct BoundRun {
    /// --max-queue-ms of the server; None: the server's derived default.
    pub bound_ms: Option<u64>,
    /// Whether it is the server's default.
    pub default: bool,
    pub baseline: Baseline,
    pub run: OpenRun,
    /// Cores the overloaded server used (2 is all of a 2-core machine; less means
    /// other work took the rest).
    pub server_cores: f64,
}

impl BoundRun {
    fn label(&self) -> String {
        format!("queue bound {}{}", self.bound_name(), if self.default { " (default)" } else { "" })
    }

    /// `N ms`, or `auto` for the server's derived bound.
    pub fn bound_name(&self) -> String {
        self.bound_ms.map_or("auto".to_string(), |ms| format!("{ms} ms"))
    }

    /// The rejection p99 as judged: a run without rejections has none to be fast.
    fn rejection_p99_ms(&self) -> f64 {
        if self.run.rejections.count == 0 { f64::INFINITY } else { ms(self.run.rejections.p99) }
    }

    fn unloaded_p99_ms(&self) -> f64 {
        ms(self.baseline.unloaded.accepted.p99)
    }

    /// Whether both targets are met.
    pub fn passes(&self) -> bool {
        self.rejection_p99_ms() <= MAX_REJECTION_P99_MS
            && ms(self.run.accepted.p99) <= MAX_ACCEPTED_P99_RATIO * self.unloaded_p99_ms()
    }
}

/// The rows of the table: per bound, its baseline, the overload and the targets.
pub fn rows(runs: &[BoundRun]) -> Vec<Row> {
    let mut rows = Vec::new();
    for bound in runs {
        let (label, run, baseline) = (bound.label(), &bound.run, &bound.baseline);
        let unloaded_p99 = bound.unloaded_p99_ms();
        rows.push(Row::info(
            format!("max Embed throughput, before {label}"),
            baseline.max_rate,
            "calls/s",
            format!(
                "{:.0} calls/s (1 text/call, {} clients closed loop: p50 {:.1} / p99 {:.1} ms)",
                baseline.max_rate,
                baseline.max_clients,
                ms(baseline.max_latency.p50),
                ms(baseline.max_latency.p99)
            ),
        ));
        rows.push(Row::info(
            format!("unloaded p99, before {label}"),
            unloaded_p99,
            "ms",
            format!(
                "{unloaded_p99:.2} ms (p50 {:.2} ms at {:.0} calls/s; {} rejected, {} errors)",
                ms(baseline.unloaded.accepted.p50),
                baseline.unloaded.offered,
                baseline.unloaded.rejected,
                baseline.unloaded.failed
            ),
        ));
        rows.push(Row::info(
            format!("offered, {label}"),
            run.offered,
            "calls/s",
            format!(
                "{:.0} calls/s ({:.1}x max), {} sent, generator lag p99 {:.1} ms, server {:.2} cores",
                run.offered,
                run.offered / baseline.max_rate,
                run.sent,
                ms(run.lag.p99),
                bound.server_cores
            ),
        ));
        rows.push(Row::info(
            format!("rejected, {label}"),
            run.rejected as f64,
            "calls",
            format!(
                "{} of {} ({:.0}%), {} other errors",
                run.rejected,
                run.sent,
                100.0 * run.rejected as f64 / run.sent.max(1) as f64,
                run.failed
            ),
        ));
        rows.push(Row::judged(
            format!("rejection latency, {label}"),
            bound.rejection_p99_ms(),
            "ms",
            if run.rejections.count == 0 {
                "no rejections".into()
            } else {
                format!("p50 {:.2} / p99 {:.2} ms", ms(run.rejections.p50), ms(run.rejections.p99))
            },
            Bound::AtMost(MAX_REJECTION_P99_MS),
            format!("p99 <= {MAX_REJECTION_P99_MS:.0} ms"),
        ));
        let accepted_p99 = ms(run.accepted.p99);
        rows.push(
            Row::judged(
                format!("accepted latency, {label}"),
                accepted_p99,
                "ms",
                format!("p50 {:.1} / p99 {accepted_p99:.1} ms", ms(run.accepted.p50)),
                Bound::AtMost(MAX_ACCEPTED_P99_RATIO * unloaded_p99),
                format!("p99 <= {MAX_ACCEPTED_P99_RATIO:.0} x {unloaded_p99:.2} ms"),
            )
            .with_note(format!("{:.1} x unloaded", accepted_p99 / unloaded_p99.max(1e-9))),
        );
        rows.push(Row::info(
            format!("goodput, {label}"),
            run.goodput(),
            "calls/s",
            format!("{:.0} calls/s ({:.0}% of max)", run.goodput(), 100.0 * run.goodput() / baseline.max_rate),
        ));
    }
    rows
}

/// One line per bound: its baseline, then its overload run.
pub fn runs_csv(runs: &[BoundRun]) -> String {
    let mut out = String::from(
        "queue_bound_ms,default,max_per_s,unloaded_p50_ms,unloaded_p99_ms,offered_per_s,sent,accepted,rejected,errors,\
         rejected_p50_ms,rejected_p99_ms,accepted_p50_ms,accepted_p99_ms,goodput_per_s,lag_p99_ms,held_back,\
         server_cores\n",
    );
    for bound in runs {
        let (run, baseline) = (&bound.run, &bound.baseline);
        let _ = writeln!(
            out,
            "{},{},{:.1},{:.3},{:.3},{:.1},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.1},{:.3},{},{:.2}",
            bound.bound_ms.map_or("auto".to_string(), |ms| ms.to_string()),
            u8::from(bound.default),
            baseline.max_rate,
            ms(baseline.unloaded.accepted.p50),
            ms(baseline.unloaded.accepted.p99),
            run.offered,
            run.sent,
            run.accepted.count,
            run.rejected,
            run.failed,
            ms(run.rejections.p50),
            ms(run.rejections.p99),
            ms(run.accepted.p50),
            ms(run.accepted.p99),
            run.goodput(),
            ms(run.lag.p99),
            run.held_back,
            bound.server_cores
        );
    }
    out
}

/// Writes overload_bench.csv (the rows) and overload_bench_runs.csv; returns their
/// paths.
pub fn write_csv(dir: &Path, rows: &[Row], runs_csv: &str) -> anyhow::Result<[PathBuf; 2]> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let summary = dir.join("overload_bench.csv");
    std::fs::write(&summary, targets::summary_csv(rows)).with_context(|| format!("writing {}", summary.display()))?;
    let per_run = dir.join("overload_bench_runs.csv");
    std::fs::write(&per_run, runs_csv).with_context(|| format!("writing {}", per_run.display()))?;
    Ok([summary, per_run])
}
