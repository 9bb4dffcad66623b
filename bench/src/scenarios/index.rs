//! index: the vector index alone, no server and no model, so that its share of a search is judged apart: exact search
//! (on one thread and on two) and HNSW (build, recall@10 against exact, latency per `ef_search`, and the widths the
//! server picks by measured recall at its default `--hnsw-target-recall`, at start on its own vectors and then on the
//! 200 queries it answered, with the recall the bench's queries get). Latency is of one query at a time; q/s of searchers sharing the index behind an `RwLock`, as in the server. The vectors are
//! clustered like real embeddings; the queries continue the same generator (new texts on known topics). With
//! `--dataset`, the width is also picked on the vectors of a real corpus: a BEIR folder's documents and queries embedded
//! by the server at its default flags: the first 200 judged queries are the ones the server answered, the rest are
//! measured (recall@10 against exact search, p50).

use std::{
    fmt::Display,
    sync::RwLock,
    time::{Duration, Instant},
};

use embedwire_bench::{
    beir::{self, Dataset},
    latency::{LatencySummary, ms},
    server_process::ServerProcess,
    options::{Common, at_least_one},
    report::{Bound, Report, Row, Table},
};
use anyhow::Context;
use embedwire_server::index::recall::{PROBE_QUERIES, pick_ef};
use embedwire_server::index::{ChunkId, IndexKind, IndexParams, ScanQuery, VectorIndex, synthetic::Clustered};

/// Exact search p50 (search step alone), judged up to this many stored vectors.
const EXACT_P50_MS: f64 = 5.0;
const EXACT_TARGET_MAX_SIZE: usize = 100_000;
/// HNSW recall@10 against exact search, and p50, at every size.
const HNSW_MIN_RECALL: f64 = 0.95;
const HNSW_P50_MS: f64 = 5.0;
/// The server's default `--hnsw-target-recall`, and the bounds on the width it picks: recall@10 of the
/// bench's queries and p50, up to 100k vectors and at 1M.
const TARGET_RECALL: f64 = 0.99;
const PICKED_BOUNDS: [(usize, f64, f64); 2] = [(100_000, 0.99, 0.4), (1_000_000, 0.95, 1.0)];
/// HNSW build time, judged at this many vectors; smaller builds are extrapolated to it.
const HNSW_BUILD_SECS: f64 = 600.0;
const HNSW_BUILD_TARGET_SIZE: usize = 1_000_000;
/// Hits asked of every search.
const K: usize = 10;
/// Untimed searches first, so page faults and cold caches of the first queries do not count.
const WARMUP_QUERIES: usize = 5;
/// Queries timed one at a time: full, --quick.
const QUERIES: (usize, usize) = (200, 50);
/// Searchers sharing the index in the throughput runs (of --duration-secs each).
const SEARCHERS: usize = 2;
/// Queries of one [`VectorIndex::search_many`]: the concurrent searches of a full batch of the gateway benchmark's
/// 16 callers, whose queries the model embeds together and the server scans together.
const TOGETHER: usize = 16;
/// The vectors: the default model's dimension, around this many cluster centers, with noise of this norm added to a
/// center (0.9: cosine ~0.75 to the center), mostly along this many directions per cluster (its intrinsic dimension;
/// 0 would be isotropic noise in all dimensions, the worst case for HNSW).
const DIM: usize = 384;
const CLUSTERS: usize = 1000;
const SPREAD: f32 = 0.9;
const NOISE_RANK: usize = 16;
const SEED: u64 = 42;

/// Options of the index scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Collection sizes, comma-separated [default: 100000,1000000; --quick: 5000].
    #[arg(long, env = "INDEX_BENCH_SIZES", value_delimiter = ',', value_parser = at_least_one::<usize>())]
    pub sizes: Vec<usize>,
    /// A BEIR-format folder (corpus.jsonl, queries.jsonl, qrels/train.tsv) whose documents and judged queries the
    /// server embeds, to pick the width on real vectors too (e.g. ../shared/data/scifact-train) [default: none].
    #[arg(long)]
    pub dataset: Option<std::path::PathBuf>,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let defaults = IndexParams::default();
    let sizes = if args.sizes.is_empty() { common.pick(vec![100_000, 1_000_000], vec![5_000]) } else { args.sizes };
    // Fixed widths, after the server's picked one (which also gets the throughput run).
    let fixed_widths = common.pick(vec![64, 128, 256, 512], vec![64]);
    let (queries, run_time) = (common.pick(QUERIES.0, QUERIES.1), common.duration(3.0, 0.5));
    let (m, efc) = (defaults.m, defaults.ef_construction);
    let mut report = Report::new(common.results(""), "index_bench")?;
    println!("index: sizes {sizes:?}, noise rank {NOISE_RANK}, {queries} queries");

    let mut figures: Vec<(usize, Row)> = Vec::new();
    for &size in &sizes {
        let mut generator = Clustered::with_noise_rank(SEED, DIM, CLUSTERS, SPREAD, NOISE_RANK);
        let rows = generator.rows(size);
        let queries: Vec<Vec<f32>> = (0..queries).map(|_| generator.next_vector()).collect();
        let batch: Vec<(ChunkId, &[f32])> =
            rows.chunks_exact(DIM).enumerate().map(|(i, row)| (i as ChunkId, row)).collect();
        // As the server loads at start.
        let load = |kind, params| -> anyhow::Result<(VectorIndex, f64)> {
            let (started, mut index) = (Instant::now(), VectorIndex::new(kind, DIM, params)?);
            index.extend(&batch)?;
            Ok((index, started.elapsed().as_secs_f64()))
        };
        let mut add = |row: Row| figures.push((size, row));
        let mut truth = Vec::new();
        for scan_threads in [1, 2] {
            let (index, load_secs) = load(IndexKind::Exact, IndexParams { scan_threads, ..defaults })?;
            let (latency, hits) = one_at_a_time(&index, &queries)?;
            let grouped = ms(scanned_together(&index, &queries)?);
            let qps = throughput(index, &queries, run_time)?;
            let (p50, scan) = (ms(latency.p50), format!("scan x{scan_threads}"));
            println!("size {size}: exact, {scan}: loaded in {load_secs:.2} s, p50 {p50:.2} ms, {qps:.0} q/s");
            println!("size {size}: exact, {scan}: {TOGETHER} queries scanned together: {grouped:.3} ms a query");
            add(figure(format!("exact ms a query, {TOGETHER} scanned together ({scan})"), grouped, "ms", 3, None));
            add(figure(format!("exact together / one at a time, p50 ({scan})"), grouped / p50, "x", 2, None));
            truth = hits;
            let p50_target = (size <= EXACT_TARGET_MAX_SIZE).then_some(Bound::AtMost(EXACT_P50_MS));
            add(figure(format!("exact p50 ({scan})"), p50, "ms", 2, p50_target));
            add(figure(format!("exact p95 ({scan})"), ms(latency.p95), "ms", 2, None));
            add(figure(format!("exact q/s, {SEARCHERS} searchers ({scan})"), qps, "q/s", 0, None));
            add(figure(format!("exact load ({scan})"), load_secs, "s", 2, None));
        }
        let (mut index, build) = load(IndexKind::Hnsw, defaults)?;
        println!("size {size}: hnsw built in {build:.1} s (m {m}, ef_construction {efc})");
        // Smaller builds scaled as n log n: each insertion searches a graph growing logarithmically deep.
        let n_log_n = |n: usize| n as f64 * (n as f64).ln();
        let extrapolated = build * n_log_n(HNSW_BUILD_TARGET_SIZE) / n_log_n(size.max(2));
        let bound = (size >= HNSW_BUILD_TARGET_SIZE).then_some(Bound::AtMost(HNSW_BUILD_SECS));
        let mut build_row = figure(format!("hnsw build (m {m}, efc {efc})"), build, "s", 1, bound);
        if bound.is_none() {
            // With the measurement: a note prints only after PASS/MISS.
            build_row.measured += &format!(" (~{extrapolated:.0} s at {HNSW_BUILD_TARGET_SIZE}, n log n)");
        }
        add(build_row);
        // As the server picks it (`--hnsw-target-recall`): at start on a sample of the stored vectors, then on the
        // last 200 queries it answered (other queries of the same generator than the ones measured here).
        let started = Instant::now();
        let at_start =
            pick_ef(&|work| work(&index), TARGET_RECALL, Vec::new()).context("an HNSW index of vectors has a pick")?;
        let pick_secs = started.elapsed().as_secs_f64();
        let answered: Vec<Vec<f32>> = (0..PROBE_QUERIES).map(|_| generator.next_vector()).collect();
        let picked = pick_ef(&|work| work(&index), TARGET_RECALL, answered).context("a pick on queries")?;
        for (pick, when) in [(at_start, "at start, on stored vectors"), (picked, "on 200 answered queries")] {
            println!(
                "size {size}: picked ef_search {} {when} (its estimate of recall@10 {:.4}, target {TARGET_RECALL})",
                pick.ef, pick.recall
            );
        }
        println!("size {size}: a pick takes {pick_secs:.1} s");
        add(figure(format!("hnsw start ef (stored vectors, target {TARGET_RECALL})"), at_start.ef as f64, "", 0, None));
        add(figure("hnsw start ef: estimated recall@10".into(), at_start.recall, "", 4, None));
        add(figure(format!("hnsw picked ef (target {TARGET_RECALL}, answered queries)"), picked.ef as f64, "", 0, None));
        add(figure("hnsw picked ef: estimated recall@10".into(), picked.recall, "", 4, None));
        add(figure("hnsw picked ef: time to pick".into(), pick_secs, "s", 1, None));
        // Each width once: the picked one first (its rows carry the target), then the start pick, then the rest.
        let mut ef_searches: Vec<usize> = Vec::new();
        for ef in [picked.ef, at_start.ef].into_iter().chain(fixed_widths.iter().copied()) {
            if !ef_searches.contains(&ef) {
                ef_searches.push(ef);
            }
        }
        let mut settings = Vec::new();
        for &ef in &ef_searches {
            index.set_ef_search(ef);
            let (latency, hits) = one_at_a_time(&index, &queries)?;
            let recall = recall_at(&truth, &hits);
            println!("size {size}: hnsw ef_search {ef}: recall@{K} {recall:.4}, p50 {:.2} ms", ms(latency.p50));
            settings.push((ef, latency, recall));
        }
        // At the picked width; the run consumes the index.
        index.set_ef_search(ef_searches[0]);
        let mut qps = Some(throughput(index, &queries, run_time)?);
        let picked_bound = PICKED_BOUNDS.iter().find(|(up_to, _, _)| size <= *up_to);
        for (position, (ef, latency, recall)) in settings.into_iter().enumerate() {
            let name = match position {
                0 => format!("picked ef {ef}"),
                _ if ef == at_start.ef => format!("start ef {ef}"),
                _ => format!("ef {ef}"),
            };
            let (recall_bound, p50_bound) = match (position, picked_bound) {
                (0, Some(&(_, recall, p50))) => (recall, p50),
                _ => (HNSW_MIN_RECALL, HNSW_P50_MS),
            };
            add(figure(format!("hnsw recall@10 ({name})"), recall, "", 4, Some(Bound::AtLeast(recall_bound))));
            add(figure(format!("hnsw p50 ({name})"), ms(latency.p50), "ms", 2, Some(Bound::AtMost(p50_bound))));
            add(figure(format!("hnsw p95 ({name})"), ms(latency.p95), "ms", 2, None));
            if let Some(qps) = qps.take() {
                add(figure(format!("hnsw q/s, {SEARCHERS} searchers ({name})"), qps, "q/s", 0, None));
            }
        }
    }

    if let Some(dir) = &args.dataset {
        let (size, rows) = real_corpus(common, dir)?;
        figures.extend(rows.into_iter().map(|row| (size, row)));
    }

    let mut table = Table::new("figure,size,value,unit,target,result");
    let names = ["quick", "dim", "clusters", "spread", "noise_rank", "seed", "queries", "searchers"];
    let values: [&dyn Display; 8] = [&common.quick, &DIM, &CLUSTERS, &SPREAD, &NOISE_RANK, &SEED, &queries, &SEARCHERS];
    for (name, value) in names.into_iter().zip(values) {
        table.row([format!("setup {name}").as_str(), "", &value.to_string(), "", "", ""]);
    }
    for (size, figure) in figures {
        let target = figure.target.as_ref().map_or("", |(_, text)| text.as_str());
        let result = figure.passes().map_or("", |pass| if pass { "PASS" } else { "MISS" });
        let (size_text, value) = (size.to_string(), format!("{:.4}", figure.value));
        table.row([figure.figure.as_str(), &size_text, &value, figure.unit, target, result]);
        report.figure(Row { measured: format!("{} @ {size}", figure.measured), ..figure });
    }
    report.table("index_bench.csv", &table)?;
    report.finish()
}

/// A figure, judged when `bound` is given; `value` printed to `decimals`.
fn figure(figure: String, value: f64, unit: &'static str, decimals: usize, bound: Option<Bound>) -> Row {
    let measured = format!("{value:.decimals$} {unit}").trim_end().to_string();
    let target = bound.map(|bound| match bound {
        Bound::AtLeast(limit) => (bound, format!(">= {limit} {unit}")),
        Bound::AtMost(limit) => (bound, format!("<= {limit} {unit}")),
    });
    Row { target, ..Row::info(figure, value, unit, measured) }
}

/// Every query once, each `search` call timed; the timings and each query's hit ids.
fn one_at_a_time(index: &VectorIndex, queries: &[Vec<f32>]) -> anyhow::Result<(LatencySummary, Vec<Vec<ChunkId>>)> {
    for query in queries.iter().take(WARMUP_QUERIES) {
        index.search(query, K, None, None)?;
    }
    let (mut samples, mut hits) = (Vec::with_capacity(queries.len()), Vec::with_capacity(queries.len()));
    for query in queries {
        let started = Instant::now();
        let found = index.search(query, K, None, None)?;
        samples.push(started.elapsed());
        hits.push(found.into_iter().map(|(id, _)| id).collect());
    }
    Ok((LatencySummary::from_samples(samples), hits))
}

/// The median time a query of [`TOGETHER`] unfiltered searches scanned in one [`VectorIndex::search_many`], each
/// answer checked against the same search alone.
fn scanned_together(index: &VectorIndex, queries: &[Vec<f32>]) -> anyhow::Result<Duration> {
    let mut per_query = Vec::new();
    for group in queries.chunks_exact(TOGETHER) {
        let asked: Vec<ScanQuery<'_>> = group.iter().map(|q| ScanQuery { vector: q, k: K, min_score: None }).collect();
        let started = Instant::now();
        let answers = index.search_many(&asked);
        per_query.push(started.elapsed() / TOGETHER as u32);
        for (query, answer) in group.iter().zip(answers) {
            anyhow::ensure!(answer? == index.search(query, K, None, None)?, "a search scanned together answered otherwise");
        }
    }
    per_query.sort();
    per_query.get(per_query.len() / 2).copied().context("fewer queries than one group")
}

/// Queries per second of [`SEARCHERS`] threads searching for `run`, each cycling through the queries from its own
/// offset, a read lock per search as in the server.
fn throughput(index: VectorIndex, queries: &[Vec<f32>], run: Duration) -> anyhow::Result<f64> {
    let (index, started) = (RwLock::new(index), Instant::now());
    let search = |searcher: usize| -> anyhow::Result<usize> {
        let mut done = 0;
        for query in queries.iter().cycle().skip(searcher * queries.len() / SEARCHERS) {
            if started.elapsed() >= run {
                break;
            }
            index.read().expect("no writer panics").search(query, K, None, None)?;
            done += 1;
        }
        Ok(done)
    };
    let done = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..SEARCHERS).map(|searcher| scope.spawn(move || search(searcher))).collect();
        workers.into_iter().map(|worker| worker.join().expect("searcher panicked")).sum::<anyhow::Result<usize>>()
    })?;
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

/// The share of the true top k (from exact search) that `found` contains.
fn recall_at(truth: &[Vec<ChunkId>], found: &[Vec<ChunkId>]) -> f64 {
    let hits: usize = truth
        .iter()
        .zip(found)
        .map(|(truth, found)| found.iter().take(K).filter(|id| truth[..truth.len().min(K)].contains(id)).count())
        .sum();
    let expected: usize = truth.iter().map(|t| t.len().min(K)).sum();
    if expected == 0 { 1.0 } else { hits as f64 / expected as f64 }
}

/// The width picked on a real corpus: every document of `dir` embedded whole by the server (default flags, the
/// model's truncation), the judged queries as queries; their recall@10 at the picked width against exact search, and
/// its p50. Returns the corpus size and the rows.
fn real_corpus(common: &Common, dir: &std::path::Path) -> anyhow::Result<(usize, Vec<Row>)> {
    let dataset = Dataset::read(dir, "train")?;
    let (documents, queries) = tokio::runtime::Runtime::new()?.block_on(async {
        let (server, _) = ServerProcess::start(&common.server_command(common.server_binary()?, vec![])).await?;
        let channel = server.connect().await?;
        let texts: Vec<String> = dataset.corpus.iter().map(|d| d.full_text()).collect();
        let documents = beir::embed_texts(&channel, &texts).await?;
        let texts: Vec<String> = dataset.queries.iter().map(|q| q.text.clone()).collect();
        let queries = beir::embed_texts(&channel, &texts).await?;
        server.stop().await?;
        anyhow::Ok((documents, queries))
    })?;
    let dim = documents.first().context("an empty corpus")?.len();
    let batch: Vec<(ChunkId, &[f32])> = documents.iter().enumerate().map(|(i, v)| (i as ChunkId, v.as_slice())).collect();
    let mut exact = VectorIndex::new(IndexKind::Exact, dim, IndexParams::default())?;
    exact.extend(&batch)?;
    let (_, truth) = one_at_a_time(&exact, &queries)?;
    let mut index = VectorIndex::new(IndexKind::Hnsw, dim, IndexParams::default())?;
    index.extend(&batch)?;
    let name = dir.file_name().map_or("dataset".into(), |n| n.to_string_lossy().into_owned());
    // The server's two picks: at start on its own vectors, then on the first 200 queries it answered; both judged
    // on the queries after those 200.
    let answered = queries.get(..PROBE_QUERIES).context("fewer queries than a probe takes")?.to_vec();
    let (later, later_truth) = (&queries[PROBE_QUERIES..], &truth[PROBE_QUERIES..]);
    let at_start = pick_ef(&|work| work(&index), TARGET_RECALL, Vec::new()).context("an HNSW index has a pick")?;
    let picked = pick_ef(&|work| work(&index), TARGET_RECALL, answered).context("a pick on queries")?;
    let (_, recall_bound, p50_bound) = PICKED_BOUNDS[0];
    let mut rows = Vec::new();
    for (pick, label) in [(at_start, "start ef (stored vectors)"), (picked, "picked ef (answered queries)")] {
        index.set_ef_search(pick.ef);
        let (latency, hits) = one_at_a_time(&index, later)?;
        let recall = recall_at(later_truth, &hits);
        println!(
            "{name}: {} documents, {} later queries: {label} {} (estimate {:.4}); their recall@10 {recall:.4}, p50 {:.2} ms",
            documents.len(),
            later.len(),
            pick.ef,
            pick.recall,
            ms(latency.p50)
        );
        rows.extend([
            figure(format!("{name}: hnsw {label}, target {TARGET_RECALL}"), pick.ef as f64, "", 0, None),
            figure(format!("{name}: hnsw {label}: estimated recall@10"), pick.recall, "", 4, None),
            figure(format!("{name}: hnsw recall@10 of later queries ({label})"), recall, "", 4, Some(Bound::AtLeast(recall_bound))),
            figure(format!("{name}: hnsw p50 ({label})"), ms(latency.p50), "ms", 2, Some(Bound::AtMost(p50_bound))),
        ]);
    }
    Ok((documents.len(), rows))
}
