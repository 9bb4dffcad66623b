//! store-bench: what a Weaviate cluster costs against the embedded store, measured in
//! one run with the real model and the real server binary, each figure printed
//! against its target:
//!
//! 1. the corpus: search-bench's 10k paragraphs of Python docstrings, and its queries;
//! 2. the stores: the embedded store, and a Weaviate cluster of each size asked
//!    (1 and 3 nodes; `scripts/cluster.sh up --nodes N --weaviate-only`), each with
//!    one embedwire server of its own using the server's defaults (for Weaviate:
//!    shards = nodes, replication min(3, nodes), write QUORUM, read ONE);
//! 3. ingest: the corpus through each server's Ingest (calls of 1000), from the first
//!    call to every job COMPLETED; target on the largest cluster: documents/s >=
//!    0.8 x the embedded store's;
//! 4. search: closed-loop Search at concurrency 16 (one text query, top_k 5) on each
//!    store; target on the largest cluster: searches/s >= 0.7 x the embedded store's;
//! 5. cost: the CPU time of the embedwire server and of the Weaviate nodes over each
//!    phase, per chunk ingested and per search: what the capacity model is built on.
//!
//! All stores run at once and take turns: slice k of the corpus goes into every
//! store before slice k+1 goes into any, and the search rounds alternate the same
//! way, the order rotating, so a change in the machine's load hits every store alike.
//! The idle stores and the machine's other load are measured too and printed with
//! each phase. A MISS is a result, not a failure: the exit status is non-zero only
//! when the bench could not run.
//!
//! # Layout
//! - [`config`]: the flags, and the amounts of work of a full or `--quick` run.
//! - [`cost`]: the CPU of a phase, per process group.
//! - [`report`]: targets, the tables and the CSV files.
//!
//! The corpus, the server process, the Weaviate cluster, the ingest, the closed-loop
//! clients and CPU readings come from the bench crate's library ([`embedwire_bench`]).

mod config;
mod cost;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use embedwire_bench::corpus::{self, Corpus};
use embedwire_bench::ingest::{self, IngestRun};
use embedwire_bench::load::{self, LoadResult, Rpc, Stop};
use embedwire_bench::memory::rss_bytes;
use embedwire_bench::server_binary;
use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use embedwire_bench::weaviate_cluster::WeaviateCluster;
use embedwire_server::ServerConfig;
use tonic::transport::Channel;

use crate::config::{BenchConfig, Plan};
use crate::cost::{Cost, Meter, Watched};
use crate::report::{Layout, Results, RunSetup, StoreResult};

fn main() -> anyhow::Result<()> {
    let config = BenchConfig::parse();
    config.validate().map_err(anyhow::Error::msg)?;
    let plan = config.plan();
    let python = config.python().map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    // Before measuring anything: a failed build should not come after minutes.
    let server_bin = server_binary::resolve(config.server_bin.as_deref())?;
    let server = ServerConfig::try_parse_from(
        std::iter::once("embedwire-server".to_string()).chain(config.server_args.iter().cloned()),
    )?;

    println!(
        "store-bench{}: the embedded store and Weaviate clusters of {:?} nodes; {} intra-op threads; load average {}",
        if config.quick { " --quick" } else { "" },
        plan.nodes,
        config.intra_op_threads,
        load_average()
    );
    let docstrings = corpus::docstrings(&python, &config.cache_dir, false)?;
    // Warm-up texts: corpus-like paragraphs that are not in the corpus.
    let corpus = corpus::select(&docstrings, plan.documents, plan.warmup_calls, config.queries)?;
    drop(docstrings);
    println!(
        "corpus: {} documents, {} queries, {} warm-up texts",
        corpus.documents.len(),
        corpus.queries.len(),
        corpus.second_ingest.len()
    );

    let mut clusters = Vec::new();
    for &nodes in &plan.nodes {
        let (cluster, took) = WeaviateCluster::start(nodes)?;
        println!(
            "weaviate {nodes} node(s) healthy after {:.1} s: pids {:?}, state in {}",
            took.as_secs_f64(),
            cluster.pids,
            cluster.state_dir().display()
        );
        clusters.push(cluster);
    }

    let runtime = tokio::runtime::Runtime::new()?;
    // On SIGINT or SIGTERM the measuring stops and everything started is stopped by
    // pid: the servers as their handles drop, the clusters as `clusters` drops.
    let stores = runtime.block_on(async {
        tokio::select! {
            stores = measure(&config, &plan, &server_bin, &server, &corpus, &clusters) => stores,
            signal = interrupted() => Err(anyhow::anyhow!("{signal}: stopped")),
        }
    })?;
    let setup = RunSetup {
        quick: config.quick,
        documents: corpus.documents.len(),
        queries: corpus.queries.len(),
        slices: plan.slices,
        rounds: plan.rounds,
        ingest_batch: config.ingest_batch,
        clients: config.clients,
        top_k: config.top_k,
        intra_op_threads: config.intra_op_threads,
        server_args: config.server_args.clone(),
        load_average: load_average(),
    };
    for cluster in clusters {
        cluster.stop()?;
    }
    let results = Results { setup, stores };
    println!();
    print!("{}", report::stores_table(&results));
    println!();
    print!("{}", report::table(&results));
    for path in report::write_csv(&config.results_dir, &results)? {
        println!("wrote {}", path.display());
    }
    println!("run time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// One store under measurement: its server and the processes behind it.
struct Store {
    label: String,
    layout: Option<Layout>,
    server: ServerProcess,
    /// The Weaviate nodes' pids (none for the embedded store).
    store_pids: Vec<u32>,
    /// Where the nodes keep their data, for its size (none for the embedded store).
    data_dir: Option<PathBuf>,
    /// `clients` closed-loop clients share these.
    channels: Vec<Channel>,
}

/// Starts a server per store, then ingests and searches on all of them in turns.
async fn measure(
    config: &BenchConfig,
    plan: &Plan,
    server_bin: &std::path::Path,
    server: &ServerConfig,
    corpus: &Corpus,
    clusters: &[WeaviateCluster],
) -> anyhow::Result<Vec<StoreResult>> {
    // The queue-time bound off: the bench measures each store's capacity with
    // closed-loop clients, whose calls wait for full batches by design.
    let defaults =
        || vec![("--intra-op-threads", config.intra_op_threads.to_string().into()), ("--max-queue-ms", "0".into())];
    let mut stores = vec![
        start_store(
            config,
            plan,
            corpus,
            "embedded".into(),
            None,
            ServerCommand::new(server_bin.to_path_buf(), defaults(), &config.server_args),
            None,
        )
        .await?,
    ];
    for cluster in clusters {
        let nodes = cluster.pids.len();
        let layout = Layout {
            nodes,
            shards: server.shards.unwrap_or(nodes),
            replication_factor: server.replication_factor.unwrap_or(nodes.min(3)),
            write: format!("{:?}", server.write_consistency).to_uppercase(),
            read: format!("{:?}", server.read_consistency).to_uppercase(),
        };
        let mut args = cluster.server_args();
        args.extend(config.server_args.iter().cloned());
        let command = ServerCommand::new(server_bin.to_path_buf(), defaults(), &args);
        let label = format!("weaviate {nodes} node{}", if nodes == 1 { "" } else { "s" });
        stores.push(start_store(config, plan, corpus, label, Some(layout), command, Some(cluster)).await?);
    }

    let ingests = ingest_in_turns(config, plan, corpus, &stores).await?;
    let mut counts = Vec::new();
    for (store, (run, cost)) in stores.iter().zip(&ingests) {
        let stats = ingest::index_stats(store.channels[0].clone()).await?;
        let rss = rss_bytes(store.server.pid)?
            + store.store_pids.iter().map(|&pid| rss_bytes(pid)).sum::<anyhow::Result<u64>>()?;
        let data = store.data_dir.as_deref().map(dir_bytes).transpose()?;
        println!(
            "  {}: {} documents in {:.1} s: {:.1} docs/s; index {} documents, {} chunks ({}); {cost}",
            store.label,
            run.documents,
            run.completed.as_secs_f64(),
            run.rate(),
            stats.document_count,
            stats.chunk_count,
            stats.index_kind
        );
        counts.push((stats.document_count, stats.chunk_count, rss, data));
    }

    let searches = search_in_turns(config, plan, corpus, &stores).await?;
    let mut results = Vec::new();
    for (((store, (ingest, ingest_cost)), (search, search_cost)), (documents, chunks, rss, data)) in
        stores.into_iter().zip(ingests).zip(searches).zip(counts)
    {
        println!(
            "  {}: {} searches, {:.1}/s, p50 {:.1} ms, p99 {:.1} ms; {search_cost}",
            store.label,
            search.calls,
            search.rate(),
            embedwire_bench::latency::ms(search.latency.p50),
            embedwire_bench::latency::ms(search.latency.p99)
        );
        for line in store.server.log_tail().iter().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")) {
            println!("  {} server log: {line}", store.label);
        }
        store.server.stop().await?;
        results.push(StoreResult {
            label: store.label,
            layout: store.layout,
            ingest,
            ingest_cost,
            documents,
            chunks,
            rss_after_ingest: rss,
            data_bytes: data,
            search,
            search_cost,
        });
    }
    Ok(results)
}

/// Starts a server on `command`, connects its clients and warms its model up with
/// one-text Embed calls (untimed).
async fn start_store(
    config: &BenchConfig,
    plan: &Plan,
    corpus: &Corpus,
    label: String,
    layout: Option<Layout>,
    command: ServerCommand,
    cluster: Option<&WeaviateCluster>,
) -> anyhow::Result<Store> {
    let (server, took) = ServerProcess::start(&command).await?;
    println!("{label}: server pid {} SERVING after {:.2} s", server.pid, took.as_secs_f64());
    let mut channels = Vec::new();
    for _ in 0..config.clients.div_ceil(config.clients_per_connection) {
        channels.push(server.connect().await?);
    }
    let warmup: Arc<[String]> = corpus.second_ingest.iter().map(|p| p.text.clone()).collect();
    let clients = 4.min(plan.warmup_calls);
    load::run(&channels, clients, warmup, Rpc::Embed, Stop::Calls(plan.warmup_calls / clients)).await?;
    Ok(Store {
        label,
        layout,
        server,
        store_pids: cluster.map(|c| c.pids.clone()).unwrap_or_default(),
        data_dir: cluster.map(|c| c.state_dir().join("data")),
        channels,
    })
}

/// What store `i` is charged for, and what the others are.
fn watched(stores: &[Store], i: usize) -> Watched {
    let others = stores
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .flat_map(|(_, s)| std::iter::once(s.server.pid).chain(s.store_pids.iter().copied()))
        .collect();
    Watched { server: stores[i].server.pid, store: stores[i].store_pids.clone(), others }
}

/// The store indices in the order of turn `turn`: rotated by one each turn, so that
/// no store always comes right after the same other one (whose background work,
/// e.g. Weaviate compacting what it just wrote, would fall on it).
fn turn_order(stores: usize, turn: usize) -> impl Iterator<Item = usize> {
    (0..stores).map(move |k| (turn + k) % stores)
}

/// The corpus into every store, slice by slice.
async fn ingest_in_turns(
    config: &BenchConfig,
    plan: &Plan,
    corpus: &Corpus,
    stores: &[Store],
) -> anyhow::Result<Vec<(IngestRun, Cost)>> {
    println!(
        "Ingest: {} documents into every store in {} slices (calls of {}, to COMPLETED)",
        corpus.documents.len(),
        plan.slices,
        config.ingest_batch
    );
    let slice_len = corpus.documents.len().div_ceil(plan.slices);
    let mut parts: Vec<Vec<(IngestRun, Cost)>> = stores.iter().map(|_| Vec::new()).collect();
    for (slice, paragraphs) in corpus.documents.chunks(slice_len).enumerate() {
        for i in turn_order(stores.len(), slice) {
            let store = &stores[i];
            let meter = Meter::start(watched(stores, i))?;
            let run =
                ingest::ingest(store.channels[0].clone(), paragraphs, ("doc-", slice * slice_len), config.ingest_batch)
                    .await?;
            let cost = meter.finish()?;
            println!(
                "  slice {}/{} {}: {:.1} s, {:.1} docs/s; {cost}",
                slice + 1,
                plan.slices,
                store.label,
                run.completed.as_secs_f64(),
                run.rate()
            );
            parts[i].push((run, cost));
        }
    }
    Ok(parts
        .into_iter()
        .map(|slices| {
            let (runs, costs): (Vec<IngestRun>, Vec<Cost>) = slices.into_iter().unzip();
            (IngestRun::combine(&runs), Cost::sum(&costs))
        })
        .collect())
}

/// Closed-loop Search on every store: a warm-up each, then rounds in turns.
async fn search_in_turns(
    config: &BenchConfig,
    plan: &Plan,
    corpus: &Corpus,
    stores: &[Store],
) -> anyhow::Result<Vec<(LoadResult, Cost)>> {
    let queries: Arc<[String]> = corpus.queries.clone().into();
    let rpc = Rpc::Search { top_k: config.top_k };
    println!(
        "Search: {} clients, one query text per call (top_k {}), {:.0} s per store in {} rounds",
        config.clients,
        config.top_k,
        plan.run_time.as_secs_f64(),
        plan.rounds
    );
    for store in stores {
        load::run(&store.channels, config.clients, queries.clone(), rpc, Stop::After(plan.search_warmup)).await?;
    }
    let round_time = plan.run_time / plan.rounds as u32;
    let mut parts: Vec<Vec<(LoadResult, Cost)>> = stores.iter().map(|_| Vec::new()).collect();
    for round in 0..plan.rounds {
        for i in turn_order(stores.len(), round) {
            let meter = Meter::start(watched(stores, i))?;
            let run =
                load::run(&stores[i].channels, config.clients, queries.clone(), rpc, Stop::After(round_time)).await?;
            let cost = meter.finish()?;
            println!(
                "  round {}/{} {}: {:.1} searches/s, p99 {:.1} ms; {cost}",
                round + 1,
                plan.rounds,
                stores[i].label,
                run.rate(),
                embedwire_bench::latency::ms(run.latency.p99)
            );
            parts[i].push((run, cost));
        }
    }
    Ok(parts
        .into_iter()
        .map(|rounds| {
            let (runs, costs): (Vec<LoadResult>, Vec<Cost>) = rounds.into_iter().unzip();
            (LoadResult::combine(&runs), Cost::sum(&costs))
        })
        .collect())
}

/// Waits for SIGINT or SIGTERM; names it.
async fn interrupted() -> &'static str {
    let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    }
}

/// The bytes of every file under `dir` (the nodes' data: objects, vectors, indexes).
/// Files that go away while it is read (a compaction) are left out.
fn dir_bytes(dir: &std::path::Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?.flatten() {
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => total += dir_bytes(&entry.path()).unwrap_or(0),
            Ok(kind) if kind.is_file() => total += entry.metadata().map_or(0, |m| m.len()),
            _ => {}
        }
    }
    Ok(total)
}

/// The 1, 5 and 15 minute load averages, for the record.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
