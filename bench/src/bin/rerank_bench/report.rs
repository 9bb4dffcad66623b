//! The figures against their target: the printed tables, the CSV files and the
//! markdown summary. The target is a ratio to the in-process ceiling measured in the
//! same run, so a busy machine moves both sides together.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use embedwire_bench::in_process::Ceiling;
use embedwire_bench::latency::ms;
use embedwire_bench::targets::{self, Bound, Row, csv_field};

use crate::sweep::SweepPoint;
use crate::workload::Tokenizing;

/// Best server pairs/s (cross-encoder) at least this fraction of the in-process ceiling.
pub const MIN_CEILING_RATIO: f64 = 0.90;

/// How the run was set up, recorded next to its figures.
#[derive(Debug, Clone)]
pub struct RunSetup {
    pub quick: bool,
    pub texts_per_call: usize,
    pub clients_per_connection: usize,
    /// Rounds the in-process and server runs alternated in.
    pub rounds: usize,
    /// Measured seconds of each concurrency, all rounds together.
    pub run_secs: f64,
    /// The cross-encoder directory.
    pub rerank_model_dir: PathBuf,
    /// Its graph's precision, as loaded in-process.
    pub precision: &'static str,
    /// The ONNX Runtime settings both sides use.
    pub onnx: String,
    /// The flags of each server, after --listen and --data-dir.
    pub cross_server_flags: String,
    pub bi_server_flags: Option<String>,
    pub queries: usize,
    pub passages: usize,
    pub mean_passage_tokens: f64,
}

/// Every figure of one run.
#[derive(Debug, Clone)]
pub struct Results {
    pub setup: RunSetup,
    pub ceiling: Ceiling,
    pub tokenizing: Tokenizing,
    pub cross: Vec<SweepPoint>,
    /// Empty with --no-bi-encoder.
    pub bi: Vec<SweepPoint>,
}

fn best(points: &[SweepPoint]) -> Option<&SweepPoint> {
    points.iter().max_by(|a, b| a.pairs_per_s().total_cmp(&b.pairs_per_s()))
}

fn worst(points: &[SweepPoint]) -> Option<&SweepPoint> {
    points.iter().min_by(|a, b| a.pairs_per_s().total_cmp(&b.pairs_per_s()))
}

fn at_concurrency(points: &[SweepPoint], clients: usize) -> Option<&SweepPoint> {
    points.iter().find(|point| point.concurrency == clients)
}

fn rows(results: &Results) -> Vec<Row> {
    let setup = &results.setup;
    let texts = setup.texts_per_call;
    let ceiling = results.ceiling.best();
    let ceiling_rate = ceiling.rate();
    let mut rows = vec![
        Row::info(
            "in-process ceiling (best batch)",
            ceiling_rate,
            "pairs/s",
            format!("{ceiling_rate:.1} pairs/s @ batch {}", ceiling.batch_size),
        ),
        Row::info(
            "pair tokens (mean / max)",
            results.tokenizing.mean_pair_tokens,
            "tokens",
            format!("{:.1} / {}", results.tokenizing.mean_pair_tokens, results.tokenizing.max_pair_tokens),
        ),
        Row::info(
            format!("tokenize one call ({texts} pairs)"),
            ms(results.tokenizing.mean()),
            "ms",
            format!("{:.2} ms", ms(results.tokenizing.mean())),
        ),
    ];
    let one_call = results.ceiling.of(texts);
    if let Some(run) = one_call {
        rows.push(Row::info(
            format!("in-process batch-{texts} call p50"),
            ms(run.batch_latency.p50),
            "ms",
            format!("{:.1} ms", ms(run.batch_latency.p50)),
        ));
    }
    if let Some(point) = best(&results.cross) {
        let rate = point.pairs_per_s();
        let limit = MIN_CEILING_RATIO * ceiling_rate;
        rows.push(
            Row::judged(
                "cross-encoder pairs/s (best c)",
                rate,
                "pairs/s",
                format!("{rate:.1} pairs/s @ c={}", point.concurrency),
                Bound::AtLeast(limit),
                format!(">= {MIN_CEILING_RATIO:.2} x {ceiling_rate:.1} ({limit:.1})"),
            )
            .with_note(format!("{:.2} x", rate / ceiling_rate)),
        );
    }
    // The target is on the best point; the lowest says what the other concurrencies got.
    if let Some(point) = worst(&results.cross) {
        let rate = point.pairs_per_s();
        rows.push(Row::info(
            "cross-encoder pairs/s (lowest c)",
            rate,
            "pairs/s",
            format!("{rate:.1} pairs/s @ c={} ({:.2} x ceiling)", point.concurrency, rate / ceiling_rate),
        ));
    }
    rows.extend(latency_row("cross-encoder", &results.cross, texts, one_call.map(|run| ms(run.batch_latency.p50))));
    rows.extend(refusal_row("cross-encoder", &results.cross));
    if let (Some(bi), Some(cross)) = (best(&results.bi), best(&results.cross)) {
        let rate = bi.pairs_per_s();
        rows.push(Row::info(
            "bi-encoder pairs/s (best c)",
            rate,
            "pairs/s",
            format!("{rate:.1} pairs/s @ c={} ({:.2} x cross-encoder)", bi.concurrency, rate / cross.pairs_per_s()),
        ));
    }
    rows.extend(latency_row("bi-encoder", &results.bi, texts, None));
    rows.extend(refusal_row("bi-encoder", &results.bi));
    rows
}

/// The c=1 latency of one call, against the model time of one such call in-process.
fn latency_row(scorer: &str, points: &[SweepPoint], texts: usize, in_process_ms: Option<f64>) -> Option<Row> {
    let point = at_concurrency(points, 1)?;
    let latency = point.latency();
    let (p50, p99) = (ms(latency.p50), ms(latency.p99));
    let versus = in_process_ms.map_or(String::new(), |model| format!(", {:.2} x in-process", p50 / model));
    Some(Row::info(
        format!("{scorer} c=1 p50 / p99 (1 x {texts} call)"),
        p50,
        "ms",
        format!("{p50:.1} / {p99:.1} ms{versus}"),
    ))
}

/// Refusals over the whole sweep, and where they began.
fn refusal_row(scorer: &str, points: &[SweepPoint]) -> Option<Row> {
    if points.is_empty() {
        return None;
    }
    let refused: usize = points.iter().map(|p| p.refused).sum();
    let calls: usize = points.iter().map(|p| p.ok() + p.refused + p.errors()).sum();
    let from = points.iter().find(|p| p.refused > 0).map_or(String::new(), |p| format!(", from c={}", p.concurrency));
    Some(Row::info(
        format!("{scorer} refused (RESOURCE_EXHAUSTED)"),
        refused as f64,
        "calls",
        format!("{refused} of {calls} calls{from}"),
    ))
}

/// The final table, as printed.
pub fn table(results: &Results) -> String {
    targets::table(&rows(results))
}

/// The sweep's columns: header and how each point fills it.
const SWEEP_COLUMNS: [&str; 16] = [
    "scorer",
    "c",
    "pairs/s",
    "calls",
    "refused",
    "errors",
    "p50 ms",
    "p99 ms",
    "server cores",
    "bench cores",
    "other cores",
    "model busy",
    "inputs/batch",
    "model ms/input",
    "queue ms",
    "tokenize ms",
];

fn sweep_cells(point: &SweepPoint) -> [String; 16] {
    let wall = point.cpu.wall.as_secs_f64().max(1e-9);
    let (latency, server_time) = (point.latency(), point.server_time());
    [
        point.scorer.name().to_string(),
        point.concurrency.to_string(),
        format!("{:.1}", point.pairs_per_s()),
        point.ok().to_string(),
        point.refused.to_string(),
        point.errors().to_string(),
        format!("{:.1}", ms(latency.p50)),
        format!("{:.1}", ms(latency.p99)),
        format!("{:.2}", point.cpu.server_cores),
        format!("{:.2}", point.cpu.bench_cores),
        format!("{:.2}", point.other_cores()),
        format!("{:.2}", point.model.busy.as_secs_f64() / wall),
        format!("{:.1}", point.model.mean_batch()),
        format!("{:.2}", point.model.ms_per_input()),
        format!("{:.1}", ms(server_time.queue)),
        format!("{:.2}", ms(server_time.tokenization)),
    ]
}

/// The sweep as a fixed-width table.
pub fn sweep_table(results: &Results) -> String {
    let cells: Vec<[String; 16]> = results.cross.iter().chain(&results.bi).map(sweep_cells).collect();
    let widths: Vec<usize> = (0..SWEEP_COLUMNS.len())
        .map(|i| cells.iter().map(|row| row[i].len()).max().unwrap_or(0).max(SWEEP_COLUMNS[i].len()))
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, row: &[&str]| {
        let padded: Vec<String> = row.iter().zip(&widths).map(|(cell, width)| format!("{cell:>width$}")).collect();
        let _ = writeln!(out, "{}", padded.join("  "));
    };
    line(&mut out, &SWEEP_COLUMNS);
    for row in &cells {
        line(&mut out, &row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

/// Writes `rerank_bench_summary.csv` (the table's rows), `rerank_bench_sweep.csv` (one
/// row per scorer and concurrency), `rerank_bench_in_process.csv` (one row per batch
/// size), `rerank_bench_setup.csv` and `rerank_bench.md` into `dir`; returns their
/// paths.
pub fn write(dir: &Path, results: &Results) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = [
        ("rerank_bench_summary.csv", targets::summary_csv(&rows(results))),
        ("rerank_bench_sweep.csv", sweep_csv(results)),
        ("rerank_bench_in_process.csv", in_process_csv(&results.ceiling)),
        ("rerank_bench_setup.csv", setup_csv(&results.setup)),
        ("rerank_bench.md", markdown(results)),
    ];
    let mut paths = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        paths.push(path);
    }
    Ok(paths)
}

fn sweep_csv(results: &Results) -> String {
    let mut out = String::from(
        "scorer,concurrency,seconds,calls_ok,refused,errors,pairs_per_s,p50_ms,p95_ms,p99_ms,mean_ms,server_cores,\
         server_system_cores,bench_cores,other_cores,model_busy,model_batches,inputs_per_batch,model_ms_per_input,\
         server_refused,server_total_ms,server_tokenize_ms,server_queue_ms,server_model_ms\n",
    );
    for p in results.cross.iter().chain(&results.bi) {
        let l = p.latency();
        let wall = p.cpu.wall.as_secs_f64().max(1e-9);
        let t = p.server_time();
        let _ = writeln!(
            out,
            "{},{},{:.3},{},{},{},{:.2},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{:.2},{:.3},{},{:.3},{:.3},{:.3},{:.3}",
            p.scorer.name(),
            p.concurrency,
            p.elapsed().as_secs_f64(),
            p.ok(),
            p.refused,
            p.errors(),
            p.pairs_per_s(),
            ms(l.p50),
            ms(l.p95),
            ms(l.p99),
            ms(l.mean),
            p.cpu.server_cores,
            p.cpu.server_system_cores,
            p.cpu.bench_cores,
            p.other_cores(),
            p.model.busy.as_secs_f64() / wall,
            p.model.batches,
            p.model.mean_batch(),
            p.model.ms_per_input(),
            p.model.refused,
            ms(t.total),
            ms(t.tokenization),
            ms(t.queue),
            ms(t.inference),
        );
    }
    out
}

fn in_process_csv(ceiling: &Ceiling) -> String {
    let mut out = String::from("batch_size,pairs,seconds,pairs_per_s,batch_mean_ms,batch_p50_ms,batch_p99_ms\n");
    for run in &ceiling.runs {
        let l = &run.batch_latency;
        let _ = writeln!(
            out,
            "{},{},{:.3},{:.2},{:.3},{:.3},{:.3}",
            run.batch_size,
            run.inputs,
            run.elapsed.as_secs_f64(),
            run.rate(),
            ms(l.mean),
            ms(l.p50),
            ms(l.p99)
        );
    }
    out
}

fn setup_pairs(setup: &RunSetup) -> Vec<(&'static str, String)> {
    vec![
        ("quick", setup.quick.to_string()),
        ("texts_per_call", setup.texts_per_call.to_string()),
        ("clients_per_connection", setup.clients_per_connection.to_string()),
        ("rounds", setup.rounds.to_string()),
        ("run_secs", format!("{:.1}", setup.run_secs)),
        ("rerank_model_dir", setup.rerank_model_dir.display().to_string()),
        ("precision", setup.precision.to_string()),
        ("onnx", setup.onnx.clone()),
        ("cross_server_flags", setup.cross_server_flags.clone()),
        ("bi_server_flags", setup.bi_server_flags.clone().unwrap_or_else(|| "(not run)".into())),
        ("queries", setup.queries.to_string()),
        ("passages", setup.passages.to_string()),
        ("mean_passage_tokens", format!("{:.1}", setup.mean_passage_tokens)),
    ]
}

fn setup_csv(setup: &RunSetup) -> String {
    let mut out = String::from("setting,value\n");
    for (name, value) in setup_pairs(setup) {
        let _ = writeln!(out, "{name},{}", csv_field(&value));
    }
    out
}

/// A markdown table.
fn markdown_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n|{}|\n", headers.join(" | "), vec!["---"; headers.len()].join("|"));
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out
}

fn markdown(results: &Results) -> String {
    let setup = &results.setup;
    let mut out = String::from("# rerank-bench\n\n");
    if setup.quick {
        out.push_str("**Quick mode**: a few seconds per piece; the figures are rough.\n\n");
    }
    let _ = writeln!(
        out,
        "Rerank calls of 1 query x {} passages (~{:.0} tokens each, {:.0} per pair with the query and special \
         tokens; {} queries and {} passages of Python docstrings in rotation, so no two concurrent calls share a \
         passage), closed loop, clients over HTTP/2 connections of {} clients each, {:.0} s per concurrency. \
         Cross-encoder: `{}` ({}). The in-process ceiling runs that model with the server crate's own code and \
         ONNX settings ({}), pairs tokenized beforehand, no gRPC, batcher or clients. In {} round(s), each every \
         in-process batch size, then every concurrency against the cross-encoder server, figures pooled over \
         the rounds; then the bi-encoder server in as many rounds.\n",
        setup.texts_per_call,
        setup.mean_passage_tokens,
        results.tokenizing.mean_pair_tokens,
        setup.queries,
        setup.passages,
        setup.clients_per_connection,
        setup.run_secs,
        setup.rerank_model_dir.display(),
        setup.precision,
        setup.onnx,
        setup.rounds,
    );
    let _ = write!(out, "Server flags: cross-encoder `{}`", setup.cross_server_flags);
    if let Some(bi) = &setup.bi_server_flags {
        let _ = write!(out, "; bi-encoder `{bi}`");
    }
    out.push_str(".\n");
    out.push_str("\n## Figures\n\n");
    let summary: Vec<Vec<String>> = rows(results)
        .iter()
        .map(|row| {
            let target = row.target.as_ref().map_or(String::new(), |(_, text)| text.clone());
            let result = match row.passes() {
                Some(pass) => format!("{}{}", if pass { "PASS" } else { "**MISS**" }, note(&row.note)),
                None => String::new(),
            };
            vec![row.figure.clone(), row.measured.clone(), target, result]
        })
        .collect();
    out.push_str(&markdown_table(&["figure", "measured", "target", "result"], &summary));
    out.push_str("\n## In-process ceiling\n\n");
    let in_process: Vec<Vec<String>> = results
        .ceiling
        .runs
        .iter()
        .map(|run| {
            vec![
                run.batch_size.to_string(),
                format!("{:.1}", run.rate()),
                format!("{:.1}", ms(run.batch_latency.p50)),
                format!("{:.1}", ms(run.batch_latency.p99)),
            ]
        })
        .collect();
    out.push_str(&markdown_table(&["pairs per batch", "pairs/s", "batch p50 ms", "batch p99 ms"], &in_process));
    out.push_str("\n## Server sweep\n\n");
    let sweep: Vec<Vec<String>> = results.cross.iter().chain(&results.bi).map(|p| sweep_cells(p).to_vec()).collect();
    out.push_str(&markdown_table(&SWEEP_COLUMNS, &sweep));
    out.push_str(
        "\nserver / bench / other cores: CPU of the server process, of this bench (its gRPC clients), and of \
         everything else on the machine during the run. model busy: the scoring model's time summed over its \
         batches, per second of the run (from the server's /metrics); inputs/batch: pairs per cross-encoder \
         batch, or texts and queries per embedding batch for the bi-encoder; model ms/input: model time per pair \
         (or text), padding included. queue / tokenize ms: the \
         server's own mean per answered call (RerankMetadata). Refused clients pause 5 ms, doubling to 200 ms, \
         before their next call.\n",
    );
    out
}

fn note(text: &str) -> String {
    if text.is_empty() { String::new() } else { format!(" ({text})") }
}
