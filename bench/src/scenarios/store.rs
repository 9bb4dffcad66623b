//! store: what a shared store costs against the embedded store, with the real model and server binary. One embedwire
//! server per store (embedded; a Weaviate cluster of each size asked, on the server's defaults; PostgreSQL with
//! pgvector, a primary and a streaming replica the server reads from; each by `scripts/cluster.sh up --store-only`)
//! ingests the docstring corpus to every job COMPLETED, then serves closed-loop Search. Targets on the largest
//! Weaviate cluster and on PostgreSQL, as ratios to the embedded store. The CPU of the server and of the store's
//! processes per chunk and per search is what the capacity model is built on. All stores run at once and take turns
//! (slice k into every store before slice k+1 into any, search rounds alike), so that a change in the machine's load
//! (measured too) hits every store alike.

use std::{
    future::Future,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Parser;
use embedwire_bench::{
    corpus::{Corpus, CorpusOptions},
    cpu::{cpu_time_of, machine_busy_time},
    ingest::{self, IngestRun},
    latency::ms,
    load::{self, LoadResult, Rpc, Stop},
    memory::{dir_bytes, mib, rss_bytes, with_children},
    options::{Common, SearchLoad, connections},
    report::{Report, Row, Table, load_average},
    server_process::ServerProcess,
    store_cluster::{StoreCluster, StoreKind},
};
use embedwire_server::ServerConfig;
use tonic::transport::Channel;

/// On the largest Weaviate cluster and on PostgreSQL, against the embedded store:
/// ingest documents/s and searches/s at least these shares.
const MIN_INGEST_RATIO: f64 = 0.8;
const MIN_SEARCH_RATIO: f64 = 0.7;
/// Query texts (first sentences of one-line docstrings, not in the corpus).
const QUERIES: usize = 500;

/// Options of the store scenario (`--duration-secs`: Search time per store, all rounds).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub corpus: CorpusOptions,
    /// Measure Weaviate clusters of 1 and 3 nodes (--quick: 1), besides PostgreSQL.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub weaviate: bool,
    #[command(flatten)]
    pub load: SearchLoad,
}

/// One store under measurement: what it is, and the processes behind it.
struct Store {
    label: String,
    /// "embedded", "weaviate" or "postgres": whose processes `nodes` are.
    engine: &'static str,
    /// Whether its ratios are judged against the targets.
    judged: bool,
    /// The table's nodes, shards, replication, write and read consistency, as the
    /// server runs a Weaviate collection (`0` and blanks for the others).
    layout: [String; 5],
    /// Its server's pid (the `ServerProcess` is stopped apart, in `run`).
    server: u32,
    nodes: Vec<u32>,
    data_dir: Option<PathBuf>,
    channels: Vec<Channel>,
}

/// The CPU time of a phase, of: the measured store's server, its nodes, the other
/// stores' processes (idle, but sharing the cores), the bench, and the whole machine,
/// whose busy time beyond these is other jobs' load (and the kernel's).
#[derive(Clone, Copy, Default)]
struct Cost {
    wall: Duration,
    cpu: [Duration; 5],
}

const SERVER: usize = 0;
const NODES: usize = 1;
const OTHERS: usize = 2;
const BENCH: usize = 3;

impl Cost {
    fn outside(&self) -> Duration {
        self.cpu[4].saturating_sub(self.cpu[..4].iter().sum())
    }

    fn cores(&self, time: Duration) -> f64 {
        time.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }
}

/// What one store did.
struct StoreResult {
    store: Store,
    ingest: IngestRun,
    ingest_cost: Cost,
    /// The index after the ingest (documents, chunks), the RSS of the server and the
    /// store's processes then, and the store's data on disk.
    index: (u64, u64),
    rss: u64,
    data_bytes: Option<u64>,
    search: LoadResult,
    search_cost: Cost,
}

impl StoreResult {
    /// CPU-ms of the server or the nodes per chunk ingested.
    fn per_chunk(&self, part: usize) -> f64 {
        ms(self.ingest_cost.cpu[part]) / self.index.1.max(1) as f64
    }

    fn per_search(&self, part: usize) -> f64 {
        ms(self.search_cost.cpu[part]) / self.search.calls.max(1) as f64
    }

    /// The ingest and search rates relative to `base` if both were bound by CPU alone,
    /// the nodes on the server's cores: the machine's other load does not move them.
    fn cpu_bound_ratios(&self, base: &StoreResult) -> [f64; 2] {
        let ratio = |per: fn(&StoreResult, usize) -> f64| {
            (per(base, SERVER) + per(base, NODES)) / (per(self, SERVER) + per(self, NODES)).max(1e-9)
        };
        [ratio(StoreResult::per_chunk), ratio(StoreResult::per_search)]
    }
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    // store_bench.csv: every figure and the setup (which the printed table leaves out).
    let mut report = Report::new(common.results("store"), "store_bench")?.summary_also_as("store_bench.csv");
    // One cluster and server per size; the targets are judged on the largest.
    let nodes = if args.weaviate { common.pick(vec![1, 3], vec![1]) } else { Vec::new() };
    // Short turns (20 s or so) follow other jobs' load: a build on one store's 2-minute turn skewed a run 2 x. Search
    // rounds alternate alike.
    let (slices, rounds) = (common.pick(10, 1), common.pick(6, 1));
    let warmup_calls = common.pick(64, 16);
    let binary = common.server_binary()?; // before measuring: a failed build should not come after minutes
    let server = ServerConfig::try_parse_from(["embedwire-server".to_string()].iter().chain(&common.server_args))?;
    let shared = format!("Weaviate clusters of {nodes:?} nodes and PostgreSQL (primary + replica)");
    println!("store: embedded, {shared}; load average {}", load_average());
    // Warm-up texts: corpus-like paragraphs that are not in the corpus.
    let corpus = args.corpus.select(common.pick(10_000, 100), warmup_calls, QUERIES)?;
    let mut clusters = Vec::new();
    let kinds = nodes.iter().map(|&n| StoreKind::Weaviate(n)).chain([StoreKind::Postgres]);
    for kind in kinds {
        let (cluster, took) = StoreCluster::start(kind)?;
        println!("{kind:?} healthy after {:.1} s in {}", took.as_secs_f64(), cluster.state_dir().display());
        clusters.push(cluster);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    let measured = async {
        let (mut servers, mut stores) = (Vec::new(), Vec::new());
        for cluster in [None].into_iter().chain(clusters.iter().map(Some)) {
            let mut with_cluster = common.clone();
            with_cluster.server_args =
                [cluster.map(|c| c.server_args()).unwrap_or_default(), common.server_args.clone()].concat();
            // Capacity with closed-loop clients at the server's default admission, which queues them.
            let command = with_cluster.server_command(binary.clone(), vec![]);
            let (process, took) = ServerProcess::start(&command).await?;
            let no_layout = || ["0".to_string(), String::new(), String::new(), String::new(), String::new()];
            // The shared stores are judged: PostgreSQL and the largest Weaviate cluster.
            let (label, engine, judged, layout) = match cluster.map(|c| c.kind) {
                None | Some(StoreKind::Embedded) => ("embedded".to_string(), "embedded", false, no_layout()),
                Some(StoreKind::Postgres) => ("postgres primary + replica".into(), "postgres", true, no_layout()),
                Some(StoreKind::Weaviate(n)) => {
                    let (shards, replication) =
                        (server.shards.unwrap_or(n), server.replication_factor.unwrap_or(n.min(3)));
                    let [write, read] =
                        [server.write_consistency, server.read_consistency].map(|c| format!("{c:?}").to_uppercase());
                    let layout = [n.to_string(), shards.to_string(), replication.to_string(), write, read];
                    let label = format!("weaviate {n} node{}", if n == 1 { "" } else { "s" });
                    (label, "weaviate", Some(&n) == nodes.last(), layout)
                }
            };
            println!("{label}: server pid {} SERVING after {:.2} s", process.pid, took.as_secs_f64());
            let channels = connections(&process, args.load.clients.div_ceil(args.load.clients_per_connection)).await?;
            // One-text Embed calls, untimed: the model's first batches.
            let texts: Arc<[String]> = corpus.second_ingest.iter().map(|p| p.text.clone()).collect();
            let clients = 4.min(warmup_calls);
            load::run(&channels, clients, texts, Rpc::Embed, Stop::Calls(warmup_calls / clients)).await?;
            let (nodes, data_dir) =
                (cluster.map(|c| c.pids.clone()).unwrap_or_default(), cluster.map(|c| c.data_dir()));
            stores.push(Store { label, engine, judged, layout, server: process.pid, nodes, data_dir, channels });
            servers.push(process);
        }
        let results = measure(common, &args, &corpus, stores, (slices, rounds)).await?;
        for (server, store) in servers.into_iter().zip(&results) {
            for line in server.log_tail().iter().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")) {
                println!("  {} server log: {line}", store.store.label);
            }
            server.stop().await?;
        }
        anyhow::Ok(results)
    };
    // On SIGINT or SIGTERM everything started is stopped by pid: the servers as their
    // handles drop, the clusters as `clusters` drops.
    let stores = runtime.block_on(async {
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            stores = measured => stores,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("SIGINT: stopped"),
            _ = terminate.recv() => anyhow::bail!("SIGTERM: stopped"),
        }
    })?;
    let load_at_end = load_average();
    for cluster in clusters {
        cluster.stop()?;
    }

    report.figures(figures(&args, corpus.documents.len(), corpus.queries.len(), &stores));
    let load = load_at_end.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(f64::NAN);
    let server_args = format!("server_args [{}]", common.server_args.join(" "));
    for (name, value, unit) in [
        ("quick".into(), f64::from(u8::from(common.quick)), "bool"),
        ("slices".into(), slices as f64, "slices"),
        ("rounds".into(), rounds as f64, "rounds"),
        ("ingest_batch".into(), args.load.ingest_batch as f64, "documents"),
        ("clients".into(), args.load.clients as f64, "clients"),
        ("intra_op_threads".into(), common.intra_op_threads as f64, "threads"),
        (server_args, common.server_args.len() as f64, "flags"),
        (format!("load average at end [{load_at_end}]"), load, "1-min load"),
    ] {
        report.setup(&name, value, unit);
    }
    report.table("store_bench_stores.csv", &stores_table(&stores))?;
    report.finish()
}

/// The corpus into every store slice by slice, then Search rounds, the stores taking turns.
async fn measure(
    common: &Common,
    args: &Args,
    corpus: &Corpus,
    stores: Vec<Store>,
    (slices, rounds): (usize, usize),
) -> anyhow::Result<Vec<StoreResult>> {
    let queries: Arc<[String]> = corpus.queries.clone().into();
    let slice_len = corpus.documents.len().div_ceil(slices);
    let slices: Vec<_> = corpus.documents.chunks(slice_len).collect();
    let batch = args.load.ingest_batch;
    let ingests = in_turns(
        &stores,
        slices.len(),
        |slice, store| ingest::ingest(store.channels[0].clone(), slices[slice], ("doc-", slice * slice_len), batch),
        |run| format!("{:.1} docs/s", run.rate()),
    )
    .await?;
    let mut counts = Vec::new();
    for store in &stores {
        let stats = ingest::index_stats(store.channels[0].clone()).await?;
        let nodes = with_children(&store.nodes).iter().map(|&pid| rss_bytes(pid).unwrap_or(0)).sum::<u64>();
        let (documents, chunks, kind) = (stats.document_count, stats.chunk_count, stats.index_kind);
        println!("  {}: index of {documents} documents, {chunks} chunks ({kind})", store.label);
        counts.push(((documents, chunks), rss_bytes(store.server)? + nodes, store.data_dir.as_deref().map(dir_bytes)));
    }
    let (rpc, warmup) = (Rpc::Search { top_k: args.load.top_k, collection: "" }, common.warmup(2.0, 0.5));
    for store in &stores {
        load::run(&store.channels, args.load.clients, queries.clone(), rpc, Stop::After(warmup)).await?;
    }
    let round_time = common.duration(30.0, 2.0) / rounds as u32;
    let searches = in_turns(
        &stores,
        rounds,
        |_, store| load::run(&store.channels, args.load.clients, queries.clone(), rpc, Stop::After(round_time)),
        |run| format!("{:.1} searches/s, p99 {:.1} ms", run.rate(), ms(run.latency.p99)),
    )
    .await?;
    let measured = stores.into_iter().zip(ingests).zip(searches).zip(counts);
    let results =
        measured.map(|(((store, (ingests, ingest_cost)), (searches, search_cost)), (index, rss, data_bytes))| {
            let (ingest, search) = (IngestRun::combine(&ingests), LoadResult::combine(&searches));
            StoreResult { store, ingest, ingest_cost, index, rss, data_bytes, search, search_cost }
        });
    Ok(results.collect())
}

/// `turns` turns of `work(turn, store)` on every store, the order rotating (so no store always follows the same one,
/// whose background work, e.g. Weaviate compacting, would fall on it); each store's results, and their CPU summed.
async fn in_turns<'a, T, F: Future<Output = anyhow::Result<T>> + 'a>(
    stores: &'a [Store],
    turns: usize,
    mut work: impl FnMut(usize, &'a Store) -> F,
    progress: impl Fn(&T) -> String,
) -> anyhow::Result<Vec<(Vec<T>, Cost)>> {
    let mut done: Vec<(Vec<T>, Cost)> = stores.iter().map(|_| (Vec::new(), Cost::default())).collect();
    for turn in 0..turns {
        for i in (0..stores.len()).map(|k| (turn + k) % stores.len()) {
            let others = stores.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, s)| s);
            let others: Vec<u32> = others.flat_map(|s| with_children(&s.nodes).into_iter().chain([s.server])).collect();
            let groups = [vec![stores[i].server], with_children(&stores[i].nodes), others, vec![std::process::id()]];
            let read = || -> anyhow::Result<Vec<Duration>> {
                groups.iter().map(|pids| cpu_time_of(pids)).chain([machine_busy_time()]).collect()
            };
            let (before, started) = (read()?, Instant::now());
            let run = work(turn, &stores[i]).await?;
            let (after, wall) = (read()?, started.elapsed());
            let cost = Cost { wall, cpu: std::array::from_fn(|k| after[k].saturating_sub(before[k])) };
            let (server, nodes) = (cost.cores(cost.cpu[SERVER]), cost.cores(cost.cpu[NODES]));
            let label = &stores[i].label;
            println!("  {}/{turns} {label}: {}; server {server:.2} cores, store {nodes:.2}", turn + 1, progress(&run));
            let (runs, total) = &mut done[i];
            runs.push(run);
            *total = Cost { wall: total.wall + cost.wall, cpu: std::array::from_fn(|k| total.cpu[k] + cost.cpu[k]) };
        }
    }
    Ok(done)
}

fn figures(args: &Args, documents: usize, queries: usize, stores: &[StoreResult]) -> Vec<Row> {
    let base = &stores[0];
    let (c, k, batch) = (args.load.clients, args.load.top_k, args.load.ingest_batch);
    let mut rows = vec![
        Row::info("corpus documents", documents as f64, "docs", documents.to_string()),
        Row::info("query texts", queries as f64, "queries", queries.to_string()),
    ];
    for s in stores {
        let (label, ingest, search, latency) = (&s.store.label, s.ingest.rate(), s.search.rate(), &s.search.latency);
        let (p50, p99, calls) = (ms(latency.p50), ms(latency.p99), s.search.calls);
        let (rss, costs) = (mib(s.rss), [("ingest", &s.ingest_cost), ("search", &s.search_cost)]);
        let ingested = format!("{ingest:.1} docs/s ({:.1} s)", s.ingest.completed.as_secs_f64());
        let mut info = vec![
            ("index chunks".into(), s.index.1 as f64, "chunks", s.index.1.to_string()),
            (format!("ingest ({batch} docs/call, to COMPLETED)"), ingest, "docs/s", ingested),
            (format!("search c={c} (top_k {k})"), search, "searches/s", format!("{search:.1}/s ({calls} calls)")),
            (format!("search c={c} p50 / p99"), p99, "ms", format!("{p50:.1} / {p99:.1} ms")),
        ];
        for (what, value) in [
            ("CPU per chunk, embedwire", s.per_chunk(SERVER)),
            ("CPU per chunk, store", s.per_chunk(NODES)),
            ("CPU per search, embedwire", s.per_search(SERVER)),
            ("CPU per search, store", s.per_search(NODES)),
        ] {
            if !(s.store.engine == "embedded" && what.ends_with("store")) {
                info.push((what.replace("store", s.store.engine), value, "CPU-ms", format!("{value:.2} ms")));
            }
        }
        for (phase, cost) in costs {
            let (outside, others) = (cost.cores(cost.outside()), cost.cores(cost.cpu[OTHERS]));
            let measured = format!("{outside:.2} cores (other stores {others:.2})");
            info.push((format!("load outside the bench during {phase}"), outside, "cores", measured));
        }
        info.push(("RSS after ingest (server + nodes)".into(), rss, "MiB", format!("{rss:.0} MiB")));
        if let Some(data) = s.data_bytes.map(mib) {
            info.push(("data on disk (all nodes)".into(), data, "MiB", format!("{data:.0} MiB")));
        }
        for (figure, value, unit, measured) in info {
            rows.push(Row::info(format!("{label}: {figure}"), value, unit, measured));
        }
        if s.store.engine == "embedded" {
            continue;
        }
        for (what, ratio) in ["ingest", "search"].into_iter().zip(s.cpu_bound_ratios(base)) {
            let figure = format!("{label} / embedded: {what} if bound by CPU (ratio of CPU per unit)");
            rows.push(Row::info(figure, ratio, "x", format!("{ratio:.2} x")));
        }
        let note = |unit: &str, per: fn(&StoreResult, usize) -> f64| {
            format!("CPU-ms/{unit} {:.2} + {:.2} vs {:.2}", per(s, SERVER), per(s, NODES), per(base, SERVER))
        };
        let (ingest_ratio, search_ratio) = (ingest / base.ingest.rate(), search / base.search.rate());
        for (what, ratio, limit, note) in [
            ("ingest docs/s".into(), ingest_ratio, MIN_INGEST_RATIO, note("chunk", StoreResult::per_chunk)),
            (format!("search/s c={c}"), search_ratio, MIN_SEARCH_RATIO, note("search", StoreResult::per_search)),
        ] {
            let row = Row::info(format!("{label} / embedded: {what}"), ratio, "x", format!("{ratio:.2} x"));
            let target = format!(">= {limit:.1} x");
            rows.push(if s.store.judged { row.at_least(limit, target).with_note(note) } else { row });
        }
    }
    rows
}

/// One row per store: every figure the capacity model needs.
fn stores_table(stores: &[StoreResult]) -> Table {
    let columns = "store,nodes,shards,replication_factor,write_consistency,read_consistency,documents,chunks,ingest_s,\
        ingest_docs_per_s,ingest_ratio,ingest_server_cpu_s,ingest_store_cpu_s,ingest_server_cpu_ms_per_chunk,\
        ingest_store_cpu_ms_per_chunk,ingest_bench_cores,ingest_other_stores_cores,ingest_outside_cores,searches,\
        search_s,search_per_s,search_ratio,search_p50_ms,search_p95_ms,search_p99_ms,search_server_cpu_ms_per_search,\
        search_store_cpu_ms_per_search,search_bench_cores,search_other_stores_cores,search_outside_cores,\
        ingest_cpu_bound_ratio,search_cpu_bound_ratio,rss_after_ingest_mib,store_data_mib";
    let mut table = Table::new(columns);
    let (base, f3) = (&stores[0], |v: f64| format!("{v:.3}"));
    for s in stores {
        let (i, q, l) = (&s.ingest_cost, &s.search_cost, &s.search.latency);
        let mut cells: Vec<String> = [&s.store.label].into_iter().chain(&s.store.layout).cloned().collect();
        cells.extend([s.index.0.to_string(), s.index.1.to_string(), f3(s.ingest.completed.as_secs_f64())]);
        cells.extend([format!("{:.2}", s.ingest.rate()), f3(s.ingest.rate() / base.ingest.rate())]);
        let cpu_s = [i.cpu[SERVER], i.cpu[NODES]].map(|t| t.as_secs_f64());
        cells.extend([cpu_s[0], cpu_s[1], s.per_chunk(SERVER), s.per_chunk(NODES)].map(f3));
        cells.extend([i.cores(i.cpu[BENCH]), i.cores(i.cpu[OTHERS]), i.cores(i.outside())].map(f3));
        let search_s = f3(s.search.elapsed.as_secs_f64());
        cells.extend([s.search.calls.to_string(), search_s, format!("{:.2}", s.search.rate())]);
        cells.extend([s.search.rate() / base.search.rate(), ms(l.p50), ms(l.p95), ms(l.p99)].map(f3));
        cells.extend([s.per_search(SERVER), s.per_search(NODES)].map(f3));
        cells.extend([q.cores(q.cpu[BENCH]), q.cores(q.cpu[OTHERS]), q.cores(q.outside())].map(f3));
        cells.extend(s.cpu_bound_ratios(base).map(f3));
        cells.extend([format!("{:.1}", mib(s.rss)), s.data_bytes.map_or(String::new(), |b| format!("{:.1}", mib(b)))]);
        table.row(cells);
    }
    table
}
