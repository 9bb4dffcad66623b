//! collections: what named collections cost, at the server's default flags with the real model, in the store of
//! `--store` (embedded by default; weaviate and postgres start a cluster on loopback). (1) Many empty collections: a
//! server restarted on 1,000 of them against one without any (embedded: an empty data directory; a shared store:
//! another `--collection` base in the same store), its start to SERVING and its memory once settled (the rounds
//! alternate, medians taken); with a shared store, also what the collections cost the store (its processes' memory and
//! its data on disk, before and after making them). (2) A collection against the default one on the same server (with
//! a shared store, beside the 1,000): the same paragraphs ingested into each, slice by slice, alternating, and Search
//! at c=16 on the same queries, round by round, alternating. Every target is a ratio in one run, or the bound.

use std::{path::Path, sync::Arc, time::Duration};

use clap::Parser as _;
use embedwire_bench::{
    child_process::fresh_dir,
    corpus::CorpusOptions,
    ingest::{self, IngestRun},
    latency::ms,
    load::{self, LoadResult, Rpc, Stop},
    memory::{dir_bytes, mib, private_bytes, rss_bytes, with_children},
    options::{Common, SearchLoad, at_least_one, connections},
    report::{Report, Row, percentiles},
    server_process::{ServerCommand, ServerProcess},
    store_cluster::{Store, StoreCluster},
};
use embedwire_proto::v1::{CreateCollectionRequest, collection_service_client::CollectionServiceClient};
use embedwire_server::ServerConfig;

/// Empty collections of the idle-cost part (the figure).
const EMPTY_COLLECTIONS: usize = 1_000;
/// More memory than a server without collections, at most (MiB).
const MAX_EXTRA_RSS_MIB: f64 = 50.0;
/// Start to SERVING with them, at most (s).
const MAX_START_SECS: f64 = 1.0;
/// A collection's ingest time and search throughput against the default collection's.
const MAX_COLLECTION_RATIO: f64 = 1.05;
/// Restarts of each side in the idle-cost part.
const START_ROUNDS: usize = 3;
/// Settling time before memory is read: the start's background check of the collections ends well before (the
/// check of 1,000 takes about 2 s).
const SETTLE: Duration = Duration::from_secs(3);
/// Query texts.
const QUERIES: usize = 500;
/// Alternating rounds of the search comparison.
const ROUNDS: usize = 6;
/// The named collection of part (2).
const NAMED: &str = "bench_tenant";
/// A shared store's `--collection` base without named collections, the "none" side of part (1).
const BARE_BASE: &str = "bench_bare";

/// Options of the collections scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub corpus: CorpusOptions,
    #[command(flatten)]
    pub load: SearchLoad,
    /// Where the server keeps its collections: embedded (its data directory), weaviate (a 3-node cluster: a set of
    /// classes per collection) or postgres (a primary and a replica: a schema per collection).
    #[arg(long, value_enum, default_value = "embedded")]
    pub store: Store,
    /// Empty collections of part (1).
    #[arg(long, default_value_t = EMPTY_COLLECTIONS, value_parser = at_least_one::<usize>())]
    pub collections: usize,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let cluster = match args.store {
        Store::Embedded => None,
        store => Some(StoreCluster::start(store.kind())?.0),
    };
    let mut settings = common.clone();
    settings.server_args = [cluster.as_ref().map(StoreCluster::server_args).unwrap_or_default(), common.server_args.clone()]
        .concat();
    // Read as the server reads its flags: the bench must not run a configuration that would refuse to start.
    ServerConfig::try_parse_from(["embedwire-server".to_string()].iter().chain(&settings.server_args))?;
    let command = settings.server_command(common.server_binary()?, vec![]);
    let documents = common.pick(2_000, 60);
    let corpus = args.corpus.select(documents, 0, QUERIES)?;
    let folder = match args.store {
        Store::Embedded => "collections".to_string(),
        store => format!("collections-{}", store.name()),
    };
    let mut report = Report::new(common.results(&folder), &folder)?;
    let measured = tokio::runtime::Runtime::new()?.block_on(async {
        idle_cost(common, &args, &command, cluster.as_ref(), &mut report).await?;
        per_collection(common, &args, &command, &corpus, &mut report).await
    });
    if let Some(cluster) = cluster {
        cluster.stop()?;
    }
    measured?;
    report.finish()
}

/// Part (1): a server on `--collections` empty collections against one without any.
async fn idle_cost(
    common: &Common,
    args: &Args,
    command: &ServerCommand,
    cluster: Option<&StoreCluster>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let count = common.pick(args.collections, 30);
    // What the store's processes hold privately (PostgreSQL's backends included; shared buffers are a fixed size)
    // and keep on disk.
    let store_cost = || {
        let private = |c: &StoreCluster| with_children(&c.pids).iter().map(|&pid| private_bytes(pid).unwrap_or(0)).sum();
        cluster.map(|c| (private(c), dir_bytes(&c.data_dir())))
    };
    let full = fresh_dir("collections");
    let (server, _) = ServerProcess::start_on(command, full.clone(), false).await?;
    let store_before = store_cost();
    let mut admin = CollectionServiceClient::new(server.connect().await?);
    let created = std::time::Instant::now();
    for n in 0..count {
        admin.create_collection(CreateCollectionRequest { name: format!("empty_{n:04}"), settings: None }).await?;
    }
    let create_rate = count as f64 / created.elapsed().as_secs_f64();
    let open_rss = rss_bytes(server.pid)?;
    // Read while the server runs, as before: PostgreSQL's backends live as long as its pooled connections.
    let store_after = store_cost();
    server.stop().await?;
    println!("collections: {count} created ({create_rate:.0}/s), {:.1} MiB with all of them open", mib(open_rss));

    // The side without collections: an empty directory each round, or another base in the shared store (made once
    // here, so that no round's start includes making its classes).
    let bare = match cluster {
        None => command.clone(),
        Some(_) => {
            let mut bare = command.clone();
            bare.args.extend(["--collection".into(), BARE_BASE.into()]);
            let dir = fresh_dir("collections-none");
            ServerProcess::start_on(&bare, dir.clone(), false).await?.0.stop().await?;
            remove(&dir);
            bare
        }
    };
    let (mut plain, mut many) = (Vec::new(), Vec::new());
    for round in 0..common.pick(START_ROUNDS, 1) {
        let empty = fresh_dir("collections-none");
        for (side, command, dir) in [(&mut plain, &bare, &empty), (&mut many, command, &full)] {
            let (server, cold) = ServerProcess::start_on(command, dir.clone(), false).await?;
            tokio::time::sleep(common.pick(SETTLE, Duration::from_secs(1))).await;
            side.push((cold, rss_bytes(server.pid)?));
            server.stop().await?;
        }
        remove(&empty);
        let (a, b) = (plain[round], many[round]);
        println!(
            "round {}: none {:.3} s {:.1} MiB, {count} collections {:.3} s {:.1} MiB",
            round + 1,
            a.0.as_secs_f64(),
            mib(a.1),
            b.0.as_secs_f64(),
            mib(b.1)
        );
    }
    remove(&full);
    let median = |side: &[(Duration, u64)]| {
        let mut starts: Vec<f64> = side.iter().map(|(cold, _)| cold.as_secs_f64()).collect();
        let mut rss: Vec<f64> = side.iter().map(|(_, rss)| mib(*rss)).collect();
        starts.sort_by(f64::total_cmp);
        rss.sort_by(f64::total_cmp);
        (starts[starts.len() / 2], rss[rss.len() / 2])
    };
    let ((plain_start, plain_rss), (many_start, many_rss)) = (median(&plain), median(&many));
    let extra = many_rss - plain_rss;
    report.figures([
        Row::info(format!("create {count} collections"), create_rate, "collections/s", format!("{create_rate:.1}/s")),
        Row::info(format!("RSS with {count} collections open"), mib(open_rss), "MiB", format!("{:.1} MiB", mib(open_rss))),
        Row::info("start to SERVING, no collections", plain_start, "s", format!("{plain_start:.3} s (median)")),
        Row::info(format!("start to SERVING, {count} empty collections"), many_start, "s", format!("{many_start:.3} s"))
            .at_most(MAX_START_SECS, format!("<= {MAX_START_SECS} s")),
        Row::info("RSS settled, no collections", plain_rss, "MiB", format!("{plain_rss:.1} MiB (median)")),
        Row::info(format!("RSS settled, {count} empty collections: extra"), extra, "MiB", format!("{extra:+.1} MiB"))
            .at_most(MAX_EXTRA_RSS_MIB, format!("<= {MAX_EXTRA_RSS_MIB} MiB")),
    ]);
    if let (Some((rss_before, disk_before)), Some((rss_after, disk_after))) = (store_before, store_after) {
        let per = |before: u64, after: u64| mib(after.saturating_sub(before)) / count as f64;
        let (rss_each, disk_each) = (per(rss_before, rss_after), per(disk_before, disk_after));
        report.figures([
            Row::info(format!("store private memory, {count} empty collections: per collection"), rss_each, "MiB", format!(
                "{rss_each:.2} MiB ({:.0} -> {:.0} MiB)",
                mib(rss_before),
                mib(rss_after)
            )),
            Row::info(format!("store data, {count} empty collections: per collection"), disk_each, "MiB", format!(
                "{disk_each:.2} MiB ({:.0} -> {:.0} MiB)",
                mib(disk_before),
                mib(disk_after)
            )),
        ]);
    }
    Ok(())
}

fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// Part (2): the same work in the default collection and in a named one, alternating.
async fn per_collection(
    common: &Common,
    args: &Args,
    command: &ServerCommand,
    corpus: &embedwire_bench::corpus::Corpus,
    report: &mut Report,
) -> anyhow::Result<()> {
    let (server, _) = ServerProcess::start(command).await?;
    let channel = server.connect().await?;
    let create = CreateCollectionRequest { name: NAMED.into(), settings: None };
    CollectionServiceClient::new(channel.clone()).create_collection(create).await?;
    // Warm the model and both collections' paths.
    let warm = &corpus.documents[..corpus.documents.len().min(32)];
    for collection in ["", NAMED] {
        ingest::ingest_into(channel.clone(), collection, warm, ("warm-", 0), args.load.ingest_batch).await?;
    }
    let (mut default_runs, mut named_runs) = (Vec::new(), Vec::new());
    let slice_len = corpus.documents.len().div_ceil(common.pick(6, 2));
    for (slice, paragraphs) in corpus.documents.chunks(slice_len).enumerate() {
        // Alternate which side goes first, so a drift in the machine's load hits both alike.
        let order = if slice % 2 == 0 { ["", NAMED] } else { [NAMED, ""] };
        for collection in order {
            let run = ingest::ingest_into(channel.clone(), collection, paragraphs, ("doc-", slice * slice_len), args.load.ingest_batch)
                .await?;
            if collection.is_empty() { &mut default_runs } else { &mut named_runs }.push(run);
        }
    }
    let (ingest_default, ingest_named) = (IngestRun::combine(&default_runs), IngestRun::combine(&named_runs));

    let channels = connections(&server, args.load.clients.div_ceil(args.load.clients_per_connection)).await?;
    let queries: Arc<[String]> = corpus.queries.clone().into();
    let rpc = |collection| Rpc::Search { top_k: args.load.top_k, collection };
    for collection in ["", NAMED] {
        load::run(&channels, args.load.clients, queries.clone(), rpc(collection), Stop::After(common.warmup(2.0, 0.2)))
            .await?;
    }
    let round = common.duration(12.0, 1.2) / ROUNDS as u32;
    let (mut default_search, mut named_search) = (Vec::new(), Vec::new());
    for r in 0..ROUNDS {
        let order = if r % 2 == 0 { ["", NAMED] } else { [NAMED, ""] };
        for collection in order {
            let run = load::run(&channels, args.load.clients, queries.clone(), rpc(collection), Stop::After(round)).await?;
            if collection.is_empty() { &mut default_search } else { &mut named_search }.push(run);
        }
    }
    server.stop().await?;
    let (search_default, search_named) = (LoadResult::combine(&default_search), LoadResult::combine(&named_search));

    let (ingest_a, ingest_b) = (ingest_default.completed.as_secs_f64(), ingest_named.completed.as_secs_f64());
    let (search_a, search_b) = (search_default.rate(), search_named.rate());
    println!("ingest: default {ingest_a:.1} s, {NAMED} {ingest_b:.1} s; search: {search_a:.1} /s, {search_b:.1} /s");
    let c = args.load.clients;
    let documents = ingest_default.documents;
    report.figures([
        Row::info(format!("ingest {documents} docs, default collection"), ingest_a, "s", format!("{ingest_a:.1} s")),
        Row::info(format!("ingest {documents} docs, a collection / default"), ingest_b / ingest_a, "x", format!("{ingest_b:.1} s"))
            .at_most(MAX_COLLECTION_RATIO, format!("<= {MAX_COLLECTION_RATIO} x")),
        Row::info(format!("Search c={c}, default collection"), search_a, "searches/s", percentiles(&search_default.latency)),
        Row::info(format!("Search c={c}, default / a collection"), search_a / search_b, "x", percentiles(&search_named.latency))
            .at_most(MAX_COLLECTION_RATIO, format!("<= {MAX_COLLECTION_RATIO} x (throughput)")),
        Row::info(
            format!("Search c={c} p50, a collection / default"),
            ms(search_named.latency.p50) / ms(search_default.latency.p50).max(1e-6),
            "x",
            format!("{:.2} / {:.2} ms", ms(search_named.latency.p50), ms(search_default.latency.p50)),
        ),
    ]);
    Ok(())
}
