//! wire-bench's figures: the targets (gRPC FLOAT32 bytes against HTTP JSON floats:
//! requests/s and bytes per response), the printed table, and the CSV files
//! `bench/report.py` reads.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use embedwire_bench::closed_loop::ClosedLoopRun;
use embedwire_bench::cpu::CpuUse;
use embedwire_bench::latency::ms;
use embedwire_bench::targets::{self, Bound, Row};
use embedwire_proto::v1::EmbeddingDtype;

use crate::python_decode::PythonDecode;
use crate::variants::Variant;

/// gRPC FLOAT32 requests/s at least this many times HTTP JSON floats'.
const MIN_RPS_RATIO: f64 = 3.0;
/// gRPC FLOAT32 bytes per response at most this fraction of HTTP JSON floats'.
const MAX_BYTES_RATIO: f64 = 0.45;

/// Every figure of one variant.
#[derive(Debug, Clone)]
pub struct VariantResults {
    pub variant: Variant,
    /// The answer as the client received it: the HTTP body, or the gRPC message.
    pub body_bytes: usize,
    /// Bytes received and sent on the wire for one call on an open connection
    /// (headers and framing included).
    pub wire_received: u64,
    pub wire_sent: u64,
    /// The server's encode step, in-process with the server's code.
    pub server_encode: Duration,
    pub rust_decode: Duration,
    pub python: Option<PythonDecode>,
    /// One client, for server CPU per call.
    pub single: ClosedLoopRun,
    pub single_cpu: CpuUse,
    /// The concurrent load, rounds combined.
    pub load: ClosedLoopRun,
    pub load_cpu: CpuUse,
    /// Bytes received and sent during the load.
    pub load_received: u64,
    pub load_sent: u64,
}

impl VariantResults {
    /// Bytes received per answered call under load.
    pub fn bytes_per_response(&self) -> f64 {
        self.load_received as f64 / self.load.timings.len().max(1) as f64
    }

    /// Server CPU per call with one client, in ms.
    pub fn server_cpu_per_call_ms(&self) -> f64 {
        self.single_cpu.server_cores * self.single_cpu.wall.as_secs_f64() * 1e3 / self.single.ok().max(1) as f64
    }
}

/// Every figure of the run.
#[derive(Debug, Clone)]
pub struct Results {
    pub quick: bool,
    pub backend: &'static str,
    pub texts: usize,
    pub dim: usize,
    pub concurrency: usize,
    pub variants: Vec<VariantResults>,
    /// Variants that could not run, and why.
    pub skipped: Vec<(String, String)>,
}

fn rows(results: &Results) -> Vec<Row> {
    let c = results.concurrency;
    let mut rows = Vec::new();
    for v in &results.variants {
        let l = v.load.latency();
        let errors = if v.load.errors() > 0 { format!(", {} errors", v.load.errors()) } else { String::new() };
        rows.push(Row::info(
            format!("{} c={c}", v.variant.name()),
            v.load.rate(),
            "requests/s",
            format!(
                "{:.1} req/s, p50/p95/p99 {:.1}/{:.1}/{:.1} ms, {:.0} B/resp{errors}",
                v.load.rate(),
                ms(l.p50),
                ms(l.p95),
                ms(l.p99),
                v.bytes_per_response()
            ),
        ));
    }
    let find = |variant: Variant| results.variants.iter().find(|v| v.variant == variant);
    if let (Some(grpc), Some(json)) = (find(Variant::Grpc(EmbeddingDtype::Float32)), find(Variant::HttpJson)) {
        let rps = grpc.load.rate() / json.load.rate().max(1e-9);
        rows.push(
            Row::judged(
                format!("gRPC bytes / HTTP JSON floats req/s ({} texts, {})", results.texts, results.backend),
                rps,
                "x",
                format!("{rps:.2} x"),
                Bound::AtLeast(MIN_RPS_RATIO),
                format!(">= {MIN_RPS_RATIO:.1} x"),
            )
            .with_note(format!("{:.1} vs {:.1} req/s", grpc.load.rate(), json.load.rate())),
        );
        let bytes = grpc.bytes_per_response() / json.bytes_per_response().max(1e-9);
        rows.push(
            Row::judged(
                "gRPC bytes / HTTP JSON floats bytes per response",
                bytes,
                "x",
                format!("{bytes:.3} x"),
                Bound::AtMost(MAX_BYTES_RATIO),
                format!("<= {MAX_BYTES_RATIO:.2} x"),
            )
            .with_note(format!("{:.0} vs {:.0} B", grpc.bytes_per_response(), json.bytes_per_response())),
        );
    }
    for v in &results.variants {
        let python = v.python.as_ref().map_or("-".to_string(), |p| format!("{:.2} ms", p.median_ms));
        rows.push(Row::info(
            format!("one call: {}", v.variant.name()),
            v.wire_received as f64,
            "bytes",
            format!(
                "{} B wire, encode {:.3} ms, decode Rust {:.3} ms / Python {python}, server CPU {:.2} ms/call",
                v.wire_received,
                ms(v.server_encode),
                ms(v.rust_decode),
                v.server_cpu_per_call_ms()
            ),
        ));
    }
    rows
}

/// The table, as printed, then the variants that could not run.
pub fn table(results: &Results) -> String {
    let mut out = targets::table(&rows(results));
    for (name, why) in &results.skipped {
        let _ = writeln!(out, "skipped {name}: {why}");
    }
    out
}

/// Writes `wire_summary.csv` (the table's rows) and `wire_bench.csv` (one line per
/// variant, every figure) into `dir`.
pub fn write_csv(dir: &Path, results: &Results) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut summary = rows(results);
    summary.push(Row::info("setup quick", f64::from(u8::from(results.quick)), "bool", String::new()));
    summary.push(Row::info(format!("setup backend {}", results.backend), 0.0, "", String::new()));
    summary.push(Row::info("setup texts per call", results.texts as f64, "texts", String::new()));
    summary.push(Row::info("setup dim", results.dim as f64, "dimensions", String::new()));
    summary.push(Row::info("setup concurrency", results.concurrency as f64, "workers", String::new()));
    let summary_path = dir.join("wire_summary.csv");
    std::fs::write(&summary_path, targets::summary_csv(&summary))?;

    let mut csv = String::from(
        "variant,description,concurrency,requests,errors,seconds,rps,p50_ms,p95_ms,p99_ms,bytes_per_response,request_bytes,\
         body_bytes,one_call_wire_bytes,one_call_request_bytes,server_encode_ms,rust_decode_ms,python_decode_ms,python_runs,python_max_abs_diff,\
         server_cpu_ms_per_call_c1,c1_p50_ms,server_cores,bench_cores\n",
    );
    for v in &results.variants {
        let l = v.load.latency();
        let python = v.python.as_ref();
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.1},{:.1},{},{},{},{:.4},{:.4},{},{},{},{:.4},{:.3},{:.3},{:.3}",
            v.variant.name(),
            targets::csv_field(v.variant.describe()),
            results.concurrency,
            v.load.ok(),
            v.load.errors(),
            v.load.elapsed.as_secs_f64(),
            v.load.rate(),
            ms(l.p50),
            ms(l.p95),
            ms(l.p99),
            v.bytes_per_response(),
            v.load_sent as f64 / v.load.timings.len().max(1) as f64,
            v.body_bytes,
            v.wire_received,
            v.wire_sent,
            ms(v.server_encode),
            ms(v.rust_decode),
            python.map_or(String::new(), |p| format!("{:.4}", p.median_ms)),
            python.map_or(String::new(), |p| p.runs.to_string()),
            python.and_then(|p| p.max_abs_diff).map_or(String::new(), |d| format!("{d:.3e}")),
            v.server_cpu_per_call_ms(),
            ms(v.single.latency().p50),
            v.load_cpu.server_cores,
            v.load_cpu.bench_cores
        );
    }
    let runs_path = dir.join("wire_bench.csv");
    std::fs::write(&runs_path, csv)?;
    Ok(vec![summary_path, runs_path])
}
