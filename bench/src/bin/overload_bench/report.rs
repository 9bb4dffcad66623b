//! The overload's figures: the rows of the final table (judged against the
//! issue's targets, for every admission limit tried), the summary CSV and a CSV
//! with one line per run.

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

/// The reference figures every overload run is compared with.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// Embed calls/s at saturation, closed loop.
    pub max_rate: f64,
    /// Its latency (closed loop: for context only).
    pub max_latency: LatencySummary,
    pub max_clients: usize,
    /// The open-loop run at `unloaded_fraction` of the maximum.
    pub unloaded: OpenRun,
    pub unloaded_fraction: f64,
    /// --max-in-flight-inputs of the baseline's server (its default).
    pub limit: usize,
}

impl Baseline {
    /// The definition printed with the unloaded p99.
    pub fn definition(&self) -> String {
        format!(
            "unloaded p99 = p99 latency of answered Embed calls (one text each) offered open loop at {:.0}% of the \
             measured maximum ({:.0} calls/s), on a server with default flags",
            self.unloaded_fraction * 100.0,
            self.max_rate * self.unloaded_fraction
        )
    }
}

/// One overload run under one admission limit.
#[derive(Debug, Clone)]
pub struct LimitRun {
    /// --max-in-flight-inputs of the server.
    pub limit: usize,
    /// Whether it is the server's default.
    pub default: bool,
    pub run: OpenRun,
}

impl LimitRun {
    fn label(&self) -> String {
        format!("limit {}{}", self.limit, if self.default { " (default)" } else { "" })
    }

    /// The rejection p99 as judged: a run without rejections has none to be fast.
    fn rejection_p99_ms(&self) -> f64 {
        if self.run.rejections.count == 0 { f64::INFINITY } else { ms(self.run.rejections.p99) }
    }

    /// Whether both targets are met.
    pub fn passes(&self, baseline: &Baseline) -> bool {
        self.rejection_p99_ms() <= MAX_REJECTION_P99_MS
            && ms(self.run.accepted.p99) <= MAX_ACCEPTED_P99_RATIO * ms(baseline.unloaded.accepted.p99)
    }
}

/// The rows of the table.
pub fn rows(baseline: &Baseline, runs: &[LimitRun]) -> Vec<Row> {
    let unloaded_p99 = ms(baseline.unloaded.accepted.p99);
    let mut rows = vec![
        Row::info(
            format!("max Embed throughput (1 text/call, closed loop, {} clients)", baseline.max_clients),
            baseline.max_rate,
            "calls/s",
            format!(
                "{:.0} calls/s (p50 {:.1} / p99 {:.1} ms)",
                baseline.max_rate,
                ms(baseline.max_latency.p50),
                ms(baseline.max_latency.p99)
            ),
        ),
        Row::info(
            format!("unloaded p99 (open loop, {:.0}% of max)", baseline.unloaded_fraction * 100.0),
            unloaded_p99,
            "ms",
            format!(
                "{unloaded_p99:.2} ms (p50 {:.2} ms; {} calls, {} rejected, {} errors)",
                ms(baseline.unloaded.accepted.p50),
                baseline.unloaded.accepted.count,
                baseline.unloaded.rejected,
                baseline.unloaded.failed
            ),
        ),
    ];
    for limit in runs {
        let (label, run) = (limit.label(), &limit.run);
        rows.push(Row::info(
            format!("offered, {label}"),
            run.offered,
            "calls/s",
            format!(
                "{:.0} calls/s ({:.1}x max), {} sent, generator lag p99 {:.1} ms",
                run.offered,
                run.offered / baseline.max_rate,
                run.sent,
                ms(run.lag.p99)
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
            limit.rejection_p99_ms(),
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

/// One line per open-loop run: the unloaded one, then each limit's overload.
pub fn runs_csv(baseline: &Baseline, runs: &[LimitRun]) -> String {
    let mut out = String::from(
        "phase,limit,default,offered_per_s,sent,accepted,rejected,errors,rejected_p50_ms,rejected_p99_ms,\
         accepted_p50_ms,accepted_p99_ms,goodput_per_s,lag_p99_ms,held_back\n",
    );
    let mut line = |phase: &str, limit: String, default: bool, run: &OpenRun| {
        let _ = writeln!(
            out,
            "{phase},{limit},{},{:.1},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.1},{:.3},{}",
            u8::from(default),
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
            run.held_back
        );
    };
    line("unloaded", baseline.limit.to_string(), true, &baseline.unloaded);
    for limit in runs {
        line("overload", limit.limit.to_string(), limit.default, &limit.run);
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
