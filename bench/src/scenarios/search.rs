//! search: what the search feature costs next to plain Embed of the same texts, with the real model on real
//! paragraphs. The corpus goes through Embed on one server and through Ingest (to every job COMPLETED) on a second;
//! Search at c=16 runs against Embed of the same queries; an open-loop client's search latency is taken idle and
//! during a second ingest. Both targets are ratios to Embed in the same run, and both comparisons alternate their
//! sides (slice by slice, round by round) so that a change in the machine's load hits both alike. The server's CPU
//! (per thread) and the bench's, and the model's padded tokens per path (estimated), show where the time went.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::Parser;
use embedwire_bench::{
    corpus::{Corpus, CorpusOptions},
    cpu::{CpuUse, CpuWindow},
    ingest::{self, IngestRun},
    latency::{LatencySummary, ms},
    load::{self, LoadResult, Rpc, Stop},
    options::{Common, SearchLoad, connections},
    report::{Report, Row, percentiles},
    server_process::{ServerCommand, ServerProcess},
};
use embedwire_proto::v1::{EmbedRequest, embed_service_client::EmbedServiceClient};
use embedwire_server::ServerConfig;
use tonic::transport::Channel;

/// Ingest documents/s (to COMPLETED) at least this share of Embed's texts/s.
const MIN_INGEST_RATIO: f64 = 0.85;
/// Search at concurrency 16 at least this share of Embed of the same query texts.
const MIN_SEARCH_RATIO: f64 = 0.90;
/// Busiest server threads listed per phase in the CSV.
const THREADS_IN_CSV: usize = 6;
/// Query texts (first sentences of one-line docstrings, not in the corpus).
const QUERIES: usize = 500;
/// Texts per Embed call, and concurrent clients, when embedding the corpus.
const EMBED_BATCH: usize = 64;
const EMBED_CLIENTS: usize = 4;
/// Alternating rounds the concurrent Search and Embed runs are split into.
const ROUNDS: usize = 4;
/// Between the searches of the one-client (open-loop) latency runs.
const LATENCY_INTERVAL: Duration = Duration::from_millis(50);

/// Options of the search scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub corpus: CorpusOptions,
    #[command(flatten)]
    pub load: SearchLoad,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    // Before measuring anything: a failed build should not come after minutes.
    let command = common.server_command(common.server_binary()?, vec![]);
    // The batching limits the server runs with, read as it reads them, for the padding estimate.
    let limits = ServerConfig::try_parse_from(["embedwire-server".to_string()].iter().chain(&common.server_args))?;
    // The second ingest runs while search latency is measured: texts not in the corpus, so that they cost embedding.
    // --quick checks that every figure is produced (bench/tests/quick.rs), not its value: 300
    // documents in two slices do that (1,000 took about 25 s more of a make test).
    let (documents, second) = (common.pick(10_000, 300), common.pick(1_000, 100));
    let corpus = args.corpus.select(documents, second, QUERIES)?;
    println!("search: {documents} documents, {second} for the second ingest, {} queries", corpus.queries.len());
    // search_bench.csv: what it always held, the figures then the details.
    let mut report = Report::new(common.results(""), "search_bench")?.summary_also_as("search_bench.csv");
    tokio::runtime::Runtime::new()?.block_on(measure(common, &args, &command, &corpus, &limits, &mut report))?;
    report.finish()
}

async fn measure(
    common: &Common,
    args: &Args,
    command: &ServerCommand,
    corpus: &Corpus,
    limits: &ServerConfig,
    report: &mut Report,
) -> anyhow::Result<()> {
    // Warm-up texts: corpus-like paragraphs that are not in the corpus.
    let warmup: Arc<[String]> =
        corpus.second_ingest.iter().cycle().take(common.pick(512, 128)).map(|p| p.text.clone()).collect();
    let embed_server = start_warm(args, command, &warmup).await?;
    let server = start_warm(args, command, &warmup).await?;
    let embed_channels = connections(&embed_server, EMBED_CLIENTS.div_ceil(args.load.clients_per_connection)).await?;
    let ingest_channel = server.connect().await?;
    let (mut embeds, mut ingests) = (Vec::new(), Vec::new());
    // Alternating slices of the Embed / Ingest comparison.
    let slice_len = corpus.documents.len().div_ceil(common.pick(5, 2));
    for (slice, paragraphs) in corpus.documents.chunks(slice_len).enumerate() {
        let texts: Arc<[String]> = paragraphs.iter().map(|p| p.text.clone()).collect();
        let embedding = embed_all(&embed_channels, texts);
        let (embed, embed_cpu) = CpuWindow::around(embed_server.pid, embedding).await?;
        let ingesting =
            ingest::ingest(ingest_channel.clone(), paragraphs, ("doc-", slice * slice_len), args.load.ingest_batch);
        let (ingest, ingest_cpu) = CpuWindow::around(server.pid, ingesting).await?;
        let (a, b) = (embed.rate(), ingest.rate());
        println!("slice {}: Embed {a:.1} texts/s, Ingest {b:.1} docs/s: {:.2} x", slice + 1, b / a);
        embeds.push((embed, embed_cpu));
        ingests.push((ingest, ingest_cpu));
    }
    finish(embed_server).await?;
    let (embed, ingest) = (combine(embeds, EmbedCorpus::combine), combine(ingests, IngestRun::combine));
    let control = server.connect().await?;
    let stats = ingest::index_stats(control.clone()).await?;
    println!("index ({}): {} documents, {} chunks", stats.index_kind, stats.document_count, stats.chunk_count);
    let lengths = &embed.0.token_counts;
    let (window, group) = (EMBED_BATCH * EMBED_CLIENTS, limits.ingest_batch_documents);
    let work = [
        model_work(lengths, window, true, limits.max_batch_size, limits.max_batch_tokens),
        model_work(lengths, group, false, limits.max_batch_size, limits.max_bulk_batch_tokens),
        model_work(lengths, group, true, limits.max_batch_size, limits.max_bulk_batch_tokens),
    ];

    let channels = connections(&server, args.load.clients.div_ceil(args.load.clients_per_connection)).await?;
    let queries: Arc<[String]> = corpus.queries.clone().into();
    let search_rpc = Rpc::Search { top_k: args.load.top_k, collection: "" };
    for rpc in [search_rpc, Rpc::Embed] {
        load::run(&channels, args.load.clients, queries.clone(), rpc, Stop::After(common.warmup(2.0, 0.5))).await?;
    }
    let round = common.duration(10.0, 2.0) / ROUNDS as u32;
    let mut sides: [Vec<(LoadResult, CpuUse)>; 2] = Default::default();
    for _ in 0..ROUNDS {
        for (rpc, side) in [search_rpc, Rpc::Embed].into_iter().zip(&mut sides) {
            let running = load::run(&channels, args.load.clients, queries.clone(), rpc, Stop::After(round));
            side.push(CpuWindow::around(server.pid, running).await?);
        }
    }
    let [search, embed_queries] = sides.map(|side| combine(side, LoadResult::combine));
    println!("Search {:.1} /s, Embed {:.1} /s at c={}", search.0.rate(), embed_queries.0.rate(), args.load.clients);

    load::run(std::slice::from_ref(&control), 1, queries.clone(), search_rpc, Stop::Calls(common.pick(50, 10))).await?;
    let paced = |stop| load::run_paced(&control, queries.clone(), search_rpc, stop, LATENCY_INTERVAL);
    let idle = paced(Stop::After(common.duration(10.0, 2.0))).await?;
    // One open-loop client searches from the second ingest's first call to its last job completed.
    let ingest_done = Arc::new(AtomicBool::new(false));
    let (ingest_channel, cpu) = (server.connect().await?, CpuWindow::start(server.pid)?);
    let ingesting = async {
        let result =
            ingest::ingest(ingest_channel, &corpus.second_ingest, ("second-", 0), args.load.ingest_batch).await;
        ingest_done.store(true, Ordering::Release);
        result
    };
    let (second, busy) = tokio::join!(ingesting, paced(Stop::When(ingest_done.clone())));
    let (second, busy) = (second?, (busy?, cpu.finish()?));
    println!("search during ingest: p99 {:.1} ms, idle p99 {:.1} ms", ms(busy.0.latency.p99), ms(idle.latency.p99));
    finish(server).await?;

    let c = args.load.clients;
    let (embed_rate, ingest_rate) = (embed.0.rate(), ingest.0.rate());
    let (search_rate, embed_one) = (search.0.rate(), embed_queries.0.rate());
    let (idle_l, busy_l) = (&idle.latency, &busy.0.latency);
    let words: usize = corpus.documents.iter().map(|p| p.text.split_whitespace().count()).sum();
    let documents = corpus.documents.len();
    let docs_text = format!("{documents} ({:.1} words avg)", words as f64 / documents.max(1) as f64);
    let padded = work[1].padded as f64 / work[0].padded.max(1) as f64;
    let [e, i, sorted] = work.map(|w| w.padded as f64 / w.real.max(1) as f64);
    let padding =
        format!("{e:.2}x / {i:.2}x / {sorted:.2}x real ({:.0}k); Ingest {padded:.2}x Embed", work[0].real as f64 / 1e3);
    let (p50, p99) = (ms(busy_l.p50) / ms(idle_l.p50).max(1e-6), ms(busy_l.p99) / ms(idle_l.p99).max(1e-6));
    let busy_text = format!("{} ({p50:.1}x / {p99:.1}x idle p50 / p99)", percentiles(busy_l));
    let cpu_row = |figure: &str, cpu: &CpuUse| {
        let (server, kernel, bench) = (cpu.server_cores, cpu.server_system_cores, cpu.bench_cores);
        let text = format!("{server:.2} ({kernel:.2} kernel) / {bench:.2} cores");
        Row::info(format!("{figure}: server / bench"), server, "cores", text)
    };
    let latency_row = |figure: String, l: &LatencySummary| Row::info(figure, ms(l.p50), "ms", percentiles(l));
    let index_text = format!("{} chunks / {} docs", stats.chunk_count, stats.document_count);
    let second_text = format!("{:.1} docs/s ({:.1} s)", second.rate(), second.completed.as_secs_f64());
    let ingested = format!("Ingest corpus ({} docs/call, to COMPLETED)", args.load.ingest_batch);
    let searched = format!("Search c={c} (top_k {})", args.load.top_k);
    let embedded = format!("Embed corpus ({EMBED_BATCH}/call, {EMBED_CLIENTS} clients)");
    let second_ingest = format!("second ingest ({} docs) under search", second.documents);
    let embed_c = format!("Embed c={c}");
    report.figures([
        Row::info("corpus documents", documents as f64, "documents", docs_text),
        Row::info(embedded, embed_rate, "texts/s", format!("{embed_rate:.1} texts/s")),
        at_least(ingested, (ingest_rate, "documents/s", "docs/s"), (MIN_INGEST_RATIO, embed_rate, "Embed".into())),
        Row::info("index after ingest: chunks", stats.chunk_count as f64, "chunks", index_text),
        per_cpu_row("Ingest / Embed per server CPU-second", (ingest_rate, &ingest.1), (embed_rate, &embed.1)),
        Row::info("padded tokens est. Embed/Ingest/sorted", padded, "x", padding),
        cpu_row("CPU Embed corpus", &embed.1),
        cpu_row("CPU Ingest", &ingest.1),
        at_least(searched, (search_rate, "searches/s", "searches/s"), (MIN_SEARCH_RATIO, embed_one, embed_c)),
        per_cpu_row("Search / Embed per server CPU-second", (search_rate, &search.1), (embed_one, &embed_queries.1)),
        latency_row(format!("Search c={c} p50 / p95 / p99"), &search.0.latency),
        Row::info(format!("Embed c={c} (1 text)"), embed_one, "texts/s", format!("{embed_one:.1} texts/s")),
        latency_row(format!("Embed c={c} p50 / p95 / p99"), &embed_queries.0.latency),
        cpu_row("CPU Search", &search.1),
        cpu_row("CPU Embed queries", &embed_queries.1),
        latency_row("Search c=1 idle p50 / p95 / p99".into(), idle_l),
        Row::info("Search c=1 during ingest p50/p95/p99", ms(busy_l.p50), "ms", busy_text),
        Row::info(second_ingest, second.rate(), "documents/s", second_text),
    ]);

    // The CSV's further rows: the setup, every count and percentile, the busiest threads.
    for (name, value, unit) in [
        ("quick", f64::from(u8::from(common.quick)), "bool"),
        ("intra_op_threads", common.intra_op_threads as f64, "threads"),
        ("embed_batch", EMBED_BATCH as f64, "texts"),
        ("embed_clients", EMBED_CLIENTS as f64, "clients"),
        ("ingest_batch", args.load.ingest_batch as f64, "documents"),
        ("clients", c as f64, "clients"),
    ] {
        report.setup(name, value, unit);
    }
    let server_args = &common.server_args;
    report.setup(&format!("server_args [{}]", server_args.join(" ")), server_args.len() as f64, "flags");
    for (figure, value, unit) in [
        ("corpus docstrings", corpus.docstrings, "docstrings"),
        ("corpus eligible paragraphs", corpus.paragraphs, "paragraphs"),
        ("corpus second ingest documents", corpus.second_ingest.len(), "documents"),
        ("corpus queries", corpus.queries.len(), "queries"),
        ("corpus query sentences", corpus.query_candidates, "sentences"),
        ("embed_corpus calls", embed.0.calls, "calls"),
    ] {
        report.count(figure, value as f64, unit);
    }
    report.count("embed_corpus seconds", embed.0.elapsed.as_secs_f64(), "s");
    for (name, run) in [("ingest", &ingest.0), ("second_ingest", &second)] {
        report.count(format!("{name} documents"), run.documents as f64, "documents");
        report.count(format!("{name} calls"), run.calls as f64, "calls");
        report.count(format!("{name} stored seconds"), run.stored.as_secs_f64(), "s");
        report.count(format!("{name} completed seconds"), run.completed.as_secs_f64(), "s");
    }
    report.count("index documents", stats.document_count as f64, "documents");
    report.count("index unique vectors", stats.unique_vector_count as f64, "vectors");
    for (name, work) in ["embed", "ingest", "ingest_sorted"].into_iter().zip(work) {
        report.count(format!("model work {name} real tokens"), work.real as f64, "tokens");
        report.count(format!("model work {name} padded tokens"), work.padded as f64, "tokens");
        report.count(format!("model work {name} batches"), work.batches as f64, "batches");
    }
    for (name, load) in [
        ("search", &search.0),
        ("embed_queries", &embed_queries.0),
        ("search_idle_c1", &idle),
        ("search_during_ingest_c1", &busy.0),
    ] {
        report.count(format!("{name} rate"), load.rate(), "calls/s");
        report.count(format!("{name} calls"), load.calls as f64, "calls");
        report.count(format!("{name} seconds"), load.elapsed.as_secs_f64(), "s");
        let l = &load.latency;
        for (stat, value) in [("mean", l.mean), ("p50", l.p50), ("p95", l.p95), ("p99", l.p99), ("max", l.max)] {
            report.count(format!("{name} {stat}"), ms(value), "ms");
        }
    }
    for (name, cpu) in [
        ("embed_corpus", &embed.1),
        ("ingest", &ingest.1),
        ("search", &search.1),
        ("embed_queries", &embed_queries.1),
        ("search_during_ingest", &busy.1),
    ] {
        report.count(format!("cpu {name} server"), cpu.server_cores, "cores");
        report.count(format!("cpu {name} server kernel"), cpu.server_system_cores, "cores");
        report.count(format!("cpu {name} bench"), cpu.bench_cores, "cores");
        for (rank, thread) in cpu.server_threads.iter().take(THREADS_IN_CSV).enumerate() {
            report.count(format!("cpu {name} thread #{} {}", rank + 1, thread.name), thread.cores, "cores");
        }
    }
    Ok(())
}

/// A server with a fresh data directory, `warmup` embedded through it (untimed) so
/// that first-batch allocations stay out of the figures.
async fn start_warm(args: &Args, command: &ServerCommand, warmup: &Arc<[String]>) -> anyhow::Result<ServerProcess> {
    let (server, took) = ServerProcess::start(command).await?;
    println!("server pid {} SERVING after {:.2} s", server.pid, took.as_secs_f64());
    let channels = connections(&server, EMBED_CLIENTS.div_ceil(args.load.clients_per_connection)).await?;
    embed_all(&channels, warmup.clone()).await?;
    Ok(server)
}

/// Prints the server's warnings and errors, if any, then stops it.
async fn finish(server: ServerProcess) -> anyhow::Result<()> {
    for line in server.log_tail().iter().filter(|line| line.contains(" WARN ") || line.contains(" ERROR ")) {
        println!("  server log: {line}");
    }
    server.stop().await
}

/// Runs of several slices or rounds as one, and the CPU over all of them.
fn combine<T>(parts: Vec<(T, CpuUse)>, runs: impl Fn(&[T]) -> T) -> (T, CpuUse) {
    let (parts, cpu): (Vec<T>, Vec<CpuUse>) = parts.into_iter().unzip();
    (runs(&parts), CpuUse::combine(&cpu))
}

/// What embedding a list of texts did; the token counts as the server counted them, one per text, in text order.
#[derive(Debug, Clone)]
struct EmbedCorpus {
    calls: usize,
    elapsed: Duration,
    token_counts: Vec<u32>,
}

impl EmbedCorpus {
    fn rate(&self) -> f64 {
        self.token_counts.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn combine(runs: &[EmbedCorpus]) -> EmbedCorpus {
        EmbedCorpus {
            calls: runs.iter().map(|run| run.calls).sum(),
            elapsed: runs.iter().map(|run| run.elapsed).sum(),
            token_counts: runs.iter().flat_map(|run| run.token_counts.iter().copied()).collect(),
        }
    }
}

/// Every text through Embed in calls of [`EMBED_BATCH`], taken in order from a shared queue by [`EMBED_CLIENTS`]
/// concurrent clients (client k on channel k mod n), the way a client batch job would; fails on the first failed
/// call.
async fn embed_all(channels: &[Channel], texts: Arc<[String]>) -> anyhow::Result<EmbedCorpus> {
    let (calls, next) = (texts.len().div_ceil(EMBED_BATCH), Arc::new(AtomicUsize::new(0)));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..EMBED_CLIENTS {
        let (texts, next) = (texts.clone(), next.clone());
        let mut client = EmbedServiceClient::new(channels[k % channels.len()].clone());
        tasks.spawn(async move {
            let mut answered = Vec::new();
            loop {
                let call = next.fetch_add(1, Ordering::Relaxed);
                if call >= calls {
                    return anyhow::Ok(answered);
                }
                let inputs = texts[call * EMBED_BATCH..((call + 1) * EMBED_BATCH).min(texts.len())].to_vec();
                let count = inputs.len();
                let request = EmbedRequest { inputs, ..Default::default() };
                let response = client.embed(request).await.with_context(|| format!("Embed call {call}"))?.into_inner();
                let (texts_answered, counts) = (response.count, response.token_counts);
                anyhow::ensure!(counts.len() == count, "Embed answered {texts_answered} of {count} texts");
                answered.push((call, counts));
            }
        });
    }
    let mut answered: Vec<_> = tasks.join_all().await.into_iter().collect::<anyhow::Result<Vec<_>>>()?.concat();
    let elapsed = started.elapsed();
    answered.sort_unstable_by_key(|(call, _)| *call);
    Ok(EmbedCorpus { calls, elapsed, token_counts: answered.into_iter().flat_map(|(_, counts)| counts).collect() })
}

/// The model's work for a list of sequence lengths on one path: real tokens, tokens with padding (a batch is padded
/// to its longest sequence), batches. An estimate from Embed's token counts and the server's batching rules, to
/// explain a gap between the Embed and Ingest rates; not a measurement.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct ModelWork {
    real: u64,
    padded: u64,
    batches: usize,
}

/// Cuts the lengths, in groups of `group` (each sorted first if `sort`), into batches of at most `max_size` sequences
/// and `max_tokens` padded tokens, as the batcher does. Embed: concurrent calls fill a window the model thread sorts
/// before cutting. Ingest: the job runner's groups of --ingest-batch-documents, unsorted, under the bulk budget (one
/// chunk per document assumed); sorted, the room a change has.
fn model_work(lengths: &[u32], group: usize, sort: bool, max_size: usize, max_tokens: usize) -> ModelWork {
    let mut work = ModelWork::default();
    for group in lengths.chunks(group.max(1)) {
        let mut group = group.to_vec();
        if sort {
            group.sort_unstable();
        }
        let (mut count, mut longest) = (0u64, 0u64);
        for length in group.into_iter().map(u64::from) {
            if count > 0 && (count == max_size as u64 || (count + 1) * longest.max(length) > max_tokens as u64) {
                (work.padded, work.batches, count, longest) = (work.padded + count * longest, work.batches + 1, 0, 0);
            }
            (count, longest, work.real) = (count + 1, longest.max(length), work.real + length);
        }
        if count > 0 {
            (work.padded, work.batches) = (work.padded + count * longest, work.batches + 1);
        }
    }
    work
}

/// A rate judged against a share of the rate it is compared with.
fn at_least(
    figure: String,
    (rate, unit, short): (f64, &'static str, &str),
    (min, base, what): (f64, f64, String),
) -> Row {
    let target = format!(">= {min:.2} x {what} ({:.1})", min * base);
    let measured = format!("{rate:.1} {short}");
    Row::info(figure, rate, unit, measured).at_least(min * base, target).with_note(format!("{:.2} x", rate / base))
}

/// Two rates per second of server CPU: on a machine shared with other jobs the server
/// gets different shares of the cores in different phases, and this evens it out.
fn per_cpu_row(figure: &str, (rate, cpu): (f64, &CpuUse), (base_rate, base_cpu): (f64, &CpuUse)) -> Row {
    let (value, base) = (rate / cpu.server_cores.max(1e-9), base_rate / base_cpu.server_cores.max(1e-9));
    Row::info(figure, value / base, "x", format!("{:.2} x ({value:.1} vs {base:.1} per core-s)", value / base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorting_saves_padding_and_budgets_cut_batches() {
        let work = |real, padded, batches| ModelWork { real, padded, batches };
        assert_eq!(model_work(&[10, 100, 10, 100], 4, false, 2, 1000), work(220, 400, 2));
        assert_eq!(model_work(&[10, 100, 10, 100], 4, true, 2, 1000), work(220, 220, 2));
        assert_eq!(model_work(&[100, 100, 100], 64, false, 64, 250), work(300, 300, 2));
        assert_eq!(model_work(&[100, 100, 100], 3, true, 64, 1000).batches, 1);
    }
}
