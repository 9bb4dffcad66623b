//! ghz: the gRPC calls under ghz, the community's gRPC load tool, so the figures can be checked with a tool the bench
//! did not write: the configs checked in under `bench/ghz/` (they also run by hand: `ghz --config
//! bench/ghz/embed-256.json -c 16 -z 5s 127.0.0.1:50051`; host, concurrency and duration on the command line override
//! the file) at several concurrencies, on a fresh server per backend with its default flags: closed-loop callers are
//! queued and batched, never refused, so every run measures throughput at saturation (the overload scenario measures
//! admission).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result};
use embedwire_bench::{
    corpus::CorpusOptions,
    cpu::CpuWindow,
    ingest,
    latency::ms,
    options::{Common, program_output},
    report::{Report, Row, Table},
    server_process::ServerProcess,
};
use embedwire_server::{ServerConfig, config::BackendKind};
use serde::Deserialize;
use serde_json::{Value, json};

/// ghz_summary.csv, one line per run.
const COLUMNS: &str = "backend,config,call,texts_per_call,concurrency,count,ok,errors,seconds,rps,ok_rps,texts_per_s,\
                       avg_ms,p50_ms,p95_ms,p99_ms,server_cores,top_error";
/// Documents ingested before the Search runs (full, --quick), per Ingest call.
const SEARCH_DOCUMENTS: (usize, usize) = (1000, 100);
const INGEST_BATCH: usize = 500;
/// The checked-in ghz configs; their proto paths are relative to the workspace.
const CONFIGS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/ghz");
/// Query sentences the Search config rotates through.
const SEARCH_QUERIES: usize = 64;
/// EmbedStream: messages per stream, texts per message (256 texts per stream).
const STREAM_MESSAGES: usize = 8;
const STREAM_TEXTS: usize = 32;

/// Options of the ghz scenario (`--concurrency`: ghz workers, one connection each [default: 1,16,64, --quick: 1,16]).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Regenerate the checked-in configs from the docstring corpus, then stop.
    #[arg(long)]
    pub write_configs: bool,
    /// Backends, each on its own fresh server.
    #[arg(long, env = "GHZ_SUITE_BACKENDS", value_enum, value_delimiter = ',', default_value = "pseudo,onnx")]
    pub backends: Vec<BackendKind>,
    /// Configs to run, by file stem [default: every *.json in the configs directory].
    #[arg(long, env = "GHZ_SUITE_CONFIGS", value_delimiter = ',')]
    pub configs: Vec<String>,
    /// The ghz binary [default: CACHE/bin/ghz, where `make setup` installs it].
    #[arg(long, env = "GHZ_SUITE_GHZ")]
    pub ghz: Option<PathBuf>,
    #[command(flatten)]
    pub corpus: CorpusOptions,
}

/// One checked-in config: file stem, path, call, and texts embedded per ghz request (a whole stream for EmbedStream;
/// 1 for Search).
struct Config {
    stem: String,
    path: PathBuf,
    call: String,
    texts: usize,
}

/// What the bench reads of ghz's JSON report: times in ns; ghz's own `rps` counts errors too.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GhzReport {
    count: u64,
    total: u64,
    average: u64,
    rps: f64,
    latency_distribution: Option<Vec<Percentile>>,
    status_code_distribution: Option<BTreeMap<String, u64>>,
    error_distribution: Option<BTreeMap<String, u64>>,
}

#[derive(Deserialize)]
struct Percentile {
    percentage: u64,
    latency: u64,
}

impl GhzReport {
    fn calls(&self, ok: bool) -> u64 {
        let codes = self.status_code_distribution.iter().flatten();
        codes.filter(|(code, _)| (*code == "OK") == ok).map(|(_, n)| n).sum()
    }

    /// Average, p50, p95, p99.
    fn latency(&self) -> [Duration; 4] {
        let at = |p| self.latency_distribution.iter().flatten().find(|l| l.percentage == p).map_or(0, |l| l.latency);
        [self.average, at(50), at(95), at(99)].map(Duration::from_nanos)
    }

    fn top_error(&self) -> Option<String> {
        let errors = self.error_distribution.iter().flatten();
        errors.max_by_key(|(_, n)| **n).map(|(error, n)| format!("{n} x {error}"))
    }
}

pub fn run(common: &Common, args: Args) -> Result<()> {
    anyhow::ensure!(!args.backends.is_empty(), "--backends: at least one");
    if args.write_configs {
        return write_configs(Path::new(CONFIGS_DIR), &args.corpus.select(0, 0, 256)?.queries);
    }
    let configs = read_configs(Path::new(CONFIGS_DIR), &args.configs)?;
    let ghz = match &args.ghz {
        Some(path) => path.clone(),
        None => <ServerConfig as clap::Parser>::try_parse_from(["embedwire-server"])?.cache_dir().join("bin/ghz"),
    };
    anyhow::ensure!(ghz.is_file(), "no ghz at {} (run `make setup`, or pass --ghz)", ghz.display());
    let mut report = Report::new(common.results("ghz"), "ghz_suite")?;
    let binary = common.server_binary()?;
    let is_search = |c: &Config| c.call.ends_with("/Search");
    let documents = match configs.iter().any(is_search) {
        true => args.corpus.select(common.pick(SEARCH_DOCUMENTS.0, SEARCH_DOCUMENTS.1), 0, 1)?.documents,
        false => Vec::new(),
    };
    let concurrency = common.sweep(&[1, 16, 64], &[1, 16]);
    // A full run waits for the calls in flight when the duration ends (a 256-text call on the real model is never cut
    // off); a quick run cancels them (they count as errors), so that it ends on time.
    let (run_time, stop) = (common.duration(2.0, 0.3), common.pick("wait", "close"));
    let backends: Vec<_> = args.backends.iter().map(|b| b.name()).collect();
    println!("ghz: {} configs x concurrency {concurrency:?} x backends {backends:?}", configs.len());
    let mut table = Table::new(COLUMNS);
    let runtime = tokio::runtime::Runtime::new()?;
    for backend in backends {
        // The server's default admission: up to 64 callers of 256 texts are queued and batched, never refused.
        let flags = vec![("--backend", backend.into())];
        let command = common.server_command(binary.clone(), flags);
        let (server, _) = runtime.block_on(ServerProcess::start(&command))?;
        if !documents.is_empty() {
            let run = runtime.block_on(async {
                ingest::ingest(server.connect().await?, &documents, ("doc-", 0), INGEST_BATCH).await
            })?;
            println!("{backend}: ingested {} documents in {:.1} s", run.documents, run.completed.as_secs_f64());
        }
        let dir = report.dir().join(backend);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // Warms the model and the connections' code paths; its report is dropped.
        let warm = configs.iter().find(|c| !is_search(c)).unwrap_or(&configs[0]);
        run_ghz(&ghz, warm, server.address, 16, (common.warmup(1.0, 0.2), stop), &dir.join("warmup.json"))?;
        std::fs::remove_file(dir.join("warmup.json"))?;
        for config in &configs {
            for &c in &concurrency {
                let cpu = CpuWindow::start(server.pid)?;
                let summary = dir.join(format!("{}_c{c}.json", config.stem));
                let run = run_ghz(&ghz, config, server.address, c, (run_time, stop), &summary)?;
                let cores = cpu.finish()?.server_cores;
                let (ok, errors, seconds) = (run.calls(true), run.calls(false), run.total as f64 / 1e9);
                let (ok_rps, top_error) = (ok as f64 / seconds.max(1e-9), run.top_error());
                let texts = ok_rps * config.texts as f64;
                let [avg, p50, p95, p99] = run.latency().map(ms);
                println!("{backend} {} c={c}: {ok_rps:.1} calls/s, {errors} errors", config.stem);
                if let Some(error) = &top_error {
                    println!("  most frequent error: {error}");
                }
                let measured = format!(
                    "{ok_rps:.1} calls/s, {texts:.1} texts/s, p50/p95/p99 {p50:.2}/{p95:.2}/{p99:.2} ms, {errors} errors, server {cores:.2} cores"
                );
                report.figure(Row::info(format!("{backend} {} c={c}", config.stem), ok_rps, "calls/s", measured));
                let counts = [config.texts as u64, c as u64, run.count, ok, errors].map(|n| n.to_string());
                let times = [seconds, run.rps, ok_rps, texts, avg, p50, p95, p99, cores].map(|v| format!("{v:.3}"));
                let names = [backend.to_string(), config.stem.clone(), config.call.clone()];
                table.row(names.into_iter().chain(counts).chain(times).chain([top_error.unwrap_or_default()]));
            }
        }
        runtime.block_on(server.stop())?;
    }
    report.table("ghz_summary.csv", &table)?;
    report.finish()
}

/// Runs ghz on `file` (one connection per worker); its report goes to `out` without the
/// per-call details and the call data (megabytes, and in the config already).
fn run_ghz(
    ghz: &Path,
    file: &Config,
    host: SocketAddr,
    c: usize,
    run: (Duration, &str),
    out: &Path,
) -> Result<GhzReport> {
    let raw = out.with_extension("raw.json");
    let (concurrency, (duration, duration_stop)) = (c.to_string(), run);
    let mut command = std::process::Command::new(ghz);
    command.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).arg("--config").arg(&file.path);
    command.args(["--concurrency", &concurrency, "--connections", &concurrency]);
    command.args(["--duration", &format!("{}ms", duration.as_millis()), "--duration-stop", duration_stop]);
    command.args(["--format", "json", "--output"]).arg(&raw).arg(host.to_string());
    program_output(&mut command, &format!("config {}, c={c}", file.stem))?;
    let mut report: Value = serde_json::from_slice(&std::fs::read(&raw)?).context("parsing ghz's JSON report")?;
    std::fs::remove_file(&raw)?;
    if let Some(object) = report.as_object_mut() {
        object.remove("details");
        object.get_mut("options").and_then(Value::as_object_mut).map(|options| options.remove("data"));
    }
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    serde_json::from_value(report).context("reading ghz's JSON report")
}

/// Writes the configs into `dir` from `queries` (at least 256 sentences).
fn write_configs(dir: &Path, queries: &[String]) -> Result<()> {
    anyhow::ensure!(queries.len() >= 256, "{} query sentences, 256 needed", queries.len());
    let embed = |texts: usize| {
        let calls: Vec<Value> = queries[..256].chunks(texts).map(|chunk| json!({"inputs": chunk})).collect();
        if calls.len() == 1 { calls[0].clone() } else { json!(calls) }
    };
    let stream: Vec<Value> = (0..STREAM_MESSAGES)
        .map(|m| json!({"request_id": m.to_string(), "request": {"inputs": queries[m * STREAM_TEXTS..][..STREAM_TEXTS]}}))
        .collect();
    let searches: Vec<Value> = (0..SEARCH_QUERIES)
        .map(|i| json!({"queries": [{"text": queries[i * queries.len() / SEARCH_QUERIES]}], "top_k": 5}))
        .collect();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, call, data) in [
        ("embed-1", "EmbedService/Embed", embed(1)),
        ("embed-32", "EmbedService/Embed", embed(32)),
        ("embed-256", "EmbedService/Embed", embed(256)),
        ("embed-stream", "EmbedService/EmbedStream", json!(stream)),
        ("search", "SearchService/Search", json!(searches)),
    ] {
        let proto = if name == "search" { "search" } else { "embed" };
        let config = json!({
            "name": name, "call": format!("embedwire.v1.{call}"), "proto": format!("proto/embedwire/v1/{proto}.proto"),
            "import-paths": ["proto"], "insecure": true,
            // The data is sent as is: templating 256 texts per call would load ghz, not the server.
            "disable-template-functions": true, "disable-template-data": true,
            // 64 calls of 256 texts on the real model take longer than ghz's default
            // 20 s deadline to drain; this measures throughput, not deadlines.
            "timeout": "300s", "data": data,
        });
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&config)? + "\n")?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The configs in `dir` (sorted by name), only those in `only` when it is not empty.
fn read_configs(dir: &Path, only: &[String]) -> Result<Vec<Config>> {
    let mut configs = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else { continue };
        if path.extension().is_none_or(|e| e != "json") || (!only.is_empty() && !only.contains(&stem)) {
            continue;
        }
        let value: Value =
            serde_json::from_slice(&std::fs::read(&path)?).with_context(|| format!("parsing {}", path.display()))?;
        let call = value["call"].as_str().with_context(|| format!("{} has no call", path.display()))?.to_string();
        let inputs = |v: &Value| v["inputs"].as_array().map_or(0, Vec::len);
        let texts = match &value["data"] {
            _ if call.ends_with("/Search") => 1,
            Value::Array(messages) if call.ends_with("/EmbedStream") => {
                messages.iter().map(|m| inputs(&m["request"])).sum()
            }
            Value::Array(calls) => calls.first().map_or(0, inputs),
            other => inputs(other),
        };
        configs.push(Config { stem, path, call, texts });
    }
    configs.sort_by(|a, b| a.stem.cmp(&b.stem));
    anyhow::ensure!(!configs.is_empty(), "no ghz configs in {} (run with --write-configs)", dir.display());
    Ok(configs)
}
