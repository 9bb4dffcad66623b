//! One ghz run: the checked-in config, with the host, concurrency (one connection
//! per worker), duration and what happens to the calls in flight when it ends
//! (`--duration-stop`) added on the command line. ghz's JSON report is kept without
//! its per-call details and the call data (megabytes, and in the config already).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;
use tokio::process::Command;

use crate::configs::SuiteFile;

/// The fields of ghz's JSON report the suite reads (times in nanoseconds).
#[derive(Debug, Deserialize)]
struct Report {
    count: u64,
    total: u64,
    average: u64,
    rps: f64,
    #[serde(rename = "latencyDistribution", default)]
    latency_distribution: Option<Vec<Percentile>>,
    #[serde(rename = "statusCodeDistribution", default)]
    status_code_distribution: BTreeMap<String, u64>,
    #[serde(rename = "errorDistribution", default)]
    error_distribution: Option<BTreeMap<String, u64>>,
}

#[derive(Debug, Deserialize)]
struct Percentile {
    percentage: u32,
    latency: u64,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct GhzRun {
    pub count: u64,
    pub ok: u64,
    pub total: Duration,
    /// ghz's own rate: every answer, errors included.
    pub rps: f64,
    pub average: Duration,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
    /// Non-OK answers by status, and the most frequent error message.
    pub errors: BTreeMap<String, u64>,
    pub top_error: Option<String>,
}

impl GhzRun {
    /// Successful calls per second.
    pub fn ok_rps(&self) -> f64 {
        self.ok as f64 / self.total.as_secs_f64().max(1e-9)
    }
}

/// Runs ghz and writes its report (without per-call details) to `summary`.
pub async fn run(
    ghz: &Path,
    workspace: &Path,
    file: &SuiteFile,
    host: SocketAddr,
    concurrency: usize,
    (duration, duration_stop): (Duration, &str),
    summary: &Path,
) -> anyhow::Result<GhzRun> {
    let raw = summary.with_extension("raw.json");
    let output = Command::new(ghz)
        .current_dir(workspace)
        .arg("--config")
        .arg(&file.path)
        .args(["--concurrency", &concurrency.to_string(), "--connections", &concurrency.to_string()])
        .args(["--duration", &format!("{}ms", duration.as_millis()), "--duration-stop", duration_stop])
        .args(["--format", "json", "--output"])
        .arg(&raw)
        .arg(host.to_string())
        .output()
        .await
        .with_context(|| format!("running {}", ghz.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "ghz {} c={concurrency} failed ({}):\n{}{}",
        file.stem,
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut value: Value = serde_json::from_slice(&std::fs::read(&raw)?).context("parsing ghz's JSON report")?;
    std::fs::remove_file(&raw)?;
    if let Some(object) = value.as_object_mut() {
        object.remove("details");
        // The call data is the checked-in config's, repeated in every report.
        if let Some(options) = object.get_mut("options").and_then(Value::as_object_mut) {
            options.remove("data");
        }
    }
    std::fs::write(summary, serde_json::to_string_pretty(&value)?)?;
    let report: Report = serde_json::from_value(value)?;
    let at = |p: u32| {
        let found = report.latency_distribution.iter().flatten().find(|l| l.percentage == p);
        Duration::from_nanos(found.map_or(0, |l| l.latency))
    };
    let ok = report.status_code_distribution.get("OK").copied().unwrap_or(0);
    let errors = report
        .status_code_distribution
        .iter()
        .filter(|(code, _)| *code != "OK")
        .map(|(c, n)| (c.clone(), *n))
        .collect();
    let top_error = report
        .error_distribution
        .unwrap_or_default()
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(e, n)| format!("{n} x {e}"));
    Ok(GhzRun {
        count: report.count,
        ok,
        total: Duration::from_nanos(report.total),
        rps: report.rps,
        average: Duration::from_nanos(report.average),
        p50: at(50),
        p95: at(95),
        p99: at(99),
        errors,
        top_error,
    })
}
