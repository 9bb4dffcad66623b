//! The soak's figures: the rows of the final table (judged against the issue's
//! targets), the summary CSV and the per-window CSV.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use embedwire_bench::cpu::CpuUse;
use embedwire_bench::latency::{LatencySummary, ms};
use embedwire_bench::memory::mib;
use embedwire_bench::targets::{self, Bound, Row};

use crate::mix::Kind;
use crate::windows::Windows;

/// Most errors besides RESOURCE_EXHAUSTED.
const MAX_ERRORS: f64 = 0.0;
/// Most RSS growth, percent, first measured window to last.
const MAX_RSS_GROWTH_PERCENT: f64 = 10.0;
/// Most p99 drift, percent, first measured window to last.
const MAX_P99_DRIFT_PERCENT: f64 = 20.0;

/// How the soak's rate was set.
#[derive(Debug, Clone, Copy)]
pub struct RateSetting {
    /// The mix's maximum (closed loop), calls/s; None when `--rate` was given.
    pub max_rate: Option<f64>,
    /// Closed-loop clients of that measurement.
    pub max_clients: usize,
    /// Calls the maximum's run failed (they lower the maximum).
    pub max_errors: usize,
    /// The soak's rate, calls/s.
    pub rate: f64,
}

/// What happened to the soak's ingests after the load.
#[derive(Debug, Clone, Default)]
pub struct IngestCheck {
    /// Jobs of accepted Ingest calls (the maximum's run included).
    pub jobs: usize,
    /// Jobs that did not end COMPLETED with every document indexed.
    pub failed_jobs: usize,
    /// Why the first failed job failed.
    pub first_failure: Option<String>,
    /// Seconds from the end of the load until nothing was pending; None when the
    /// backlog had not drained in time.
    pub drained_secs: Option<f64>,
    /// Documents in the index before and after the soak.
    pub documents_before: u64,
    pub documents_after: u64,
}

/// Everything the soak measured.
pub struct Results {
    pub setting: RateSetting,
    pub windows: Windows,
    /// Calls sent by the soak (all windows).
    pub sent: u64,
    /// Calls the generator had to hold back (its in-flight bound reached).
    pub held_back: u64,
    pub ingest: IngestCheck,
    /// Where the CPU went during the soak.
    pub cpu: CpuUse,
}

/// A percentage for a table cell; "n/a" when there was nothing to compare.
fn percent(value: Option<f64>) -> String {
    value.map_or("n/a".into(), |v| format!("{:+.1}%", v * 100.0))
}

/// The value a missing comparison counts as: never a PASS.
fn judged_value(value: Option<f64>) -> f64 {
    value.map_or(f64::INFINITY, |v| v * 100.0)
}

fn latency_cell(summary: &LatencySummary) -> String {
    format!("p50 {:.1} / p99 {:.1} ms", ms(summary.p50), ms(summary.p99))
}

/// The rows of the table, judged rows last.
pub fn rows(results: &Results) -> Vec<Row> {
    let windows = &results.windows;
    let mut rows = Vec::new();
    let setting = results.setting;
    if let Some(max) = setting.max_rate {
        rows.push(Row::info(
            format!("max mix rate (closed loop, {} clients)", setting.max_clients),
            max,
            "calls/s",
            format!("{max:.1} calls/s ({} failed calls)", setting.max_errors),
        ));
    }
    rows.push(Row::info("soak rate (open loop)", setting.rate, "calls/s", format!("{:.1} calls/s", setting.rate)));
    let minutes = windows.length.as_secs_f64() * windows.windows.len() as f64 / 60.0;
    rows.push(Row::info(
        "soak length",
        minutes,
        "min",
        format!("{minutes:.1} min, {} calls sent ({} held back)", results.sent, results.held_back),
    ));
    for kind in Kind::ALL {
        let total = windows.total(kind);
        rows.push(Row::info(
            format!("{} calls", kind.name()),
            total.calls() as f64,
            "calls",
            format!("{} ok, {} RESOURCE_EXHAUSTED, {} other errors", total.ok, total.rejected, total.failed),
        ));
        let latency = total.latency();
        rows.push(Row::info(
            format!("{} p99 (whole soak)", kind.name()),
            ms(latency.p99),
            "ms",
            latency_cell(&latency),
        ));
    }
    let lag = LatencySummary::from_samples(windows.lags.clone());
    rows.push(Row::info("generator lag p99", ms(lag.p99), "ms", format!("{:.2} ms", ms(lag.p99))));
    rows.push(Row::info(
        "server CPU during the soak",
        results.cpu.server_cores,
        "cores",
        format!("{:.2} cores (the bench's clients: {:.2})", results.cpu.server_cores, results.cpu.bench_cores),
    ));
    let others: Vec<String> =
        windows.windows.iter().map(|w| w.cores.map_or("?".into(), |(_, _, others)| format!("{others:.1}"))).collect();
    let mean_others = windows.windows.iter().filter_map(|w| w.cores.map(|c| c.2)).sum::<f64>()
        / windows.windows.iter().filter(|w| w.cores.is_some()).count().max(1) as f64;
    rows.push(Row::info(
        "other processes' CPU per window",
        mean_others,
        "cores",
        format!("{} cores", others.join(" ")),
    ));
    let ingest = &results.ingest;
    rows.push(Row::info(
        "ingest jobs completed",
        (ingest.jobs - ingest.failed_jobs) as f64,
        "jobs",
        format!(
            "{} of {}; backlog drained {}",
            ingest.jobs - ingest.failed_jobs,
            ingest.jobs,
            ingest.drained_secs.map_or("NOT in time".into(), |s| format!("in {s:.1} s"))
        ),
    ));
    rows.push(Row::info(
        "index documents after",
        ingest.documents_after as f64,
        "documents",
        format!("{} (before the soak: {})", ingest.documents_after, ingest.documents_before),
    ));

    let (first, last) = windows.compared();
    let (first_index, last_index) = (windows.warmup + 1, windows.windows.len());
    rows.push(Row::info(
        format!("RSS mean, window {first_index} -> {last_index}"),
        mib(last.rss_mean()),
        "MiB",
        format!("{:.1} -> {:.1} MiB", mib(first.rss_mean()), mib(last.rss_mean())),
    ));
    let errors = windows.windows.iter().flat_map(|w| &w.kinds).map(|k| k.failed).sum::<usize>() + ingest.failed_jobs;
    rows.push(Row::judged(
        "errors besides RESOURCE_EXHAUSTED",
        errors as f64,
        "errors",
        format!("{errors} (calls and ingest jobs)"),
        Bound::AtMost(MAX_ERRORS),
        "0".into(),
    ));
    let growth = windows.rss_growth();
    rows.push(Row::judged(
        format!("RSS growth, window {first_index} -> {last_index}"),
        judged_value(growth),
        "%",
        percent(growth),
        Bound::AtMost(MAX_RSS_GROWTH_PERCENT),
        format!("<= {MAX_RSS_GROWTH_PERCENT:.0}%"),
    ));
    for kind in Kind::ALL {
        let (drift, first_p99, last_p99) = windows.p99_drift(kind);
        let figure = format!("{} p99 drift, window {first_index} -> {last_index}", kind.name());
        let measured = format!("{} ({:.1} -> {:.1} ms)", percent(drift), ms(first_p99), ms(last_p99));
        // Ingest is a few percent of the calls: a window's p99 of a handful of
        // ingests is close to their maximum, so it is printed, not judged.
        rows.push(if kind == Kind::Ingest {
            Row::info(figure, judged_value(drift), "%", measured)
        } else {
            Row::judged(
                figure,
                judged_value(drift),
                "%",
                measured,
                Bound::AtMost(MAX_P99_DRIFT_PERCENT),
                format!("<= {MAX_P99_DRIFT_PERCENT:.0}%"),
            )
        });
    }
    rows
}

/// The per-window CSV: one line per window, RSS and each kind's calls and latency.
pub fn windows_csv(windows: &Windows) -> String {
    let mut out = String::from("window,start_s,warmup,rss_mean_mib,rss_max_mib,server_cores,bench_cores,other_cores");
    for kind in Kind::ALL {
        let name = kind.name().to_lowercase();
        let _ = write!(out, ",{name}_ok,{name}_rejected,{name}_errors,{name}_p50_ms,{name}_p99_ms");
    }
    out.push('\n');
    for (index, window) in windows.windows.iter().enumerate() {
        let start = windows.length.as_secs_f64() * index as f64;
        let warmup = u8::from(index < windows.warmup);
        let _ =
            write!(out, "{},{start:.0},{warmup},{:.1},{:.1}", index + 1, mib(window.rss_mean()), mib(window.rss_max()));
        let (server, bench, others) = window.cores.unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        let _ = write!(out, ",{server:.2},{bench:.2},{others:.2}");
        for tally in &window.kinds {
            let latency = tally.latency();
            let _ = write!(
                out,
                ",{},{},{},{:.2},{:.2}",
                tally.ok,
                tally.rejected,
                tally.failed,
                ms(latency.p50),
                ms(latency.p99)
            );
        }
        out.push('\n');
    }
    out
}

/// Writes soak_bench.csv (the rows) and soak_bench_windows.csv; returns their paths.
pub fn write_csv(dir: &Path, rows: &[Row], windows: &Windows) -> anyhow::Result<[PathBuf; 2]> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let summary = dir.join("soak_bench.csv");
    std::fs::write(&summary, targets::summary_csv(rows)).with_context(|| format!("writing {}", summary.display()))?;
    let per_window = dir.join("soak_bench_windows.csv");
    std::fs::write(&per_window, windows_csv(windows)).with_context(|| format!("writing {}", per_window.display()))?;
    Ok([summary, per_window])
}
