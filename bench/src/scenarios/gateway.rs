//! gateway: the /v1 HTTP contract driven as the existing gateways' benchmark client drives it (N workers, each on
//! its own keep-alive connection, one known query), on embedwire and on the Python baseline (`bench/baseline/app.py`),
//! each alone on the machine with the same model and real documents ingested through /v1 first (never an empty
//! index); cold starts alike (spawn to /healthz saying the model is loaded). On embedwire also /v1/search against
//! gRPC Search, alternating in rounds.

use std::{
    ffi::OsString,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use bytes::Bytes;
use embedwire_bench::{
    closed_loop::{self, Caller, ClosedLoopRun},
    in_process::{self, CeilingPlan, SplitModel},
    corpus::{Corpus, CorpusOptions, Paragraph},
    cpu::{CpuUse, CpuWindow},
    http_client::HttpConnection,
    http_process::{HttpServerCommand, HttpServerProcess},
    latency::ms,
    load::Stop,
    memory::{RssSampler, RssSeries, mib},
    options::Common,
    report::{Bound, Report, Row, Table, percentiles},
    server_process::fresh_data_dir,
    wire_count::ByteCounters,
};
use embedwire_proto::v1::{self, search_service_client::SearchServiceClient};
use embedwire_server::model::{
    files::ModelFiles,
    onnx::{OnnxModel, init_runtime},
    precision::PrecisionChoice,
    tokenizer::TextTokenizer,
};
use serde_json::{Value, json};
use tonic::transport::Channel;

/// embedwire against the baseline at the headline concurrency, both at their default flags (issue 26): RPS at least,
/// p95 and peak RSS at most these multiples.
const MIN_RPS_RATIO: f64 = 4.0;
const MAX_P95_RATIO: f64 = 0.25;
const MAX_RSS_RATIO: f64 = 0.3;
/// /v1/search through the in-process HTTP layer against gRPC Search (issue 4).
const MIN_HTTP_GRPC_RATIO: f64 = 0.9;
/// Workers of the headline run, where the targets are judged.
const HEADLINE_CONCURRENCY: usize = 16;
/// Documents of the corpus ingested into each gateway (full, --quick), per POST /v1/ingest.
const DOCUMENTS: (usize, usize) = (10_000, 100);
const INGEST_BATCH: usize = 500;
/// Alternating rounds of the HTTP-against-gRPC comparison, and the real query sentences it rotates through.
const ROUNDS: usize = 3;
const QUERIES: usize = 500;
const BASELINE_APP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/baseline/app.py");
/// The known client's query and hits asked, and its warm-up.
const KNOWN_QUERY: &str = "example query about RAG gateways";
const TOP_K: u32 = 5;
const WARMUP_QUERY: &str = "warmup";
const WARMUP_CALLS: usize = 5;
const RSS_INTERVAL: Duration = Duration::from_millis(100);
const JOB_POLL_INTERVAL: Duration = Duration::from_millis(100);
const INGEST_TIMEOUT: Duration = Duration::from_secs(1800);
const RUNS_COLUMNS: &str =
    "target,run,concurrency,requests,errors,seconds,rps,p50_ms,p95_ms,p99_ms,rss_peak_mib,server_cores,bench_cores";

/// Options of the gateway scenario (`--concurrency` is the sweep's levels).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub corpus: CorpusOptions,
}

/// A load run, the gateway's CPU during it and its RSS (none in the comparison).
struct Measured {
    concurrency: usize,
    run: ClosedLoopRun,
    cpu: CpuUse,
    rss: RssSeries,
}

/// The model alone on the headline query, in process (no HTTP, batcher or search): the most any gateway running it on
/// these cores could serve. Batch sizes up to the headline's callers, the largest batch they can form.
struct QueryCeiling {
    /// Queries per second at the best batch size, run the best way.
    rate: f64,
    batch_size: usize,
    /// How the batch ran: whole, or as parts side by side (the server's split batches).
    way: String,
}

/// What the ratios between the gateways need of each.
struct Gateway {
    cold_start: Duration,
    headline: Measured,
    /// HTTP and gRPC search, on embedwire.
    comparison: Option<[Measured; 2]>,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let python = args.corpus.python()?;
    let binary = common.server_binary()?;
    let corpus = args.corpus.select(common.pick(DOCUMENTS.0, DOCUMENTS.1), 0, QUERIES)?;
    let documents = corpus.documents.len();
    println!("gateway: {documents} documents, headline c={HEADLINE_CONCURRENCY}");
    let mut report = Report::new(common.results("gateway"), "gateway")?;
    let mut runs = Table::new(RUNS_COLUMNS);
    let runtime = tokio::runtime::Runtime::new()?;
    // One after the other, each alone on the machine.
    let mut measure_alone = |command| runtime.block_on(measure(common, &command, &corpus, (&mut report, &mut runs)));
    let ours = measure_alone(embedwire_command(common, binary))?;
    let baseline = measure_alone(baseline_command(common, python))?;
    let ceiling = query_ceiling(common)?;
    report.table("gateway_runs.csv", &runs)?;
    judge(&mut report, &ours, &baseline, &ceiling);
    report.setup("quick", f64::from(u8::from(common.quick)), "bool");
    report.setup("documents", documents as f64, "documents");
    report.finish()
}

/// The model's ceiling on the known query, measured after both gateways ran (alone on the machine, like them).
fn query_ceiling(common: &Common) -> anyhow::Result<QueryCeiling> {
    println!("in-process ceiling on the known query");
    let paths = common.model_paths(PrecisionChoice::default())?;
    let files = ModelFiles::read(&paths.model_dir)?;
    let tokenizer = TextTokenizer::from_file(&files.tokenizer_path, files.max_input_tokens)?;
    let settings = common.onnx_settings()?;
    let runtime = init_runtime(&paths.ort_library)?;
    let mut model = OnnxModel::load(runtime, &files, &paths.graph, settings, None)?;
    let query = tokenizer.tokenize(KNOWN_QUERY)?.ids;
    let plan = CeilingPlan {
        batch_sizes: vec![1, 4, HEADLINE_CONCURRENCY],
        time_per_size: common.duration(3.0, 0.3),
        warmup: common.warmup(1.0, 0.2),
    };
    let whole = in_process::measure(&mut model, std::slice::from_ref(&query), &plan, |run| {
        println!("  batch {:>2} whole: {:>7.1} queries/s", run.batch_size, run.rate());
    })?;
    drop(model);
    let best = whole.best();
    let mut ceiling = QueryCeiling { rate: best.rate(), batch_size: best.batch_size, way: "whole".into() };
    // The server may also run a batch as one part per ONNX Runtime thread, side by side (`--batch-parts`, by default
    // the thread count), each on a single-threaded session; the ceiling is the faster way.
    let parts = common.intra_op_threads;
    if parts >= 2 {
        let load = || OnnxModel::load(runtime, &files, &paths.graph, settings.parallel_part(), None);
        let mut split = SplitModel::new((0..parts).map(|_| load()).collect::<Result<_, _>>()?)?;
        let plan = CeilingPlan { batch_sizes: vec![HEADLINE_CONCURRENCY], ..plan };
        let split = in_process::measure(&mut split, &[query], &plan, |run| {
            println!("  batch {:>2} as {parts} parts: {:>7.1} queries/s", run.batch_size, run.rate());
        })?;
        let best = split.best();
        if best.rate() > ceiling.rate {
            ceiling = QueryCeiling { rate: best.rate(), batch_size: best.batch_size, way: format!("{parts} parts") };
        }
    }
    Ok(ceiling)
}

/// embedwire-server with the real model; its HTTP layer answers on the same port.
fn embedwire_command(common: &Common, binary: PathBuf) -> HttpServerCommand {
    // At the server's default admission: 16 closed-loop callers are load to batch, never refused.
    let server = common.server_command(binary, vec![("--backend", "onnx".into())]);
    let dir = fresh_data_dir();
    let mut args: Vec<OsString> =
        vec!["--listen".into(), "127.0.0.1:0".into(), "--data-dir".into(), dir.clone().into()];
    args.extend(server.args);
    // The address comes from an info line.
    let env = vec![("RUST_LOG".into(), "info,ort=warn".into())];
    HttpServerCommand { name: "embedwire".into(), program: server.binary, args, env, scratch_dir: Some(dir) }
}

/// The baseline on the same model, with the same ONNX Runtime thread count.
fn baseline_command(common: &Common, python: PathBuf) -> HttpServerCommand {
    let threads = common.intra_op_threads.to_string();
    let mut args: Vec<OsString> = vec![BASELINE_APP.into(), "--port".into(), "0".into()];
    args.extend(["--threads".into(), threads.into()]);
    if let Some(dir) = &common.model_dir {
        args.extend(["--model-dir".into(), dir.into()]);
    }
    HttpServerCommand { name: "baseline".into(), program: python, args, env: Vec::new(), scratch_dir: None }
}

/// One gateway from its start to its stop; its own figures, files and runs rows.
async fn measure(
    common: &Common,
    command: &HttpServerCommand,
    corpus: &Corpus,
    (report, runs): (&mut Report, &mut Table),
) -> anyhow::Result<Gateway> {
    let (gateway, cold_start) = HttpServerProcess::start(command).await?;
    let (name, c) = (gateway.name.clone(), HEADLINE_CONCURRENCY);
    println!("{name}: healthy after {:.2} s", cold_start.as_secs_f64());
    let timeline = RssSampler::start(gateway.pid, RSS_INTERVAL);
    let born = Instant::now();
    let (jobs, took) = ingest(&gateway, &corpus.documents).await?;
    let mut phases = vec![("ingest".to_string(), Duration::ZERO, born.elapsed())];
    let mut warmup = gateway.connect(ByteCounters::new()).await?;
    for _ in 0..WARMUP_CALLS {
        http_search(&mut warmup, search_body(WARMUP_QUERY, 3)).await.context("warm-up search")?;
    }
    let sweep = common.sweep(&[1, 4, 16, 64], &[1, 16]).into_iter().map(|c| (c, 3.0, 0.5, format!("c={c}")));
    let mut sweep_runs = Vec::new();
    for (level, full, quick, phase) in std::iter::once((c, 10.0, 1.0, format!("c={c} headline"))).chain(sweep) {
        let from = born.elapsed();
        sweep_runs.push(timed(&gateway, level, false, &[KNOWN_QUERY.into()], common.duration(full, quick)).await?);
        phases.push((phase, from, born.elapsed()));
    }
    let (headline, from) = (sweep_runs.remove(0), born.elapsed());
    let comparison = if name == "embedwire" { Some(compare(&gateway, common, &corpus.queries).await?) } else { None };
    phases.extend(comparison.as_ref().map(|_| ("HTTP vs gRPC".into(), from, born.elapsed())));
    let rss = timeline.finish(gateway.pid).await?;
    gateway.stop().await?;

    report.write(&format!("requests_{name}.csv"), &headline.run.csv())?;
    let mut rss_table = Table::new("t_s,rss_mib,phase");
    for (at, bytes) in &rss.samples {
        let phase = phases.iter().find(|(_, start, end)| start <= at && at <= end).map_or("idle", |p| p.0.as_str());
        rss_table.row([format!("{:.3}", at.as_secs_f64()), format!("{:.2}", mib(*bytes)), phase.to_string()]);
    }
    report.table(&format!("rss_{name}.csv"), &rss_table)?;
    let compared = comparison.iter().flat_map(|[http, grpc]| [("compare_http", http), ("compare_grpc", grpc)]);
    for (run, m) in sweep_runs.iter().map(|m| ("sweep", m)).chain([("headline", &headline)]).chain(compared) {
        let l = m.run.latency();
        let counts = [m.concurrency, m.run.ok(), m.run.errors()].map(|n| n.to_string());
        let times = [m.run.elapsed.as_secs_f64(), m.run.rate(), ms(l.p50), ms(l.p95), ms(l.p99)];
        let rss = if m.rss.samples.is_empty() { String::new() } else { format!("{:.1}", mib(m.rss.peak())) };
        let cpu = [m.cpu.server_cores, m.cpu.bench_cores].map(|v| format!("{v:.3}"));
        let cells = [name.clone(), run.into()].into_iter().chain(counts);
        runs.row(cells.chain(times.map(|v| format!("{v:.3}"))).chain([rss]).chain(cpu));
    }
    let (cold, docs, took) = (cold_start.as_secs_f64(), corpus.documents.len(), took.as_secs_f64());
    let docs_s = docs as f64 / took.max(1e-9);
    runs.row(format!("{name},cold_start,,,,{cold:.3},,,,,,,").split(','));
    runs.row(format!("{name},ingest,,{docs},,{took:.3},{docs_s:.3},,,,,,").split(','));

    let (h, l) = (&headline, headline.run.latency());
    let (rate, cpu, peak, mean) = (h.run.rate(), &h.cpu, mib(h.rss.peak()), mib(h.rss.mean()));
    let errors = if h.run.errors() > 0 { format!(", {} errors", h.run.errors()) } else { String::new() };
    let searched = format!("{rate:.1} req/s ({} requests{errors})", h.run.ok());
    let ingested = format!("{docs_s:.1} docs/s ({took:.1} s, {jobs} requests)");
    let cores = format!("{:.2} / {:.2} cores", cpu.server_cores, cpu.bench_cores);
    report.figure(Row::info(format!("{name} cold start (spawn to /healthz ok)"), cold, "s", format!("{cold:.2} s")));
    report.figure(Row::info(format!("{name} ingest {docs} docs via /v1/ingest"), docs_s, "documents/s", ingested));
    report.figure(Row::info(format!("{name} /v1/search c={c}"), rate, "requests/s", searched));
    report.figure(Row::info(format!("{name} /v1/search c={c} p50 / p95 / p99"), ms(l.p95), "ms", percentiles(&l)));
    let rss_text = format!("{peak:.1} / {mean:.1} MiB");
    report.figure(Row::info(format!("{name} RSS during c={c} (peak / mean)"), peak, "MiB", rss_text));
    report.figure(Row::info(format!("{name} CPU c={c}: server / bench"), cpu.server_cores, "cores", cores));
    Ok(Gateway { cold_start, headline, comparison })
}

/// Fills the index through the /v1 contract itself: POST /v1/ingest in batches (each answers a job at once), GET
/// /v1/jobs/{id} until every job completed, then /healthz must count every document. Returns requests and time.
async fn ingest(gateway: &HttpServerProcess, docs: &[Paragraph]) -> anyhow::Result<(usize, Duration)> {
    let mut connection = gateway.connect(ByteCounters::new()).await?;
    let (started, name) = (Instant::now(), &gateway.name);
    let mut jobs = Vec::new();
    for (number, chunk) in docs.chunks(INGEST_BATCH).enumerate() {
        let document = |(i, p): (usize, &Paragraph)| {
            let id = format!("doc-{}", number * INGEST_BATCH + i);
            json!({"id": id, "text": p.text, "metadata": {"source": p.source}})
        };
        let body = json!({ "documents": chunk.iter().enumerate().map(document).collect::<Vec<_>>() });
        let job: Value = connection.post_json("/v1/ingest", &body).await?.json().context("POST /v1/ingest")?;
        anyhow::ensure!(job["total_documents"] == chunk.len(), "a job of {} documents: {job}", chunk.len());
        jobs.push(job["job_id"].as_str().context("no job_id")?.to_string());
    }
    for id in &jobs {
        loop {
            anyhow::ensure!(started.elapsed() < INGEST_TIMEOUT, "{name} did not finish ingesting in time");
            let job: Value = connection.get(&format!("/v1/jobs/{id}")).await?.json().context("GET /v1/jobs")?;
            match job["status"].as_str() {
                Some("completed") => break,
                Some("failed") => anyhow::bail!("{name} failed job {id}: {}", job["error"]),
                _ => tokio::time::sleep(JOB_POLL_INTERVAL).await,
            }
        }
    }
    let (took, count) = (started.elapsed(), gateway.health().await?.document_count);
    anyhow::ensure!(count >= docs.len() as u64, "{name} counts {count} of {} documents", docs.len());
    println!("{name}: ingested {} documents in {:.1} s", docs.len(), took.as_secs_f64());
    Ok((jobs.len(), took))
}

fn search_body(query: &str, top_k: u32) -> Bytes {
    Bytes::from(json!({"query": query, "top_k": top_k}).to_string())
}

/// One /v1/search; no results fails it (a broken index must not pass for a fast one).
async fn http_search(connection: &mut HttpConnection, body: Bytes) -> anyhow::Result<()> {
    let answer = connection.send(http::Method::POST, "/v1/search", Some((body, "application/json")), None).await?;
    let answer: Value = answer.json().context("/v1/search")?;
    anyhow::ensure!(answer["results"].as_array().is_some_and(|r| !r.is_empty()), "/v1/search answered no results");
    Ok(())
}

/// One worker's search on its own connection, the queries in rotation from an offset.
enum Search {
    Http(HttpConnection, Arc<[Bytes]>, usize),
    Grpc(SearchServiceClient<Channel>, Arc<[String]>, usize),
}

impl Caller for Search {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        match self {
            Search::Http(conn, bodies, first) => http_search(conn, bodies[(*first + n) % bodies.len()].clone()).await,
            Search::Grpc(client, texts, first) => {
                let query = Some(v1::search_query::Query::Text(texts[(*first + n) % texts.len()].clone()));
                let queries = vec![v1::SearchQuery { query }];
                let request = v1::SearchRequest { queries, top_k: Some(TOP_K), ..Default::default() };
                let answer = client.search(request).await.context("Search")?.into_inner();
                anyhow::ensure!(answer.results.first().is_some_and(|r| !r.hits.is_empty()), "Search answered no hits");
                Ok(())
            }
        }
    }
}

async fn callers(gateway: &HttpServerProcess, c: usize, grpc: bool, texts: &[String]) -> anyhow::Result<Vec<Search>> {
    let bodies: Arc<[Bytes]> = texts.iter().map(|text| search_body(text, TOP_K)).collect();
    let (texts, counters): (Arc<[String]>, _) = (texts.into(), ByteCounters::new());
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", gateway.address))?.tcp_nodelay(true);
    let mut callers = Vec::new();
    // Workers start far apart in the rotation, so that concurrent calls differ.
    for first in (0..c).map(|k| k * texts.len() / c) {
        callers.push(if grpc {
            Search::Grpc(SearchServiceClient::new(endpoint.connect().await?), texts.clone(), first)
        } else {
            Search::Http(gateway.connect(counters.clone()).await?, bodies.clone(), first)
        });
    }
    Ok(callers)
}

/// A measured closed-loop run of `c` workers with the gateway's RSS and CPU.
async fn timed(g: &HttpServerProcess, c: usize, grpc: bool, texts: &[String], t: Duration) -> anyhow::Result<Measured> {
    let callers = callers(g, c, grpc, texts).await?;
    let rss = RssSampler::start(g.pid, RSS_INTERVAL);
    let (run, cpu) = CpuWindow::around(g.pid, closed_loop::run(callers, Stop::After(t))).await?;
    let (rss, l) = (rss.finish(g.pid).await?, run.latency());
    let error = run.first_error.as_deref().map(|e| format!("; first error: {e}")).unwrap_or_default();
    let what = if grpc { "gRPC Search" } else { "/v1/search" };
    println!("{} {what} c={c}: {:.1} req/s, p50 / p95 / p99 {}{error}", g.name, run.rate(), percentiles(&l));
    Ok(Measured { concurrency: c, run, cpu, rss })
}

/// /v1/search against gRPC Search at the headline concurrency, the same query sentences in the same rotation, one
/// connection per worker on both sides.
async fn compare(gateway: &HttpServerProcess, common: &Common, queries: &[String]) -> anyhow::Result<[Measured; 2]> {
    let c = HEADLINE_CONCURRENCY;
    for grpc in [false, true] {
        closed_loop::run(callers(gateway, c, grpc, queries).await?, Stop::After(common.warmup(1.0, 0.2))).await?;
    }
    let round = common.duration(9.0, 1.0) / ROUNDS as u32;
    let mut sides: [Vec<Measured>; 2] = Default::default();
    for _ in 0..ROUNDS {
        for (grpc, side) in [false, true].into_iter().zip(&mut sides) {
            side.push(timed(gateway, c, grpc, queries, round).await?);
        }
    }
    Ok(sides.map(|side| {
        let run = ClosedLoopRun::combine(&side.iter().map(|m| m.run.clone()).collect::<Vec<_>>());
        let cpu = CpuUse::combine(&side.iter().map(|m| m.cpu.clone()).collect::<Vec<_>>());
        Measured { concurrency: c, run, cpu, rss: RssSeries::default() }
    }))
}

/// `a / b` as a figure, judged against `bound` (printed as `>= 2.0 x`).
fn ratio(figure: String, (a, b): (f64, f64), bound: Bound, note: String) -> Row {
    let value = a / b.max(1e-9);
    let row = Row::info(figure, value, "x", format!("{value:.2} x")).with_note(note);
    match bound {
        Bound::AtLeast(limit) => row.at_least(limit, format!(">= {limit} x")),
        Bound::AtMost(limit) => row.at_most(limit, format!("<= {limit} x")),
    }
}

/// The targets: embedwire against the baseline, HTTP against gRPC search.
fn judge(report: &mut Report, ours: &Gateway, baseline: &Gateway, ceiling: &QueryCeiling) {
    let (a, b, c) = (&ours.headline, &baseline.headline, HEADLINE_CONCURRENCY);
    let (rate, p95) = ((a.run.rate(), b.run.rate()), (ms(a.run.latency().p95), ms(b.run.latency().p95)));
    let note = format!("{:.1} vs {:.1} req/s", rate.0, rate.1);
    report.figure(ratio(format!("RPS c={c} embedwire / baseline"), rate, Bound::AtLeast(MIN_RPS_RATIO), note));
    // Where the RPS target stands against the model itself: a gateway that embeds every query cannot pass the model's
    // in-process rate on the same cores.
    let text = format!("{:.1} queries/s at batch {}, {}", ceiling.rate, ceiling.batch_size, ceiling.way);
    report.figure(Row::info("model alone on the known query (in-process ceiling)", ceiling.rate, "queries/s", text));
    let (of_ceiling, bound) = (rate.0 / ceiling.rate.max(1e-9), ceiling.rate / rate.1.max(1e-9));
    let text = format!("{of_ceiling:.2} x");
    report.figure(Row::info(format!("embedwire c={c} / the model's ceiling"), of_ceiling, "x", text));
    let text = format!("{bound:.2} x");
    report.figure(Row::info("the model's ceiling / baseline RPS: the most RPS ratio possible", bound, "x", text));
    let note = format!("{:.1} vs {:.1} ms", p95.0, p95.1);
    report.figure(ratio(format!("p95 c={c} embedwire / baseline"), p95, Bound::AtMost(MAX_P95_RATIO), note));
    let rss = (mib(a.rss.peak()), mib(b.rss.peak()));
    let note = format!("{:.0} vs {:.0} MiB", rss.0, rss.1);
    report.figure(ratio(format!("RSS peak c={c} embedwire / baseline"), rss, Bound::AtMost(MAX_RSS_RATIO), note));
    let (a, b) = (ours.cold_start.as_secs_f64(), baseline.cold_start.as_secs_f64());
    let text = format!("{:.2} x ({a:.2} vs {b:.2} s)", a / b.max(1e-9));
    report.figure(Row::info("cold start embedwire / baseline", a / b.max(1e-9), "x", text));
    if let Some([http, grpc]) = &ours.comparison {
        let rate = (http.run.rate(), grpc.run.rate());
        let text = |rate: f64, m: &Measured| format!("{rate:.1} req/s, {}", percentiles(&m.run.latency()));
        let figure = format!("HTTP /v1/search c={c}, rotating queries");
        report.figure(Row::info(figure, rate.0, "requests/s", text(rate.0, http)));
        report.figure(Row::info(format!("gRPC Search c={c}, same queries"), rate.1, "requests/s", text(rate.1, grpc)));
        let note = format!("server CPU {:.2} vs {:.2} cores", http.cpu.server_cores, grpc.cpu.server_cores);
        let figure = format!("HTTP /v1/search / gRPC Search c={c}");
        report.figure(ratio(figure, rate, Bound::AtLeast(MIN_HTTP_GRPC_RATIO), note));
    }
}
