//! The suite's table and `ghz_summary.csv` (one line per run), which
//! `bench/report.py` plots as throughput against concurrency.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use embedwire_bench::latency::ms;
use embedwire_bench::targets::csv_field;

use crate::runner::GhzRun;

/// One run and where it belongs.
#[derive(Debug, Clone)]
pub struct Entry {
    pub backend: &'static str,
    pub config: String,
    pub call: String,
    pub texts_per_call: usize,
    pub concurrency: usize,
    pub run: GhzRun,
    /// Server CPU during the run, as cores kept busy (ghz uses the rest).
    pub server_cores: f64,
}

impl Entry {
    fn texts_per_second(&self) -> f64 {
        self.run.ok_rps() * self.texts_per_call as f64
    }

    fn errors(&self) -> u64 {
        self.run.errors.values().sum()
    }
}

/// The table, as printed.
pub fn table(entries: &[Entry]) -> String {
    let mut out = format!(
        "{:<8} {:<13} {:>4} {:>10} {:>11} {:>9} {:>9} {:>9} {:>7} {:>7}\n",
        "backend", "config", "c", "calls/s", "texts/s", "p50 ms", "p95 ms", "p99 ms", "errors", "server"
    );
    for e in entries {
        let _ = writeln!(
            out,
            "{:<8} {:<13} {:>4} {:>10.1} {:>11.1} {:>9.2} {:>9.2} {:>9.2} {:>7} {:>7.2}",
            e.backend,
            e.config,
            e.concurrency,
            e.run.ok_rps(),
            e.texts_per_second(),
            ms(e.run.p50),
            ms(e.run.p95),
            ms(e.run.p99),
            e.errors(),
            e.server_cores
        );
        if let Some(error) = &e.run.top_error {
            let _ = writeln!(out, "         first of the errors: {error}");
        }
    }
    out
}

/// Writes `ghz_summary.csv` into `dir`.
pub fn write_csv(dir: &Path, entries: &[Entry]) -> anyhow::Result<PathBuf> {
    let mut csv = String::from(
        "backend,config,call,texts_per_call,concurrency,count,ok,errors,seconds,rps,ok_rps,texts_per_s,avg_ms,p50_ms,p95_ms,p99_ms,server_cores,top_error\n",
    );
    for e in entries {
        let r = &e.run;
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{}",
            e.backend,
            e.config,
            e.call,
            e.texts_per_call,
            e.concurrency,
            r.count,
            r.ok,
            e.errors(),
            r.total.as_secs_f64(),
            r.rps,
            r.ok_rps(),
            e.texts_per_second(),
            ms(r.average),
            ms(r.p50),
            ms(r.p95),
            ms(r.p99),
            e.server_cores,
            csv_field(r.top_error.as_deref().unwrap_or(""))
        );
    }
    let path = dir.join("ghz_summary.csv");
    std::fs::write(&path, csv)?;
    Ok(path)
}
