//! retrieval: search quality on a BEIR-format data set (default: ../shared/data/scifact-train), through the server's
//! public gRPC API, per store (embedded; PostgreSQL primary + replica; a 3-node Weaviate cluster) and per mode
//! (vector, keyword, hybrid at the server's default alpha and fusion; on the first store also an alpha and fusion
//! grid, to choose the defaults). Quality is nDCG@10, recall@100 and MRR@10 as BEIR computes them ([`beir`]); cost is
//! the latency of a user's search (top_k 10 with text, one at a time) and ingest documents/s with and without the
//! keyword index (embedded store, the two servers ingesting in turns). Two yardsticks computed outside the server: an
//! exact cosine ranking of whole documents embedded by the same model (Embed), and plain BM25 (k1 0.9, b 0.4) in a
//! few lines of Python (bench/retrieval/bm25_baseline.py). Tune on a train split only.
//!
//! [`beir`]: embedwire_bench::beir

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::Context;
use embedwire_bench::{
    beir::{self, Dataset, Quality},
    child_process::fresh_dir,
    corpus::Paragraph,
    ingest::{self, IngestRun},
    latency::{LatencySummary, ms},
    options::Common,
    report::{Report, Row, Table},
    server_process::ServerProcess,
    store_cluster::{StoreCluster, StoreKind},
};
use embedwire_proto::v1::{
    Fusion, SearchMode, SearchQuery, SearchRequest, search_query, search_service_client::SearchServiceClient,
};
use tonic::transport::Channel;

pub const DEFAULT_DATASET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/scifact-train");
const BM25_BASELINE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/retrieval/bm25_baseline.py");
const PLOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/retrieval/plot.py");
/// Chunks asked per query when measuring quality: enough for 100 distinct documents at a few chunks each.
const QUALITY_TOP_K: u32 = 300;
/// What a user asks, for the latency figures.
const USER_TOP_K: u32 = 10;
/// Hybrid + rerank: the server's scorer rescoring this many candidates (its default `--rerank-candidates`), over the
/// first this many judged queries (with the embedding model as the scorer, every candidate chunk is embedded again:
/// all 809 SciFact train queries at 300 candidates would take an hour here).
const RERANK_TOP_K: u32 = 50;
const RERANK_QUERIES: usize = 200;
/// Documents per Ingest call.
const INGEST_BATCH: usize = 64;
/// Targets: vector mode within this of the exact whole-document ranking; keyword at least the Python BM25 minus
/// this; hybrid at least this above the better of vector and keyword; every store's hybrid within this of embedded.
const VECTOR_TOLERANCE: f64 = 0.005;
const KEYWORD_TOLERANCE: f64 = 0.01;
const HYBRID_GAIN: f64 = 0.03;
const STORE_TOLERANCE: f64 = 0.02;
/// Cost targets: hybrid p50 at most this many times vector p50; ingest with the keyword index at least this share of
/// ingest without.
const HYBRID_P50_RATIO: f64 = 1.5;
const INGEST_RATIO: f64 = 0.9;

/// Options of the retrieval scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// A BEIR-format folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.
    #[arg(long, default_value = DEFAULT_DATASET)]
    pub dataset: PathBuf,
    /// The qrels split to evaluate (tune on train only).
    #[arg(long, default_value = "train")]
    pub split: String,
    /// Stores, comma-separated: embedded, postgres, weaviate [default: all three; --quick: embedded].
    #[arg(long, value_delimiter = ',')]
    pub stores: Vec<String>,
    /// --quick: judged queries of the slice (with every document they judge relevant).
    #[arg(long, default_value_t = 40)]
    pub quick_queries: usize,
    /// --quick: documents of the slice.
    #[arg(long, default_value_t = 400)]
    pub quick_documents: usize,
    /// Also measure hybrid + rerank, with the server's scorer (its cross-encoder when started with
    /// `--server-arg --rerank-model-dir=DIR`, else the embedding model as a bi-encoder).
    #[arg(long)]
    pub rerank: bool,
    /// Only vector, keyword and hybrid at the server's defaults: no tuning grid and no ingest without the keyword
    /// index (a quicker comparison of server settings, e.g. `--server-arg=--chunk-sentence-tolerance-tokens=0`).
    #[arg(long)]
    pub basic: bool,
    /// Documents in the index when latency is measured: after quality is measured on the data set, copies of its
    /// documents (their sentences in reverse order, so new chunks and vectors) are ingested up to this many; 0 or
    /// fewer than the data set: no copies [default: 10000; --quick: 0].
    #[arg(long)]
    pub cost_documents: Option<usize>,
}

/// One way of searching.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Way {
    mode: SearchMode,
    /// None: the server's default.
    alpha: Option<f32>,
    fusion: Fusion,
    rerank: bool,
}

impl Way {
    fn label(&self) -> String {
        let mode = match self.mode {
            SearchMode::Keyword => "keyword",
            SearchMode::Hybrid => "hybrid",
            _ => "vector",
        };
        if self.mode != SearchMode::Hybrid {
            return mode.to_string();
        }
        if self.rerank {
            return "hybrid+rerank".to_string();
        }
        let fusion = if self.fusion == Fusion::ReciprocalRank { "rrf" } else { "relative_score" };
        match self.alpha {
            None => format!("hybrid (default: {fusion})"),
            Some(alpha) => format!("hybrid alpha {alpha:.1} {fusion}"),
        }
    }
}

const VECTOR: Way = Way { mode: SearchMode::Vector, alpha: None, fusion: Fusion::Unspecified, rerank: false };
const KEYWORD: Way = Way { mode: SearchMode::Keyword, alpha: None, fusion: Fusion::Unspecified, rerank: false };
const HYBRID: Way = Way { mode: SearchMode::Hybrid, alpha: None, fusion: Fusion::Unspecified, rerank: false };

/// What one way of searching one store gave.
struct Measured {
    store: String,
    way: Way,
    quality: Quality,
    /// Latency of a user's search (top_k 10, with text).
    latency: LatencySummary,
    /// Documents in the index while latency was measured.
    latency_documents: usize,
    /// Hybrid + rerank only: hybrid's quality on the same queries (the rerank way runs on a subset of them).
    hybrid_on_same_queries: Option<Quality>,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let full = Dataset::read(&args.dataset, &args.split)?;
    let dataset = if common.quick { full.slice(args.quick_queries, args.quick_documents) } else { full };
    let stores =
        if args.stores.is_empty() { common.pick(vec!["embedded", "postgres", "weaviate"], vec!["embedded"]).into_iter().map(String::from).collect() } else { args.stores.clone() };
    for store in &stores {
        anyhow::ensure!(["embedded", "postgres", "weaviate"].contains(&store.as_str()), "--stores: unknown store {store:?}");
    }
    println!(
        "retrieval: {} ({} split): {} documents, {} judged queries; stores {stores:?}",
        args.dataset.display(),
        args.split,
        dataset.corpus.len(),
        dataset.queries.len()
    );
    let mut report = Report::new(common.results("retrieval"), "retrieval")?;
    let bm25 = python_bm25(&dataset, &args.split)?;
    println!("plain BM25 (Python, k1 0.9, b 0.4): nDCG@10 {:.4}", bm25.ndcg_at_10);
    let binary = common.server_binary()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let mut measured = Vec::new();
    let mut exact = None;
    let mut ingest_rows = Vec::new();
    for (position, store) in stores.iter().enumerate() {
        let cluster = match store.as_str() {
            "postgres" => Some(StoreCluster::start(StoreKind::Postgres)?.0),
            "weaviate" => Some(StoreCluster::start(StoreKind::Weaviate(3))?.0),
            _ => None,
        };
        let mut ways =
            if position == 0 && !common.quick && !args.basic { tuning_grid() } else { vec![VECTOR, KEYWORD, HYBRID] };
        // Rerank's quality depends on the candidates and the scorer, not on the store: measured on the first store.
        if args.rerank && position == 0 {
            ways.push(Way { rerank: true, ..HYBRID });
        }
        let cost_documents = args.cost_documents.unwrap_or(common.pick(10_000, 0));
        let result = runtime.block_on(measure_store(
            common,
            &binary,
            store,
            cluster.as_ref(),
            &dataset,
            &ways,
            exact.is_none(),
            !args.basic,
            cost_documents,
        ));
        if let Some(cluster) = cluster {
            cluster.stop()?;
        }
        let (rows, ingests, baseline) = result?;
        exact = exact.or(baseline);
        measured.extend(rows);
        ingest_rows.extend(ingests);
    }
    let exact = exact.context("no exact baseline")?;
    println!("exact whole-document cosine ranking (Embed, outside the server): nDCG@10 {:.4}", exact.ndcg_at_10);
    write_tables(&mut report, &measured, &ingest_rows, exact, bm25, dataset.qrels.len())?;
    let python = embedwire_bench::corpus::python_or_venv(None)?;
    let plotted = std::process::Command::new(python).arg(PLOT).arg(report.dir()).status()?;
    anyhow::ensure!(plotted.success(), "bench/retrieval/plot.py failed: {plotted}");
    report.figures(judge(&measured, &ingest_rows, exact, bm25));
    report.finish()
}

/// The modes at the defaults, then the grid the defaults were chosen from.
fn tuning_grid() -> Vec<Way> {
    let mut ways = vec![VECTOR, KEYWORD, HYBRID];
    for fusion in [Fusion::ReciprocalRank, Fusion::RelativeScore] {
        for alpha in [0.3, 0.4, 0.5, 0.6, 0.7, 0.8] {
            ways.push(Way { mode: SearchMode::Hybrid, alpha: Some(alpha), fusion, rerank: false });
        }
    }
    ways
}

/// One ingest: which server, documents/s.
struct IngestRow {
    label: String,
    run: IngestRun,
}

/// Starts the store's server(s), ingests the corpus, and measures every way of searching.
async fn measure_store(
    common: &Common,
    binary: &Path,
    store: &str,
    cluster: Option<&StoreCluster>,
    dataset: &Dataset,
    ways: &[Way],
    with_exact: bool,
    compare_ingest: bool,
    cost_documents: usize,
) -> anyhow::Result<(Vec<Measured>, Vec<IngestRow>, Option<Quality>)> {
    let mut settings = common.clone();
    settings.server_args = [cluster.map(|c| c.server_args()).unwrap_or_default(), common.server_args.clone()].concat();
    let (server, _) = ServerProcess::start(&settings.server_command(binary.to_path_buf(), vec![])).await?;
    let channel = server.connect().await?;
    // The embedded store also ingests on a server without the keyword index, in turns with the measured one, so that
    // the machine's load hits both alike.
    let without = if store == "embedded" && compare_ingest {
        let command = settings.server_command(binary.to_path_buf(), vec![("--keyword-index", "false".into())]);
        Some(ServerProcess::start(&command).await?.0)
    } else {
        None
    };
    let paragraphs: Vec<Paragraph> =
        dataset.corpus.iter().map(|d| Paragraph { source: d.id.clone(), text: d.full_text() }).collect();
    let ids: Vec<String> = dataset.corpus.iter().map(|d| d.id.clone()).collect();
    let turns = 4usize;
    let per_turn = paragraphs.len().div_ceil(turns);
    let (mut with_runs, mut without_runs) = (Vec::new(), Vec::new());
    let without_channel = match &without {
        Some(process) => Some(process.connect().await?),
        None => None,
    };
    for (turn, slice) in paragraphs.chunks(per_turn).enumerate() {
        let first = turn * per_turn;
        with_runs.push(ingest::ingest(channel.clone(), slice, ("d", first), INGEST_BATCH).await?);
        if let Some(other) = &without_channel {
            without_runs.push(ingest::ingest(other.clone(), slice, ("d", first), INGEST_BATCH).await?);
        }
    }
    let mut ingests = vec![IngestRow { label: format!("{store} with keyword index"), run: IngestRun::combine(&with_runs) }];
    if let Some(process) = without {
        ingests.push(IngestRow { label: format!("{store} without keyword index"), run: IngestRun::combine(&without_runs) });
        process.stop().await?;
    }
    for row in &ingests {
        println!("{}: ingest {:.1} documents/s", row.label, row.run.rate());
    }
    // Ingest ids are d00000.. in corpus order; rankings name the data set's ids.
    let name_of = |ingested: &str| ingested.strip_prefix('d').and_then(|n| n.parse::<usize>().ok()).and_then(|i| ids.get(i)).cloned();
    // Quality on the data set alone, every way; hybrid's rankings are kept to compare rerank on its subset.
    let mut qualities = Vec::new();
    let mut hybrid_rankings = None;
    for way in ways {
        let (limit, top_k) = if way.rerank { (RERANK_QUERIES, RERANK_TOP_K) } else { (usize::MAX, QUALITY_TOP_K) };
        let rankings = rank_all(&channel, dataset, *way, top_k, limit, &name_of).await?;
        let judged = judged_queries(dataset, limit);
        let quality = beir::quality(&judged, &rankings);
        let hybrid_on_same_queries =
            if way.rerank { hybrid_rankings.as_ref().map(|hybrid| beir::quality(&judged, hybrid)) } else { None };
        if *way == HYBRID {
            hybrid_rankings = Some(rankings);
        }
        qualities.push((*way, quality, hybrid_on_same_queries));
    }
    let exact = if with_exact { Some(exact_ranking_quality(&channel, dataset).await?) } else { None };
    // Latency at the size the cost targets name.
    let latency_documents = pad_to(&channel, dataset, cost_documents).await?;
    // Weaviate's BM25 kept slowing after an ingest for minutes, on a plateau before it fell (18 ms at 1 min, 12 at
    // 2.5, 3 at 4.5): two rounds agreeing is not enough there, so it rests 4 minutes first.
    let rest = std::time::Duration::from_secs(if store == "weaviate" && latency_documents > dataset.corpus.len() { 240 } else { 0 });
    tokio::time::sleep(rest).await;
    if latency_documents > dataset.corpus.len() {
        // Only a fresh ingest needs it; without copies, the quality runs came between.
        settle(&channel, dataset).await?;
    }
    let all_ways: Vec<Way> = qualities.iter().map(|(way, _, _)| *way).collect();
    let latencies = user_latency(&channel, dataset, &all_ways).await?;
    let mut rows = Vec::new();
    for ((way, quality, hybrid_on_same_queries), latency) in qualities.into_iter().zip(latencies) {
        println!(
            "{store} {}: nDCG@10 {:.4} recall@100 {:.4} MRR@10 {:.4}; p50 {:.2} ms p99 {:.2} ms at {latency_documents} documents",
            way.label(),
            quality.ndcg_at_10,
            quality.recall_at_100,
            quality.mrr_at_10,
            ms(latency.p50),
            ms(latency.p99)
        );
        rows.push(Measured {
            store: store.to_string(),
            way,
            quality,
            latency,
            latency_documents,
            hybrid_on_same_queries,
        });
    }
    server.stop().await?;
    Ok((rows, ingests, exact))
}

fn search_request(text: &str, way: Way, top_k: u32, with_text: bool) -> SearchRequest {
    SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Text(text.to_string())) }],
        top_k: Some(top_k),
        include_text: Some(with_text),
        include_metadata: Some(false),
        rerank: Some(way.rerank),
        mode: way.mode as i32,
        alpha: way.alpha,
        fusion: way.fusion as i32,
        ..SearchRequest::default()
    }
}

/// The judgements of the first `limit` judged queries.
fn judged_queries(dataset: &Dataset, limit: usize) -> HashMap<String, HashMap<String, u32>> {
    dataset.queries.iter().take(limit).filter_map(|q| dataset.qrels.get(&q.id).map(|j| (q.id.clone(), j.clone()))).collect()
}

/// Ingests copies of the data set's documents until the index holds `target` documents (none when it already holds
/// as many): ids `p00000`.. (no judged id), each copy's sentences in reverse order, so that its chunks are new texts
/// with new vectors (a verbatim copy would reuse its chunks' vectors and add duplicate points to the vector index).
/// Returns the documents in the index.
async fn pad_to(channel: &Channel, dataset: &Dataset, target: usize) -> anyhow::Result<usize> {
    let missing = target.saturating_sub(dataset.corpus.len());
    if missing == 0 {
        return Ok(dataset.corpus.len());
    }
    let copies: Vec<Paragraph> = (0..missing)
        .map(|i| {
            let text = dataset.corpus[i % dataset.corpus.len()].full_text();
            let reversed: Vec<&str> = text.split_inclusive(". ").collect::<Vec<_>>().into_iter().rev().collect();
            Paragraph { source: format!("copy-{i}"), text: reversed.concat() }
        })
        .collect();
    let run = ingest::ingest(channel.clone(), &copies, ("p", 0), INGEST_BATCH).await?;
    println!("  {missing} copies ingested for the latency figures ({:.1} documents/s)", run.rate());
    Ok(target)
}

/// Waits until the store's keyword search runs at a steady speed after an ingest: a round of 20 keyword searches
/// every 15 s until two rounds in a row agree on the p50 within 15 % or 0.5 ms (at most 5 minutes). Measured: for about 4
/// minutes after a bulk write, Weaviate's BM25 took 4-6 x its later time (18 vs 3 ms at 1,400 chunks) while it
/// flushes and compacts the new segments; a user's index is mostly at rest, so that is what the latency figures show.
async fn settle(channel: &Channel, dataset: &Dataset) -> anyhow::Result<()> {
    let mut client = SearchServiceClient::new(channel.clone());
    let started = Instant::now();
    let mut previous: Option<f64> = None;
    loop {
        let mut samples = Vec::new();
        for query in dataset.queries.iter().take(20) {
            let began = Instant::now();
            client.search(search_request(&query.text, KEYWORD, USER_TOP_K, true)).await?;
            samples.push(began.elapsed());
        }
        let p50 = ms(LatencySummary::from_samples(samples).p50);
        // Within 15 %, or half a millisecond where the searches take about one.
        let steady = previous.is_some_and(|before| (p50 - before).abs() <= (0.15 * before.max(p50)).max(0.5));
        if steady || started.elapsed() >= std::time::Duration::from_secs(300) {
            println!("  keyword p50 {p50:.2} ms, steady after {:.0} s more", started.elapsed().as_secs_f64());
            return Ok(());
        }
        previous = Some(p50);
        tokio::time::sleep(std::time::Duration::from_secs(15)).await;
    }
}

/// The first `limit` judged queries' rankings of documents (each once, at its best chunk) from `top_k` chunks.
async fn rank_all(
    channel: &Channel,
    dataset: &Dataset,
    way: Way,
    top_k: u32,
    limit: usize,
    name_of: &impl Fn(&str) -> Option<String>,
) -> anyhow::Result<HashMap<String, Vec<String>>> {
    let mut client = SearchServiceClient::new(channel.clone());
    let mut rankings = HashMap::new();
    for query in dataset.queries.iter().take(limit) {
        let response = client
            .search(search_request(&query.text, way, top_k, false))
            .await
            .with_context(|| format!("Search {} for query {}", way.label(), query.id))?
            .into_inner();
        let hits = response.results.into_iter().next().map(|r| r.hits).unwrap_or_default();
        let documents = beir::documents_once(hits.into_iter().filter_map(|hit| name_of(&hit.document_id)));
        rankings.insert(query.id.clone(), documents.into_iter().take(100).collect());
    }
    Ok(rankings)
}

/// A user's search, one at a time: top_k 10 with text, over the judged queries (at most 300; hybrid + rerank, which
/// embeds its candidates again with the embedding model as the scorer, at most 30), each query asked every way in
/// turn so that a passing load (a store still compacting after the ingest) falls on every way alike. One summary a way.
async fn user_latency(channel: &Channel, dataset: &Dataset, ways: &[Way]) -> anyhow::Result<Vec<LatencySummary>> {
    let mut client = SearchServiceClient::new(channel.clone());
    let mut samples = vec![Vec::new(); ways.len()];
    // Warm: each way's first searches (a store's caches, the model's first shapes) are not measured.
    for (query, way) in dataset.queries.iter().take(5).zip(ways.iter().cycle()) {
        client.search(search_request(&query.text, *way, USER_TOP_K, true)).await?;
    }
    for (n, query) in dataset.queries.iter().take(300).enumerate() {
        for (way, samples) in ways.iter().zip(samples.iter_mut()) {
            if way.rerank && n >= 30 {
                continue;
            }
            let started = Instant::now();
            client.search(search_request(&query.text, *way, USER_TOP_K, true)).await?;
            samples.push(started.elapsed());
        }
    }
    Ok(samples.into_iter().map(LatencySummary::from_samples).collect())
}

/// The yardstick of vector mode: every document embedded whole (Embed, the model's truncation), every query ranked
/// against all of them exactly, here in the bench.
async fn exact_ranking_quality(channel: &Channel, dataset: &Dataset) -> anyhow::Result<Quality> {
    let texts: Vec<String> = dataset.corpus.iter().map(|d| d.full_text()).collect();
    let documents = beir::embed_texts(channel, &texts).await.context("embedding the corpus for the exact ranking")?;
    let texts: Vec<String> = dataset.queries.iter().map(|q| q.text.clone()).collect();
    let queries = beir::embed_texts(channel, &texts).await.context("embedding the queries for the exact ranking")?;
    let mut rankings = HashMap::new();
    for (query, vector) in dataset.queries.iter().zip(&queries) {
        let mut scored: Vec<(f32, usize)> = documents
            .iter()
            .enumerate()
            .map(|(i, d)| (d.iter().zip(vector).map(|(a, b)| a * b).sum::<f32>(), i))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        rankings.insert(query.id.clone(), scored.iter().take(100).map(|(_, i)| dataset.corpus[*i].id.clone()).collect());
    }
    Ok(beir::quality(&dataset.qrels, &rankings))
}

/// Plain BM25 in Python on the same documents and queries (the slice is written out for --quick).
fn python_bm25(dataset: &Dataset, split: &str) -> anyhow::Result<Quality> {
    let dir = fresh_dir("beir");
    dataset.write(&dir, split)?;
    let run_file = dir.join("bm25.run");
    let status = std::process::Command::new("python3")
        .arg(BM25_BASELINE)
        .arg(&dir)
        .arg(split)
        .arg(&run_file)
        .status()
        .context("running python3 bench/retrieval/bm25_baseline.py")?;
    anyhow::ensure!(status.success(), "bm25_baseline.py failed: {status}");
    let mut rankings: HashMap<String, Vec<String>> = HashMap::new();
    for line in std::fs::read_to_string(&run_file)?.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        anyhow::ensure!(fields.len() == 4, "bm25.run: bad line {line:?}");
        rankings.entry(fields[0].to_string()).or_default().push(fields[1].to_string());
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(beir::quality(&dataset.qrels, &rankings))
}

fn write_tables(
    report: &mut Report,
    measured: &[Measured],
    ingests: &[IngestRow],
    exact: Quality,
    bm25: Quality,
    judged: usize,
) -> anyhow::Result<()> {
    let mut table = Table::new(
        "store,mode,alpha,fusion,ndcg_at_10,recall_at_100,mrr_at_10,p50_ms,p99_ms,queries_per_s,judged_queries,latency_documents",
    );
    let fusion_name = |way: &Way| match (way.mode, way.fusion) {
        (SearchMode::Hybrid, Fusion::ReciprocalRank) => "rrf",
        (SearchMode::Hybrid, _) => "relative_score",
        _ => "",
    };
    for m in measured {
        let mode = m.way.label().split(' ').next().unwrap_or_default().to_string();
        let alpha = match (m.way.mode, m.way.alpha) {
            (SearchMode::Hybrid, Some(alpha)) => format!("{alpha:.1}"),
            (SearchMode::Hybrid, None) => "default".to_string(),
            _ => String::new(),
        };
        table.row([
            m.store.clone(),
            mode,
            alpha,
            fusion_name(&m.way).to_string(),
            format!("{:.4}", m.quality.ndcg_at_10),
            format!("{:.4}", m.quality.recall_at_100),
            format!("{:.4}", m.quality.mrr_at_10),
            format!("{:.2}", ms(m.latency.p50)),
            format!("{:.2}", ms(m.latency.p99)),
            format!("{:.1}", 1e3 / ms(m.latency.mean).max(1e-9)),
            if m.way.rerank { RERANK_QUERIES.min(judged) } else { judged }.to_string(),
            m.latency_documents.to_string(),
        ]);
    }
    for (label, q) in [("exact whole-document cosine (outside the server)", exact), ("plain BM25 k1 0.9 b 0.4 (Python)", bm25)] {
        table.row([
            "yardstick".to_string(),
            label.to_string(),
            String::new(),
            String::new(),
            format!("{:.4}", q.ndcg_at_10),
            format!("{:.4}", q.recall_at_100),
            format!("{:.4}", q.mrr_at_10),
            String::new(),
            String::new(),
            String::new(),
            judged.to_string(),
            String::new(),
        ]);
    }
    report.table("retrieval.csv", &table)?;
    report.section("Quality and latency", &table);
    let mut ingest_table = Table::new("server,documents,documents_per_s,completed_s");
    for row in ingests {
        ingest_table.row([
            row.label.clone(),
            row.run.documents.to_string(),
            format!("{:.1}", row.run.rate()),
            format!("{:.1}", row.run.completed.as_secs_f64()),
        ]);
    }
    report.table("retrieval_ingest.csv", &ingest_table)?;
    report.section("Ingest", &ingest_table);
    Ok(())
}

fn find<'a>(measured: &'a [Measured], store: &str, way: Way) -> Option<&'a Measured> {
    measured.iter().find(|m| m.store == store && m.way == way)
}

/// The targets, on the first store measured (and hybrid on every other against it).
fn judge(measured: &[Measured], ingests: &[IngestRow], exact: Quality, bm25: Quality) -> Vec<Row> {
    let mut rows = Vec::new();
    let Some(first) = measured.first().map(|m| m.store.clone()) else { return rows };
    let ndcg = |store: &str, way| find(measured, store, way).map(|m| m.quality.ndcg_at_10);
    if let Some(vector) = ndcg(&first, VECTOR) {
        rows.push(
            Row::info(format!("{first} vector nDCG@10 - exact whole-document ranking"), vector - exact.ndcg_at_10, "", format!("{:+.4}", vector - exact.ndcg_at_10))
                .at_least(-VECTOR_TOLERANCE, format!(">= -{VECTOR_TOLERANCE}"))
                .with_note(format!("{vector:.4} vs {:.4}", exact.ndcg_at_10)),
        );
    }
    for store in measured.iter().map(|m| m.store.clone()).collect::<std::collections::BTreeSet<_>>() {
        if let Some(keyword) = ndcg(&store, KEYWORD) {
            rows.push(
                Row::info(format!("{store} keyword nDCG@10 - plain BM25"), keyword - bm25.ndcg_at_10, "", format!("{:+.4}", keyword - bm25.ndcg_at_10))
                    .at_least(-KEYWORD_TOLERANCE, format!(">= -{KEYWORD_TOLERANCE}"))
                    .with_note(format!("{keyword:.4} vs {:.4}", bm25.ndcg_at_10)),
            );
        }
        if let Some(reranked) = measured.iter().find(|m| m.store == store && m.way.rerank)
            && let Some(hybrid) = reranked.hybrid_on_same_queries
        {
            let difference = reranked.quality.ndcg_at_10 - hybrid.ndcg_at_10;
            rows.push(
                Row::info(format!("{store} hybrid+rerank nDCG@10 - hybrid (first {RERANK_QUERIES} queries)"), difference, "", format!("{difference:+.4}"))
                    .with_note(format!("{:.4} vs {:.4}; {RERANK_TOP_K} candidates reranked", reranked.quality.ndcg_at_10, hybrid.ndcg_at_10)),
            );
        }
        let (Some(vector), Some(keyword), Some(hybrid)) = (ndcg(&store, VECTOR), ndcg(&store, KEYWORD), ndcg(&store, HYBRID)) else {
            continue;
        };
        let better = vector.max(keyword);
        rows.push(
            Row::info(format!("{store} hybrid nDCG@10 - best single mode"), hybrid - better, "", format!("{:+.4}", hybrid - better))
                .at_least(HYBRID_GAIN, format!(">= +{HYBRID_GAIN}"))
                .with_note(format!("hybrid {hybrid:.4}, vector {vector:.4}, keyword {keyword:.4}")),
        );
        if store != first
            && let Some(reference) = ndcg(&first, HYBRID)
        {
            rows.push(
                Row::info(format!("{store} hybrid nDCG@10 - {first}"), hybrid - reference, "", format!("{:+.4}", hybrid - reference))
                    .at_least(-STORE_TOLERANCE, format!(">= -{STORE_TOLERANCE}")),
            );
        }
        if let (Some(v), Some(h)) = (find(measured, &store, VECTOR), find(measured, &store, HYBRID)) {
            let ratio = ms(h.latency.p50) / ms(v.latency.p50).max(1e-9);
            rows.push(
                Row::info(format!("{store} hybrid p50 / vector p50"), ratio, "x", format!("{ratio:.2} x"))
                    .at_most(HYBRID_P50_RATIO, format!("<= {HYBRID_P50_RATIO} x"))
                    .with_note(format!("{:.2} ms vs {:.2} ms at {} documents", ms(h.latency.p50), ms(v.latency.p50), h.latency_documents)),
            );
        }
    }
    if let [with, without, ..] = ingests
        && without.label.contains("without keyword")
    {
        let ratio = with.run.rate() / without.run.rate().max(1e-9);
        rows.push(
            Row::info("ingest with keyword index / without", ratio, "x", format!("{ratio:.2} x"))
                .at_least(INGEST_RATIO, format!(">= {INGEST_RATIO} x"))
                .with_note(format!("{:.1} vs {:.1} documents/s", with.run.rate(), without.run.rate())),
        );
    }
    rows
}
