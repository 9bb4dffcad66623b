//! The figures against their targets: the final table, and the CSV file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use embedwire_bench::targets::csv_field;

use crate::config::Plan;
use crate::measure::Latency;

/// Exact search p50, search step alone ...
const EXACT_P50_MS: f64 = 5.0;
/// ... judged up to this many stored vectors (larger sizes are reported only).
const EXACT_TARGET_MAX_SIZE: usize = 100_000;
/// HNSW recall@10 against exact search, at every size.
const HNSW_MIN_RECALL: f64 = 0.95;
/// HNSW p50, at every size.
const HNSW_P50_MS: f64 = 5.0;
/// HNSW build time ...
const HNSW_BUILD_SECS: f64 = 600.0;
/// ... judged at this many vectors; smaller builds are extrapolated to it.
const HNSW_BUILD_TARGET_SIZE: usize = 1_000_000;

/// Exact search with one scan setting.
pub struct ExactRun {
    pub scan_threads: usize,
    pub build: Duration,
    pub latency: Latency,
    /// With the plan's number of concurrent searchers.
    pub qps: f64,
}

/// HNSW at one `ef_search`.
pub struct HnswSetting {
    pub ef_search: usize,
    pub latency: Latency,
    pub recall: f64,
    /// Measured for the first setting only.
    pub qps: Option<f64>,
}

/// One HNSW graph and its search settings.
pub struct HnswRun {
    pub m: usize,
    pub ef_construction: usize,
    pub build: Duration,
    pub settings: Vec<HnswSetting>,
}

/// Everything measured at one collection size.
pub struct SizeResults {
    pub size: usize,
    pub exact: Vec<ExactRun>,
    pub hnsw: Option<HnswRun>,
}

/// Which side of the limit passes.
#[derive(Debug, Clone, Copy)]
enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

/// One row of the table and of the CSV file.
struct Row {
    figure: String,
    size: usize,
    value: f64,
    unit: &'static str,
    measured: String,
    /// None for figures reported for context only.
    target: Option<Bound>,
    note: String,
}

impl Row {
    fn new(figure: String, size: usize, value: f64, unit: &'static str, measured: String) -> Row {
        Row { figure, size, value, unit, measured, target: None, note: String::new() }
    }

    fn judged(mut self, target: Option<Bound>) -> Row {
        self.target = target;
        self
    }

    fn noted(mut self, note: String) -> Row {
        self.note = note;
        self
    }

    fn passes(&self) -> Option<bool> {
        self.target.map(|bound| match bound {
            Bound::AtLeast(limit) => self.value >= limit,
            Bound::AtMost(limit) => self.value <= limit,
        })
    }

    fn target_text(&self) -> String {
        match self.target {
            Some(Bound::AtLeast(limit)) => format!(">= {limit} {}", self.unit),
            Some(Bound::AtMost(limit)) => format!("<= {limit} {}", self.unit),
            None => "-".into(),
        }
    }

    fn verdict(&self) -> &'static str {
        match self.passes() {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "-",
        }
    }
}

fn rows(results: &[SizeResults]) -> Vec<Row> {
    let mut rows = Vec::new();
    for result in results {
        let size = result.size;
        for run in &result.exact {
            let threads = run.scan_threads;
            let (p50, p95) = (run.latency.p50_ms(), run.latency.p95_ms());
            let p50_target = (size <= EXACT_TARGET_MAX_SIZE).then_some(Bound::AtMost(EXACT_P50_MS));
            rows.push(
                Row::new(format!("exact p50 (scan x{threads})"), size, p50, "ms", format!("{p50:.2} ms"))
                    .judged(p50_target),
            );
            rows.push(Row::new(format!("exact p95 (scan x{threads})"), size, p95, "ms", format!("{p95:.2} ms")));
            rows.push(Row::new(
                format!("exact q/s, 2 searchers (scan x{threads})"),
                size,
                run.qps,
                "q/s",
                format!("{:.0} q/s", run.qps),
            ));
            let build = run.build.as_secs_f64();
            rows.push(Row::new(format!("exact load (scan x{threads})"), size, build, "s", format!("{build:.2} s")));
        }
        let Some(hnsw) = &result.hnsw else { continue };
        let build = hnsw.build.as_secs_f64();
        let at_target_size = size >= HNSW_BUILD_TARGET_SIZE;
        let build_row = Row::new(
            format!("hnsw build (m {}, efc {})", hnsw.m, hnsw.ef_construction),
            size,
            build,
            "s",
            format!("{build:.1} s"),
        )
        .judged(at_target_size.then_some(Bound::AtMost(HNSW_BUILD_SECS)));
        rows.push(if at_target_size {
            build_row
        } else {
            build_row.noted(format!(
                "~{:.0} s at {HNSW_BUILD_TARGET_SIZE} (n log n)",
                extrapolate(build, size, HNSW_BUILD_TARGET_SIZE)
            ))
        });
        for setting in &hnsw.settings {
            let ef = setting.ef_search;
            let (p50, p95) = (setting.latency.p50_ms(), setting.latency.p95_ms());
            rows.push(
                Row::new(
                    format!("hnsw recall@10 (ef {ef})"),
                    size,
                    setting.recall,
                    "",
                    format!("{:.4}", setting.recall),
                )
                .judged(Some(Bound::AtLeast(HNSW_MIN_RECALL))),
            );
            rows.push(
                Row::new(format!("hnsw p50 (ef {ef})"), size, p50, "ms", format!("{p50:.2} ms"))
                    .judged(Some(Bound::AtMost(HNSW_P50_MS))),
            );
            rows.push(Row::new(format!("hnsw p95 (ef {ef})"), size, p95, "ms", format!("{p95:.2} ms")));
            if let Some(qps) = setting.qps {
                rows.push(Row::new(
                    format!("hnsw q/s, 2 searchers (ef {ef})"),
                    size,
                    qps,
                    "q/s",
                    format!("{qps:.0} q/s"),
                ));
            }
        }
    }
    rows
}

/// Build time scaled from `from` to `to` vectors as n log n (each insertion is a
/// search of a graph growing logarithmically deep).
fn extrapolate(seconds: f64, from: usize, to: usize) -> f64 {
    let n_log_n = |n: usize| n as f64 * (n as f64).ln();
    seconds * n_log_n(to) / n_log_n(from.max(2))
}

/// The final table, as printed.
pub fn table(results: &[SizeResults]) -> String {
    let rows = rows(results);
    let mut out = String::new();
    let _ = writeln!(out, "{:<38} {:>9} {:>12} {:>10} {:<6} note", "figure", "size", "measured", "target", "result");
    for row in &rows {
        let _ = writeln!(
            out,
            "{:<38} {:>9} {:>12} {:>10} {:<6} {}",
            row.figure,
            row.size,
            row.measured,
            row.target_text(),
            row.verdict(),
            row.note
        );
    }
    let judged: Vec<bool> = rows.iter().filter_map(Row::passes).collect();
    let _ = writeln!(out, "{} of {} targets met", judged.iter().filter(|&&pass| pass).count(), judged.len());
    out
}

/// Writes `index_bench.csv` into `dir`, the run's setup first as `setup ...` rows;
/// returns its path.
pub fn write_csv(dir: &Path, plan: &Plan, results: &[SizeResults]) -> anyhow::Result<PathBuf> {
    let mut out = String::from("figure,size,value,unit,target,result\n");
    let setup = [
        ("setup quick", plan.quick.to_string()),
        ("setup dim", plan.dim.to_string()),
        ("setup clusters", plan.clusters.to_string()),
        ("setup spread", plan.spread.to_string()),
        ("setup noise_rank", plan.noise_rank.to_string()),
        ("setup seed", plan.seed.to_string()),
        ("setup queries", plan.queries.to_string()),
        ("setup searchers", plan.searchers.to_string()),
    ];
    for (figure, value) in setup {
        let _ = writeln!(out, "{figure},,{value},,,");
    }
    for row in rows(results) {
        let target = if row.target.is_some() { row.target_text() } else { String::new() };
        let _ = writeln!(
            out,
            "{},{},{:.4},{},{},{}",
            csv_field(&row.figure),
            row.size,
            row.value,
            row.unit,
            target,
            row.passes().map_or("", |p| if p { "PASS" } else { "MISS" })
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("index_bench.csv");
    std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
