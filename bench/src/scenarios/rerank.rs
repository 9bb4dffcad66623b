//! rerank: the pairs/s of the server's Rerank against the same cross-encoder in-process
//! (the server crate's code and ONNX settings, pairs tokenized beforehand: the ceiling),
//! at concurrency 1..32, then the bi-encoder fallback (a server without
//! `--rerank-model-dir`). A call is one query and 20 docstring passages of 50-70 tokens:
//! call k takes query k mod Q and the passages from (k x texts) mod P on, P prime, so
//! concurrent calls never share a passage. The ceiling and the server alternate in
//! rounds, so a drift of this shared machine's speed moves both alike. A refused client
//! backs off as the clients' retry policies do.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::Parser;
use embedwire_bench::{
    closed_loop::{self, Caller, ClosedLoopRun},
    corpus::{self, CorpusOptions},
    cpu::{self, CpuUse, CpuWindow},
    in_process::{Ceiling, CeilingPlan, InProcess, MIN_BATCHES},
    latency::ms,
    load::Stop,
    options::{Common, connections, program_output},
    report::{Report, Row, Table},
    server_metrics::MetricsSnapshot,
    server_process::{ServerCommand, ServerProcess},
};
use embedwire_proto::v1::{RerankRequest, rerank_service_client::RerankServiceClient};
use embedwire_server::{
    ServerConfig,
    model::{
        cross_encoder::CrossEncoder,
        onnx::init_runtime,
        pair_tokenizer::{PairTokenizer, TruncationSide},
    },
};
use tonic::transport::Channel;

/// Best cross-encoder pairs/s at least this share of the in-process ceiling.
const MIN_CEILING_RATIO: f64 = 0.90;
/// Passages per Rerank call, and clients sharing one HTTP/2 connection.
const TEXTS_PER_CALL: usize = 20;
const CLIENTS_PER_CONNECTION: usize = 4;
const PASSAGE_TOKENS: std::ops::RangeInclusive<usize> = 50..=70;
/// Passages (prime, see above) and queries in rotation.
const POOL: usize = 1009;
const QUERIES: usize = 101;
/// Calls whose pairs the ceiling rotates through.
const CEILING_CALLS: usize = 100;
/// A refused client's first and longest pause.
const PAUSES: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(200));
/// Builds the default cross-encoder, deterministically: built once, again when it changes.
const SCRIPT: &str = "scripts/model/make_minilm_cross_encoder.py";

/// Options of the rerank scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub corpus: CorpusOptions,
    /// Cross-encoder directory, in-process and in the server [default: SCRIPT's build in
    /// CACHE_DIR/minilm-cross-encoder: the shape of ms-marco-MiniLM-L-6-v2, seeded head].
    #[arg(long, env = "EMBEDWIRE_RERANK_MODEL_DIR")]
    pub rerank_model_dir: Option<PathBuf>,
    /// Skip the bi-encoder sweep (a server without --rerank-model-dir).
    #[arg(long)]
    pub no_bi_encoder: bool,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let mut report = Report::new(common.results("rerank"), "rerank_bench")?;
    // Rounds, as this VM ran one batch size at 38 and 60 pairs/s a minute apart; each
    // in-process batch size runs 3 s (--quick: 0.5 s) over all rounds.
    let rounds = common.pick(3, 1);
    let plan = CeilingPlan {
        batch_sizes: common.pick(vec![1, 8, 20, 32, 64], vec![1, 20]),
        time_per_size: Duration::from_secs_f64(common.pick(3.0, 0.5)) / rounds as u32,
        warmup: Duration::from_secs_f64(common.pick(1.0, 0.2)),
    };
    let run_time = common.duration(15.0, 1.0);
    let levels = common.sweep(&[1, 2, 4, 8, 16, 32], &[1, 4]);
    let (python, cache_dir) = (args.corpus.python()?, args.corpus.cache_dir()?);
    let docstrings = corpus::docstrings(&python, &cache_dir, args.corpus.refresh_corpus)?;
    let rerank_dir = cross_encoder_dir(args.rerank_model_dir.as_deref(), &python, &cache_dir)?;
    let binary = common.server_binary()?; // before measuring: a build would disturb the ceiling
    let onnx = || ("--backend", OsString::from("onnx"));
    let cross_command =
        common.server_command(binary.clone(), vec![onnx(), ("--rerank-model-dir", (&rerank_dir).into())]);
    let bi_command = (!args.no_bi_encoder).then(|| common.server_command(binary, vec![onnx()]));
    // In-process, the ONNX settings, library and precision the server gives itself.
    let flags = std::iter::once(OsString::from("embedwire-server")).chain(cross_command.args.iter().cloned());
    let server = ServerConfig::try_parse_from(flags).context("the server's flags")?;
    let onnx = server.onnx_settings();
    let mut loaded = CrossEncoder::load(init_runtime(&server.ort_library())?, &rerank_dir, onnx, server.precision)?;
    let workload = Arc::new(Workload::build(&docstrings, &loaded.tokenizer)?);
    let sweep =
        Sweep { work: workload.clone(), levels, warmup: common.warmup(1.0, 0.3), run_time: run_time / rounds as u32 };
    drop(docstrings);
    // The ceiling's pairs, tokenized as the server does it, each call's tokenizing timed.
    let (mut pairs, mut tokenizing) = (Vec::new(), Duration::ZERO);
    for (query, passages) in (0..CEILING_CALLS).map(|k| workload.call(k)) {
        let started = Instant::now();
        for text in &passages {
            pairs.push(loaded.tokenizer.tokenize(&query, text, TruncationSide::Right)?);
        }
        tokenizing += started.elapsed() / CEILING_CALLS as u32;
    }
    let pair_tokens: Vec<usize> = pairs.iter().map(|pair| pair.ids.len()).collect();
    let precision = loaded.precision.name();
    let onnx = format!("{} intra-op threads, spinning {:?}, arena {}", onnx.intra_op_threads, onnx.spinning, onnx.arena);
    println!("rerank: cross-encoder {} ({precision}, {onnx}), {rounds} round(s)", rerank_dir.display());

    let runtime = tokio::runtime::Runtime::new()?;
    let mut in_process = InProcess::new(&mut loaded.model, &pairs)?;
    in_process.warm_up(plan.warmup)?;
    let cross_server = runtime.block_on(ServerProcess::start(&cross_command))?.0;
    let (mut ceilings, mut cross, mut bi) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        println!("round {round} of {rounds}: in-process, then the cross-encoder server");
        ceilings.push(in_process.pass(&plan, plan.time_per_size, MIN_BATCHES.div_ceil(rounds), |run| {
            let (size, rate, p50) = (run.batch_size, run.rate(), ms(run.batch_latency.p50));
            println!("  batch {size:>2}: {rate:>7.1} pairs/s  batch p50 {p50:>7.2} ms");
        })?);
        pool(&mut cross, runtime.block_on(sweep.pass(&cross_server, &CROSS))?);
    }
    runtime.block_on(cross_server.stop())?;
    drop(in_process); // its threads and memory go before the other server starts
    drop(loaded);
    if let Some(command) = &bi_command {
        let bi_server = runtime.block_on(ServerProcess::start(command))?.0;
        for round in 1..=rounds {
            println!("round {round} of {rounds}: bi-encoder server");
            pool(&mut bi, runtime.block_on(sweep.pass(&bi_server, &BI))?);
        }
        runtime.block_on(bi_server.stop())?;
    }

    let ceiling = Ceiling::combine(&ceilings);
    let tokens = (mean(&pair_tokens), pair_tokens.iter().max().copied().unwrap_or(0));
    report.figures(figures(&ceiling, (tokenizing, tokens), &cross, &bi));
    // The servers' flags as recorded, the cross-encoder's directory shortened to its name.
    let name = rerank_dir.file_name().map_or(OsString::new(), OsString::from);
    let shown = |command: &ServerCommand| {
        let args = command.args.iter().map(|arg| if Path::new(arg) == rerank_dir { &name } else { arg });
        args.map(|arg| arg.to_string_lossy()).collect::<Vec<_>>().join(" ")
    };
    let mut setup = Table::new("setting,value");
    let settings = [
        ("quick", common.quick.to_string()),
        ("texts_per_call", TEXTS_PER_CALL.to_string()),
        ("clients_per_connection", CLIENTS_PER_CONNECTION.to_string()),
        ("rounds", rounds.to_string()),
        ("run_secs", format!("{:.1}", run_time.as_secs_f64())),
        ("rerank_model_dir", rerank_dir.display().to_string()),
        ("precision", precision.to_string()),
        ("onnx", onnx),
        ("cross_server_flags", shown(&cross_command)),
        ("bi_server_flags", bi_command.as_ref().map_or("(not run)".into(), shown)),
        ("queries", workload.queries.len().to_string()),
        ("passages", workload.passages.len().to_string()),
        ("mean_passage_tokens", format!("{:.1}", mean(&workload.passage_tokens))),
    ];
    settings.into_iter().for_each(|(setting, value)| setup.row([setting.to_string(), value]));
    let mut batches = Table::new("batch_size,pairs,seconds,pairs_per_s,batch_mean_ms,batch_p50_ms,batch_p99_ms");
    for run in &ceiling.runs {
        let l = &run.batch_latency;
        let latencies = [l.mean, l.p50, l.p99].map(|t| format!("{:.3}", ms(t)));
        let counts = [run.batch_size, run.inputs].map(|n| n.to_string());
        let rates = [format!("{:.3}", run.elapsed.as_secs_f64()), format!("{:.2}", run.rate())];
        batches.row(counts.into_iter().chain(rates).chain(latencies));
    }
    for (file, title, table) in [
        ("rerank_bench_setup.csv", "Setup", &setup),
        ("rerank_bench_in_process.csv", "In-process ceiling", &batches),
        ("rerank_bench_sweep.csv", "Server sweep", &sweep_table(cross.iter().chain(&bi))),
    ] {
        report.table(file, table)?;
        report.section(title, table);
    }
    report.finish()
}

fn mean(values: &[usize]) -> f64 {
    values.iter().sum::<usize>() as f64 / values.len().max(1) as f64
}

/// `explicit`, else SCRIPT's build in the cache, made now when missing or made by another
/// version of the script (whose copy is kept beside it).
fn cross_encoder_dir(explicit: Option<&Path>, python: &Path, cache_dir: &Path) -> anyhow::Result<PathBuf> {
    if let Some(dir) = explicit {
        anyhow::ensure!(dir.join("model.onnx").is_file(), "no model.onnx in --rerank-model-dir {}", dir.display());
        return Ok(dir.to_path_buf());
    }
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(SCRIPT);
    let script = std::fs::read(&script_path).with_context(|| format!("reading {}", script_path.display()))?;
    let (dir, built_by) = (cache_dir.join("minilm-cross-encoder"), "built_by.py");
    if dir.join("model.onnx").is_file() && std::fs::read(dir.join(built_by)).ok().as_deref() == Some(&script[..]) {
        return Ok(dir);
    }
    // Built beside its place, then renamed: a run stopped halfway leaves nothing that looks complete.
    let partial = cache_dir.join(format!("minilm-cross-encoder.{}.partial", std::process::id()));
    std::fs::create_dir_all(cache_dir).with_context(|| format!("creating {}", cache_dir.display()))?;
    let _ = std::fs::remove_dir_all(&partial);
    println!("building the cross-encoder: {} {SCRIPT} {}", python.display(), dir.display());
    let mut build = std::process::Command::new(python);
    program_output(build.arg(&script_path).arg(&partial), "run `make setup` or pass --rerank-model-dir")?;
    std::fs::write(partial.join(built_by), &script)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&partial, &dir).with_context(|| format!("moving the cross-encoder to {}", dir.display()))?;
    Ok(dir)
}

struct Workload {
    queries: Vec<String>,
    passages: Vec<String>,
    passage_tokens: Vec<usize>,
}

impl Workload {
    /// Visits the paragraphs with a stride near 0.618 x their number that shares no
    /// factor with it: passages come from the whole corpus, not its first modules.
    fn build(docstrings: &[corpus::Docstring], tokenizer: &PairTokenizer) -> anyhow::Result<Self> {
        let eligible = corpus::select(docstrings, 0, 0, 0)?.paragraphs;
        let corpus = corpus::select(docstrings, eligible, 0, QUERIES)?;
        let n = corpus.documents.len();
        let stride = (n * 618 / 1000..n).find(|&s| n > 2 && gcd(s, n) == 1).unwrap_or(1);
        let (mut passages, mut passage_tokens) = (Vec::new(), Vec::new());
        for text in (0..n).map(|k| &corpus.documents[k * stride % n].text) {
            let tokens = tokenizer.text_offsets(text)?.len();
            if PASSAGE_TOKENS.contains(&tokens) {
                passages.push(text.clone());
                passage_tokens.push(tokens);
            }
            if passages.len() == POOL {
                break;
            }
        }
        anyhow::ensure!(passages.len() == POOL, "{} passages of {PASSAGE_TOKENS:?} tokens, not {POOL}", passages.len());
        Ok(Workload { queries: corpus.queries, passages, passage_tokens })
    }

    fn call(&self, k: usize) -> (String, Vec<String>) {
        let start = k.wrapping_mul(TEXTS_PER_CALL) % self.passages.len();
        let texts = (0..TEXTS_PER_CALL).map(|i| self.passages[(start + i) % self.passages.len()].clone());
        (self.queries[k % self.queries.len()].clone(), texts.collect())
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// A scorer: its name in answers and tables, and the /metrics of its model's batches,
/// the inputs in them and their time (then the calls refused, the same for both).
struct Scorer(&'static str, [&'static str; 3]);

const REFUSED: &str = "embedwire_rerank_rejected_overload_total";
const CROSS: Scorer = Scorer(
    "cross-encoder",
    ["embedwire_rerank_batches_total", "embedwire_rerank_batch_size_sum", "embedwire_rerank_inference_seconds_sum"],
);
/// No cross-encoder: the query and texts go through the embedding model's batcher.
const BI: Scorer = Scorer(
    "bi-encoder",
    ["embedwire_model_batches_total", "embedwire_model_sequences_total", "embedwire_inference_seconds_sum"],
);

/// Refusals, then the server's times of answered calls (RerankMetadata) summed in ns:
/// total, tokenization, queue, inference.
type Tally = [AtomicU64; 5];

/// Worker w of W makes calls w, w + W, ...: together, the workload's calls in order.
struct RerankCaller {
    client: RerankServiceClient<Channel>,
    workload: Arc<Workload>,
    scorer: &'static str,
    worker_of: (usize, usize),
    tally: Arc<Tally>,
    pause: Duration,
}

impl Caller for RerankCaller {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let (query, texts) = self.workload.call(self.worker_of.0 + n * self.worker_of.1);
        let count = texts.len();
        let response = match self.client.rerank(RerankRequest { query, texts, ..Default::default() }).await {
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                self.tally[0].fetch_add(1, Relaxed);
                tokio::time::sleep(self.pause).await;
                self.pause = (self.pause * 2).min(PAUSES.1);
                anyhow::bail!("RESOURCE_EXHAUSTED: {}", status.message())
            }
            Err(status) => anyhow::bail!("Rerank failed: {:?}: {}", status.code(), status.message()),
            Ok(response) => response.into_inner(),
        };
        self.pause = PAUSES.0;
        let (ranks, scorer) = (response.ranks.len(), &response.scorer);
        let answered = ranks == count && scorer.starts_with(self.scorer);
        anyhow::ensure!(answered, "Rerank of {count} texts answered {ranks} ranks by {scorer:?}");
        let m = response.metadata.unwrap_or_default();
        let times = [m.total_time_ns, m.tokenization_time_ns, m.queue_time_ns, m.inference_time_ns];
        for (sum, ns) in self.tally[1..].iter().zip(times) {
            sum.fetch_add(ns, Relaxed);
        }
        Ok(())
    }
}

/// One concurrency's measured run, or its rounds pooled.
struct Point {
    scorer: &'static str,
    clients: usize,
    /// Every call; refusals count as failed calls here.
    run: ClosedLoopRun,
    tally: [u64; 5],
    cpu: CpuUse,
    /// Cores busy on the whole machine.
    machine_cores: f64,
    /// The scorer's metrics over the run.
    model: [f64; 4],
}

impl Point {
    fn refused(&self) -> usize {
        self.tally[0] as usize
    }

    fn errors(&self) -> usize {
        self.run.errors().saturating_sub(self.refused())
    }

    fn pairs_per_s(&self) -> f64 {
        (self.run.ok() * TEXTS_PER_CALL) as f64 / self.run.elapsed.as_secs_f64().max(1e-9)
    }

    fn other_cores(&self) -> f64 {
        (self.machine_cores - self.cpu.server_cores - self.cpu.bench_cores).max(0.0)
    }

    /// Another round of the same concurrency: calls pooled, counts summed, CPU weighted by time.
    fn pool(self, b: Point) -> Point {
        let (wa, wb) = (self.cpu.wall.as_secs_f64(), b.cpu.wall.as_secs_f64());
        Point {
            run: ClosedLoopRun::combine(&[self.run, b.run]),
            tally: std::array::from_fn(|k| self.tally[k] + b.tally[k]),
            cpu: CpuUse::combine(&[self.cpu, b.cpu]),
            machine_cores: (self.machine_cores * wa + b.machine_cores * wb) / (wa + wb).max(1e-9),
            model: std::array::from_fn(|k| self.model[k] + b.model[k]),
            ..self
        }
    }
}

fn pool(total: &mut Vec<Point>, round: Vec<Point>) {
    *total = if total.is_empty() { round } else { total.drain(..).zip(round).map(|(a, b)| a.pool(b)).collect() };
}

/// Passes over the concurrency levels, each after an unmeasured warm-up.
struct Sweep {
    work: Arc<Workload>,
    levels: Vec<usize>,
    warmup: Duration,
    run_time: Duration,
}

impl Sweep {
    async fn pass(&self, server: &ServerProcess, scorer: &Scorer) -> anyhow::Result<Vec<Point>> {
        let mut points = Vec::new();
        for &clients in &self.levels {
            let tail = |_: &_| eprintln!("the server's last log lines:\n{}", server.log_tail().join("\n"));
            points.push(self.point(server, scorer, clients).await.inspect_err(tail)?);
        }
        Ok(points)
    }

    async fn point(&self, server: &ServerProcess, scorer: &Scorer, clients: usize) -> anyhow::Result<Point> {
        let channels = connections(server, clients.div_ceil(CLIENTS_PER_CONNECTION)).await?;
        let callers = |tally: &Arc<Tally>| -> Vec<RerankCaller> {
            let caller = |w: usize| RerankCaller {
                client: RerankServiceClient::new(channels[w % channels.len()].clone()),
                workload: self.work.clone(),
                scorer: scorer.0,
                worker_of: (w, clients),
                tally: tally.clone(),
                pause: PAUSES.0,
            };
            (0..clients).map(caller).collect()
        };
        if !self.warmup.is_zero() {
            closed_loop::run(callers(&Arc::default()), Stop::After(self.warmup)).await?;
        }
        let tally = Arc::default();
        let (metrics, machine) = (MetricsSnapshot::read(server.address).await?, cpu::machine_busy_time()?);
        let load = closed_loop::run(callers(&tally), Stop::After(self.run_time));
        let (run, cpu) = CpuWindow::around(server.pid, load).await?;
        let machine_cores = cpu::cores(machine, cpu::machine_busy_time()?, cpu.wall);
        let after = MetricsSnapshot::read(server.address).await?;
        let [batches, inputs, seconds] = scorer.1;
        let model = [batches, inputs, seconds, REFUSED].map(|name| after.since(&metrics, name).max(0.0));
        let tally = tally.each_ref().map(|n| n.load(Relaxed));
        let p = Point { scorer: scorer.0, clients, run, tally, cpu, machine_cores, model };
        let (name, rate, p99, cpu) = (scorer.0, p.pairs_per_s(), ms(p.run.latency().p99), &p.cpu);
        let (refused, errors, first) = (p.refused(), p.errors(), p.run.first_error.as_deref().unwrap_or("-"));
        println!(
            "  {name} c={clients:<2} {rate:>6.1} pairs/s  {refused} refused, {errors} errors  p99 {p99:.1} ms; {cpu}"
        );
        anyhow::ensure!(p.run.ok() > 0, "{name} c={clients}: no call answered (first error: {first})");
        Ok(p)
    }
}

/// `tokenizing`: one call's time, and a pair's tokens, mean and max.
fn figures(ceiling: &Ceiling, tokenizing: (Duration, (f64, usize)), cross: &[Point], bi: &[Point]) -> Vec<Row> {
    let texts = TEXTS_PER_CALL;
    let by_rate = |a: &&Point, b: &&Point| a.pairs_per_s().total_cmp(&b.pairs_per_s());
    let (best, rate) = (ceiling.best().batch_size, ceiling.best().rate());
    let (tokenize, (mean_tokens, max_tokens)) = (ms(tokenizing.0), tokenizing.1);
    let mut rows = vec![
        Row::info("in-process ceiling (best batch)", rate, "pairs/s", format!("{rate:.1} pairs/s @ batch {best}")),
        Row::info("pair tokens (mean / max)", mean_tokens, "tokens", format!("{mean_tokens:.1} / {max_tokens}")),
        Row::info(format!("tokenize one call ({texts} pairs)"), tokenize, "ms", format!("{tokenize:.2} ms")),
    ];
    let one_call = ceiling.of(texts).map(|run| ms(run.batch_latency.p50));
    if let Some(p50) = one_call {
        rows.push(Row::info(format!("in-process batch-{texts} call p50"), p50, "ms", format!("{p50:.1} ms")));
    }
    let best_cross = cross.iter().max_by(by_rate);
    if let Some(p) = best_cross {
        let (value, limit) = (p.pairs_per_s(), MIN_CEILING_RATIO * rate);
        let measured = format!("{value:.1} pairs/s @ c={}", p.clients);
        rows.push(
            Row::info("cross-encoder pairs/s (best c)", value, "pairs/s", measured)
                .at_least(limit, format!(">= {MIN_CEILING_RATIO:.2} x {rate:.1} ({limit:.1})"))
                .with_note(format!("{:.2} x", value / rate)),
        );
    }
    // The target is on the best point; the lowest says what the other concurrencies got.
    if let Some(p) = cross.iter().min_by(by_rate) {
        let (value, clients) = (p.pairs_per_s(), p.clients);
        let measured = format!("{value:.1} pairs/s @ c={clients} ({:.2} x ceiling)", value / rate);
        rows.push(Row::info("cross-encoder pairs/s (lowest c)", value, "pairs/s", measured));
    }
    // A scorer's one-client latency (against the in-process call, if known) and its refusals.
    let scorer_rows = |rows: &mut Vec<Row>, scorer: &str, points: &[Point], in_process: Option<f64>| {
        if let Some(latency) = points.iter().find(|p| p.clients == 1).map(|p| p.run.latency()) {
            let (p50, p99) = (ms(latency.p50), ms(latency.p99));
            let versus = in_process.map_or(String::new(), |model| format!(", {:.2} x in-process", p50 / model));
            let (figure, measured) =
                (format!("{scorer} c=1 p50 / p99 (1 x {texts} call)"), format!("{p50:.1} / {p99:.1} ms{versus}"));
            rows.push(Row::info(figure, p50, "ms", measured));
        }
        if !points.is_empty() {
            let refused: usize = points.iter().map(Point::refused).sum();
            let calls: usize = points.iter().map(|p| p.run.ok() + p.refused() + p.errors()).sum();
            let from =
                points.iter().find(|p| p.refused() > 0).map_or(String::new(), |p| format!(", from c={}", p.clients));
            let measured = format!("{refused} of {calls} calls{from}");
            rows.push(Row::info(format!("{scorer} refused (RESOURCE_EXHAUSTED)"), refused as f64, "calls", measured));
        }
    };
    scorer_rows(&mut rows, "cross-encoder", cross, one_call);
    if let (Some(p), Some(c)) = (bi.iter().max_by(by_rate), best_cross) {
        let (value, clients) = (p.pairs_per_s(), p.clients);
        let measured = format!("{value:.1} pairs/s @ c={clients} ({:.2} x cross-encoder)", value / c.pairs_per_s());
        rows.push(Row::info("bi-encoder pairs/s (best c)", value, "pairs/s", measured));
    }
    scorer_rows(&mut rows, "bi-encoder", bi, None);
    rows
}

fn sweep_table<'a>(points: impl Iterator<Item = &'a Point>) -> Table {
    let mut table = Table::new(
        "scorer,concurrency,seconds,calls_ok,refused,errors,pairs_per_s,p50_ms,p95_ms,p99_ms,mean_ms,server_cores,\
         server_system_cores,bench_cores,other_cores,model_busy,model_batches,inputs_per_batch,model_ms_per_input,\
         server_refused,server_total_ms,server_tokenize_ms,server_queue_ms,server_model_ms",
    );
    for p in points {
        let (l, cpu, [batches, inputs, busy, refused]) = (p.run.latency(), &p.cpu, p.model);
        let f3 = |v: f64| format!("{v:.3}");
        let mut cells = vec![p.scorer.to_string(), p.clients.to_string(), f3(p.run.elapsed.as_secs_f64())];
        cells.extend([p.run.ok(), p.refused(), p.errors()].map(|count| count.to_string()));
        cells.push(format!("{:.2}", p.pairs_per_s()));
        cells.extend([l.p50, l.p95, l.p99, l.mean].map(|t| f3(ms(t))));
        let busy_share = busy / cpu.wall.as_secs_f64().max(1e-9);
        cells.extend([cpu.server_cores, cpu.server_system_cores, cpu.bench_cores, p.other_cores(), busy_share].map(f3));
        let per_batch = format!("{:.2}", inputs / batches.max(1.0));
        cells.extend([batches.to_string(), per_batch, f3(busy * 1e3 / inputs.max(1.0)), refused.to_string()]);
        cells.extend(p.tally[1..].iter().map(|&ns| f3(ns as f64 / 1e6 / p.run.ok().max(1) as f64)));
        table.row(cells);
    }
    table
}
