//! The figures against their targets: the final table and `search_bench.csv`.
//!
//! Both targets are ratios to Embed measured in the same run on the same texts, so
//! a busy machine moves both sides together.

use std::path::{Path, PathBuf};

use anyhow::Context;
use embedwire_bench::cpu::CpuUse;
use embedwire_bench::latency::{LatencySummary, ms};
use embedwire_bench::load::LoadResult;
use embedwire_bench::targets::{self, Bound, Row};

use crate::embed_corpus::EmbedCorpusRun;
use crate::padding::ModelWork;
use embedwire_bench::ingest::IngestRun;

/// Ingest rate (documents/s to COMPLETED) at least this fraction of the Embed rate
/// (texts/s) for the same texts.
const MIN_INGEST_RATIO: f64 = 0.85;
/// Search rate at concurrency 16 at least this fraction of the Embed rate for the
/// same query texts at the same concurrency.
const MIN_SEARCH_RATIO: f64 = 0.90;
/// Busiest server threads listed per phase in the CSV.
const THREADS_IN_CSV: usize = 6;

/// How the run was set up, recorded next to its figures.
#[derive(Debug, Clone)]
pub struct RunSetup {
    pub quick: bool,
    pub intra_op_threads: usize,
    pub embed_batch: usize,
    pub embed_clients: usize,
    pub ingest_batch: usize,
    pub clients: usize,
    pub top_k: u32,
    /// Extra server flags (the variant measured).
    pub server_args: Vec<String>,
}

/// What the corpus was.
#[derive(Debug, Clone)]
pub struct CorpusSummary {
    pub documents: usize,
    pub mean_words: f64,
    pub second_ingest_documents: usize,
    pub queries: usize,
    /// Docstrings extracted, eligible paragraphs and query sentences, for the record.
    pub docstrings: usize,
    pub paragraphs: usize,
    pub query_candidates: usize,
}

/// What the index held after an ingest.
#[derive(Debug, Clone, Copy)]
pub struct IndexCounts {
    pub documents: u64,
    pub chunks: u64,
    pub unique_vectors: u64,
}

/// The model tokens of the corpus on each path, estimated (see [`crate::padding`]).
#[derive(Debug, Clone, Copy)]
pub struct ModelWorkEstimate {
    pub embed: ModelWork,
    pub ingest: ModelWork,
    /// Ingest if the bulk path sorted by length: what a server change could save.
    pub ingest_sorted: ModelWork,
}

impl std::fmt::Display for ModelWorkEstimate {
    /// `Embed 1060k (1.51x real) in 157 batches, Ingest 1419k (2.03x) in 822, ...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kilo = |work: &ModelWork| work.padded_tokens as f64 / 1e3;
        write!(
            f,
            "Embed {:.0}k ({:.2}x real) in {} batches, Ingest {:.0}k ({:.2}x) in {}, Ingest if sorted {:.0}k ({:.2}x)",
            kilo(&self.embed),
            self.embed.padding_factor(),
            self.embed.batches,
            kilo(&self.ingest),
            self.ingest.padding_factor(),
            self.ingest.batches,
            kilo(&self.ingest_sorted),
            self.ingest_sorted.padding_factor()
        )
    }
}

/// A load run and where the CPU went during it.
#[derive(Debug, Clone)]
pub struct Measured<T> {
    pub run: T,
    pub cpu: CpuUse,
}

/// Every figure of one run.
#[derive(Debug, Clone)]
pub struct Results {
    pub setup: RunSetup,
    pub corpus: CorpusSummary,
    /// Step 2a: the corpus through Embed.
    pub embed_corpus: Measured<EmbedCorpusRun>,
    /// Step 2b: the corpus through Ingest, on a fresh server.
    pub ingest: Measured<IngestRun>,
    pub index: IndexCounts,
    /// Estimated model tokens of the two paths.
    pub model_work: ModelWorkEstimate,
    /// Step 3: Search and Embed at the same concurrency, one query text per call.
    pub search: Measured<LoadResult>,
    pub embed_queries: Measured<LoadResult>,
    /// Step 4: one client searching, idle and while a second ingest runs.
    pub idle_search: LoadResult,
    pub busy_search: Measured<LoadResult>,
    pub second_ingest: IngestRun,
}

fn latency_text(l: &LatencySummary) -> String {
    format!("{:.1} / {:.1} / {:.1} ms", ms(l.p50), ms(l.p95), ms(l.p99))
}

fn cpu_text(cpu: &CpuUse) -> String {
    format!("{:.2} ({:.2} kernel) / {:.2} cores", cpu.server_cores, cpu.server_system_cores, cpu.bench_cores)
}

/// Work per second of server CPU: on a machine shared with other jobs, the server
/// gets different shares of the cores in different phases, and this evens it out.
fn per_core_second(rate: f64, cpu: &CpuUse) -> f64 {
    rate / cpu.server_cores.max(1e-9)
}

/// A row comparing two rates per server CPU-second (context for a target that
/// compares the plain rates).
fn per_cpu_row(figure: String, (rate, cpu): (f64, &CpuUse), (base_rate, base_cpu): (f64, &CpuUse)) -> Row {
    let (value, base) = (per_core_second(rate, cpu), per_core_second(base_rate, base_cpu));
    Row::info(figure, value / base, "x", format!("{:.2} x ({value:.1} vs {base:.1} per core-s)", value / base))
}

/// The rows of the printed table.
fn rows(results: &Results) -> Vec<Row> {
    let setup = &results.setup;
    let corpus = &results.corpus;
    let embed_rate = results.embed_corpus.run.rate();
    let ingest = &results.ingest.run;
    let ingest_rate = ingest.rate();
    let index = results.index;
    let work = results.model_work;
    let search_rate = results.search.run.rate();
    let embed_one_rate = results.embed_queries.run.rate();
    let (idle, busy) = (&results.idle_search.latency, &results.busy_search.run.latency);
    let second = &results.second_ingest;
    vec![
        Row::info(
            "corpus documents",
            corpus.documents as f64,
            "documents",
            format!("{} ({:.1} words avg)", corpus.documents, corpus.mean_words),
        ),
        Row::info(
            format!("Embed corpus ({}/call, {} clients)", setup.embed_batch, setup.embed_clients),
            embed_rate,
            "texts/s",
            format!("{embed_rate:.1} texts/s"),
        ),
        Row::judged(
            format!("Ingest corpus ({} docs/call, to COMPLETED)", setup.ingest_batch),
            ingest_rate,
            "documents/s",
            format!("{ingest_rate:.1} docs/s"),
            Bound::AtLeast(MIN_INGEST_RATIO * embed_rate),
            format!(">= {MIN_INGEST_RATIO:.2} x Embed ({:.1})", MIN_INGEST_RATIO * embed_rate),
        )
        .with_note(format!("{:.2} x", ingest_rate / embed_rate)),
        Row::info(
            "index after ingest: chunks",
            index.chunks as f64,
            "chunks",
            format!("{} chunks / {} docs", index.chunks, index.documents),
        ),
        per_cpu_row(
            "Ingest / Embed per server CPU-second".into(),
            (ingest_rate, &results.ingest.cpu),
            (embed_rate, &results.embed_corpus.cpu),
        ),
        Row::info(
            "padded tokens est. Embed/Ingest/sorted",
            work.ingest.padded_tokens as f64 / work.embed.padded_tokens.max(1) as f64,
            "x",
            format!(
                "{:.2}x / {:.2}x / {:.2}x real ({:.0}k); Ingest {:.2}x Embed",
                work.embed.padding_factor(),
                work.ingest.padding_factor(),
                work.ingest_sorted.padding_factor(),
                work.embed.real_tokens as f64 / 1e3,
                work.ingest.padded_tokens as f64 / work.embed.padded_tokens.max(1) as f64
            ),
        ),
        Row::info(
            "CPU Embed corpus: server / bench",
            results.embed_corpus.cpu.server_cores,
            "cores",
            cpu_text(&results.embed_corpus.cpu),
        ),
        Row::info(
            "CPU Ingest: server / bench",
            results.ingest.cpu.server_cores,
            "cores",
            cpu_text(&results.ingest.cpu),
        ),
        Row::judged(
            format!("Search c={} (top_k {})", setup.clients, setup.top_k),
            search_rate,
            "searches/s",
            format!("{search_rate:.1} searches/s"),
            Bound::AtLeast(MIN_SEARCH_RATIO * embed_one_rate),
            format!(">= {MIN_SEARCH_RATIO:.2} x Embed c={} ({:.1})", setup.clients, MIN_SEARCH_RATIO * embed_one_rate),
        )
        .with_note(format!("{:.2} x", search_rate / embed_one_rate)),
        per_cpu_row(
            "Search / Embed per server CPU-second".into(),
            (search_rate, &results.search.cpu),
            (embed_one_rate, &results.embed_queries.cpu),
        ),
        Row::info(
            format!("Search c={} p50 / p95 / p99", setup.clients),
            ms(results.search.run.latency.p50),
            "ms",
            latency_text(&results.search.run.latency),
        ),
        Row::info(
            format!("Embed c={} (1 text)", setup.clients),
            embed_one_rate,
            "texts/s",
            format!("{embed_one_rate:.1} texts/s"),
        ),
        Row::info(
            format!("Embed c={} p50 / p95 / p99", setup.clients),
            ms(results.embed_queries.run.latency.p50),
            "ms",
            latency_text(&results.embed_queries.run.latency),
        ),
        Row::info(
            "CPU Search: server / bench",
            results.search.cpu.server_cores,
            "cores",
            cpu_text(&results.search.cpu),
        ),
        Row::info(
            "CPU Embed queries: server / bench",
            results.embed_queries.cpu.server_cores,
            "cores",
            cpu_text(&results.embed_queries.cpu),
        ),
        Row::info("Search c=1 idle p50 / p95 / p99", ms(idle.p50), "ms", latency_text(idle)),
        Row::info(
            "Search c=1 during ingest p50/p95/p99",
            ms(busy.p50),
            "ms",
            format!(
                "{} ({:.1}x / {:.1}x idle p50 / p99)",
                latency_text(busy),
                ratio(busy.p50, idle.p50),
                ratio(busy.p99, idle.p99)
            ),
        ),
        Row::info(
            format!("second ingest ({} docs) under search", second.documents),
            second.rate(),
            "documents/s",
            format!("{:.1} docs/s ({:.1} s)", second.rate(), second.completed.as_secs_f64()),
        ),
    ]
}

fn ratio(a: std::time::Duration, b: std::time::Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// Rows that only the CSV carries: the setup, every count and percentile, and the
/// server's busiest threads in each phase.
fn detail_rows(results: &Results) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut info = |figure: String, value: f64, unit: &'static str| {
        rows.push(Row::info(figure, value, unit, String::new()));
    };
    let setup = &results.setup;
    info("setup quick".into(), f64::from(u8::from(setup.quick)), "bool");
    info("setup intra_op_threads".into(), setup.intra_op_threads as f64, "threads");
    info("setup embed_batch".into(), setup.embed_batch as f64, "texts");
    info("setup embed_clients".into(), setup.embed_clients as f64, "clients");
    info("setup ingest_batch".into(), setup.ingest_batch as f64, "documents");
    info("setup clients".into(), setup.clients as f64, "clients");
    info(format!("setup server_args [{}]", setup.server_args.join(" ")), setup.server_args.len() as f64, "flags");
    let corpus = &results.corpus;
    info("corpus docstrings".into(), corpus.docstrings as f64, "docstrings");
    info("corpus eligible paragraphs".into(), corpus.paragraphs as f64, "paragraphs");
    info("corpus second ingest documents".into(), corpus.second_ingest_documents as f64, "documents");
    info("corpus queries".into(), corpus.queries as f64, "queries");
    info("corpus query sentences".into(), corpus.query_candidates as f64, "sentences");
    let embed = &results.embed_corpus.run;
    info("embed_corpus calls".into(), embed.calls as f64, "calls");
    info("embed_corpus seconds".into(), embed.elapsed.as_secs_f64(), "s");
    for (name, run) in [("ingest", &results.ingest.run), ("second_ingest", &results.second_ingest)] {
        info(format!("{name} documents"), run.documents as f64, "documents");
        info(format!("{name} calls"), run.calls as f64, "calls");
        info(format!("{name} stored seconds"), run.stored.as_secs_f64(), "s");
        info(format!("{name} completed seconds"), run.completed.as_secs_f64(), "s");
    }
    info("index documents".into(), results.index.documents as f64, "documents");
    info("index unique vectors".into(), results.index.unique_vectors as f64, "vectors");
    let work = results.model_work;
    for (name, work) in [("embed", work.embed), ("ingest", work.ingest), ("ingest_sorted", work.ingest_sorted)] {
        info(format!("model work {name} real tokens"), work.real_tokens as f64, "tokens");
        info(format!("model work {name} padded tokens"), work.padded_tokens as f64, "tokens");
        info(format!("model work {name} batches"), work.batches as f64, "batches");
    }
    let loads = [
        ("search", &results.search.run),
        ("embed_queries", &results.embed_queries.run),
        ("search_idle_c1", &results.idle_search),
        ("search_during_ingest_c1", &results.busy_search.run),
    ];
    for (name, load) in loads {
        info(format!("{name} rate"), load.rate(), "calls/s");
        info(format!("{name} calls"), load.calls as f64, "calls");
        info(format!("{name} seconds"), load.elapsed.as_secs_f64(), "s");
        let l = &load.latency;
        for (stat, value) in [("mean", l.mean), ("p50", l.p50), ("p95", l.p95), ("p99", l.p99), ("max", l.max)] {
            info(format!("{name} {stat}"), ms(value), "ms");
        }
    }
    let phases = [
        ("embed_corpus", &results.embed_corpus.cpu),
        ("ingest", &results.ingest.cpu),
        ("search", &results.search.cpu),
        ("embed_queries", &results.embed_queries.cpu),
        ("search_during_ingest", &results.busy_search.cpu),
    ];
    for (name, cpu) in phases {
        info(format!("cpu {name} server"), cpu.server_cores, "cores");
        info(format!("cpu {name} server kernel"), cpu.server_system_cores, "cores");
        info(format!("cpu {name} bench"), cpu.bench_cores, "cores");
        for (rank, thread) in cpu.server_threads.iter().take(THREADS_IN_CSV).enumerate() {
            info(format!("cpu {name} thread #{} {}", rank + 1, thread.name), thread.cores, "cores");
        }
    }
    rows
}

/// The final table, as printed.
pub fn table(results: &Results) -> String {
    targets::table(&rows(results))
}

/// Writes `search_bench.csv` into `dir`: the table's rows, then the detail rows;
/// returns its path.
pub fn write_csv(dir: &Path, results: &Results) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("search_bench.csv");
    let mut all = rows(results);
    all.extend(detail_rows(results));
    std::fs::write(&path, targets::summary_csv(&all)).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
