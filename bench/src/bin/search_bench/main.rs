//! search-bench: measures in one run, with the real model and the real server
//! binary, what the search feature costs next to plain Embed on the same texts, and
//! prints each figure against its target:
//!
//! 1. the corpus: 10k paragraphs of Python docstrings found on this machine;
//! 2. ingest: the corpus through Embed (calls of 64 from 4 clients) on one server,
//!    and through Ingest on a second, fresh server, from the first call to every job
//!    COMPLETED; target: documents/s >= 0.85 x Embed's texts/s. The two sides
//!    alternate slice by slice (5 slices of 2k), so a change in the machine's load
//!    during the minutes this takes hits both alike;
//! 3. search at concurrency 16 (one text query, top_k 5) on that index, against
//!    Embed of the same query texts at concurrency 16, alternating in rounds;
//!    target: >= 0.9 x;
//! 4. one client's search latency (open loop, a search every 50 ms), idle and while
//!    a second ingest runs.
//!
//! Around every measured run the CPU of the server (per thread name, as `top -H`
//! would show it) and of the bench's own clients is recorded, to show where the
//! time went. Figures are noisy on a shared machine; the ratios are what to compare
//! between runs. A MISS is a result, not a failure: the exit status is non-zero only
//! when the bench could not run.
//!
//! # Layout
//! - [`config`]: the flags, and the amounts of work of a full or `--quick` run.
//! - [`embed_corpus`]: the corpus through Embed, in calls from concurrent clients.
//! - [`padding`]: the model tokens each path costs, padding included (an estimate).
//! - [`report`]: targets, the final table and the CSV file.
//!
//! The corpus, the server process, the closed-loop clients, CPU readings and latency
//! summaries come from the bench crate's library ([`embedwire_bench`]).

mod config;
mod embed_corpus;
mod padding;
mod report;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use clap::Parser;
use embedwire_bench::cpu::{CpuUse, CpuWindow};
use embedwire_bench::latency::{LatencySummary, ms};
use embedwire_bench::load::{self, LoadResult, Rpc, Stop};
use embedwire_bench::server_binary;
use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use embedwire_server::ServerConfig;
use tonic::transport::Channel;

use crate::config::{BenchConfig, Plan};
use crate::embed_corpus::EmbedCorpusRun;
use crate::padding::Batching;
use crate::report::{CorpusSummary, IndexCounts, Measured, ModelWorkEstimate, Results, RunSetup};
use embedwire_bench::corpus::{self, Corpus, Paragraph};
use embedwire_bench::ingest::{self, IngestRun};

fn main() -> anyhow::Result<()> {
    let config = BenchConfig::parse();
    config.validate().map_err(anyhow::Error::msg)?;
    let plan = config.plan();
    let python = config.python().map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    // Before measuring anything: a failed build should not come after minutes.
    let server_bin = server_binary::resolve(config.server_bin.as_deref())?;
    let command = server_command(&config, server_bin);
    let batching = batching(&config)?;

    println!(
        "search-bench{}: {} intra-op threads, server flags: {}",
        if config.quick { " --quick" } else { "" },
        config.intra_op_threads,
        command.args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
    );
    let extracting = Instant::now();
    let docstrings = corpus::docstrings(&python, &config.cache_dir, config.refresh_corpus)?;
    let corpus = corpus::select(&docstrings, plan.documents, plan.second_ingest_documents, config.queries)?;
    drop(docstrings);
    let summary = corpus_summary(&corpus);
    println!(
        "corpus: {} documents ({:.1} words avg), {} for the second ingest, {} queries; from {} docstrings ({} \
         eligible paragraphs, {} query sentences) of {} in {:.1} s",
        summary.documents,
        summary.mean_words,
        summary.second_ingest_documents,
        summary.queries,
        summary.docstrings,
        summary.paragraphs,
        summary.query_candidates,
        python.display(),
        extracting.elapsed().as_secs_f64()
    );

    let runtime = tokio::runtime::Runtime::new()?;
    let results = runtime.block_on(measure(&config, &plan, &command, &corpus, summary, batching))?;
    println!();
    print!("{}", report::table(&results));
    let path = report::write_csv(&config.results_dir, &results)?;
    println!("wrote {}", path.display());
    println!("run time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The server's flags: its defaults, but the bench's intra-op thread count, and
/// the --server-arg flags (which replace a default of the same name).
fn server_command(config: &BenchConfig, binary: std::path::PathBuf) -> ServerCommand {
    // The queue-time bound off: the bench measures capacity with closed-loop
    // clients, whose calls wait for full batches by design.
    let defaults =
        vec![("--intra-op-threads", config.intra_op_threads.to_string().into()), ("--max-queue-ms", "0".into())];
    ServerCommand::new(binary, defaults, &config.server_args)
}

/// The batching limits the server will run with, read the way the server reads
/// its flags (and env twins), for the padding estimate.
fn batching(config: &BenchConfig) -> anyhow::Result<Batching> {
    let mut flags = vec!["embedwire-server".to_string()];
    flags.extend(config.server_args.iter().cloned());
    let server = ServerConfig::try_parse_from(flags)?;
    Ok(Batching {
        max_batch_size: server.max_batch_size,
        max_batch_tokens: server.max_batch_tokens,
        max_bulk_batch_tokens: server.max_bulk_batch_tokens,
        ingest_batch_documents: server.ingest_batch_documents,
    })
}

fn corpus_summary(corpus: &Corpus) -> CorpusSummary {
    let words: usize = corpus.documents.iter().map(|p| p.text.split_whitespace().count()).sum();
    CorpusSummary {
        documents: corpus.documents.len(),
        mean_words: words as f64 / corpus.documents.len().max(1) as f64,
        second_ingest_documents: corpus.second_ingest.len(),
        queries: corpus.queries.len(),
        docstrings: corpus.docstrings,
        paragraphs: corpus.paragraphs,
        query_candidates: corpus.query_candidates,
    }
}

fn texts(paragraphs: &[Paragraph]) -> Arc<[String]> {
    paragraphs.iter().map(|p| p.text.clone()).collect()
}

/// Steps 2 to 4, each server fresh where the step says so.
async fn measure(
    config: &BenchConfig,
    plan: &Plan,
    command: &ServerCommand,
    corpus: &Corpus,
    summary: CorpusSummary,
    batching: Batching,
) -> anyhow::Result<Results> {
    let queries: Arc<[String]> = corpus.queries.clone().into();
    // Warm-up texts: corpus-like paragraphs that are not in the corpus.
    let warmup: Arc<[String]> =
        corpus.second_ingest.iter().cycle().take(plan.warmup_texts).map(|p| p.text.clone()).collect();

    println!(
        "Embed vs Ingest: the corpus in {} slices, each embedded on one server (calls of {} from {} clients), then \
         ingested on a second, fresh server (calls of {}, to COMPLETED)",
        plan.slices, config.embed_batch, config.embed_clients, config.ingest_batch
    );
    let embed_server = start_warm(command, config, &warmup).await?;
    let server = start_warm(command, config, &warmup).await?;
    let (embed_corpus, ingest) = embed_and_ingest(&embed_server, &server, config, plan, &corpus.documents).await?;
    finish(embed_server).await?;
    print_embed_corpus(&embed_corpus);
    let control = server.connect().await?;
    let stats = ingest::index_stats(control.clone()).await?;
    let index = IndexCounts {
        documents: stats.document_count,
        chunks: stats.chunk_count,
        unique_vectors: stats.unique_vector_count,
    };
    print_ingest(&ingest, index, &stats.index_kind);
    let lengths = &embed_corpus.run.token_counts;
    let model_work = ModelWorkEstimate {
        embed: padding::embed_path(lengths, config.embed_batch * config.embed_clients, batching),
        ingest: padding::ingest_path(lengths, batching),
        ingest_sorted: padding::ingest_path_sorted(lengths, batching),
    };
    println!("  model tokens (estimate, padding included): {model_work}");

    let channels = connect(&server, config.clients, config.clients_per_connection).await?;
    let search_rpc = Rpc::Search { top_k: config.top_k };
    println!(
        "Search vs Embed: {} clients, one query text per call (Search top_k {}), {} alternating rounds",
        config.clients, config.top_k, plan.rounds
    );
    let [search, embed_queries] =
        alternate_runs(&server, &channels, config.clients, &queries, [search_rpc, Rpc::Embed], plan).await?;
    print_load("  Search", &search.run, "searches/s");
    println!("    {}", search.cpu);
    print_load("  Embed ", &embed_queries.run, "texts/s");
    println!("    {}", embed_queries.cpu);

    println!(
        "Search latency, one open-loop client, a search every {} ms: idle {:.0} s, then during an ingest",
        plan.latency_interval.as_millis(),
        plan.latency_time.as_secs_f64()
    );
    let single = std::slice::from_ref(&control);
    load::run(single, 1, queries.clone(), search_rpc, Stop::Calls(plan.latency_warmup_calls)).await?;
    let idle_search =
        load::run_paced(&control, queries.clone(), search_rpc, Stop::After(plan.latency_time), plan.latency_interval)
            .await?;
    print_load("  idle", &idle_search, "searches/s");
    let (busy_search, second_ingest) = search_during_ingest(&server, &control, config, plan, corpus, queries).await?;
    print_load("  during ingest", &busy_search.run, "searches/s");
    println!(
        "    {}\n  second ingest: {} documents in {:.1} s ({:.1} docs/s)",
        busy_search.cpu,
        second_ingest.documents,
        second_ingest.completed.as_secs_f64(),
        second_ingest.rate()
    );
    finish(server).await?;

    Ok(Results {
        setup: RunSetup {
            quick: config.quick,
            intra_op_threads: config.intra_op_threads,
            embed_batch: config.embed_batch,
            embed_clients: config.embed_clients,
            ingest_batch: config.ingest_batch,
            clients: config.clients,
            top_k: config.top_k,
            server_args: config.server_args.clone(),
        },
        corpus: summary,
        embed_corpus,
        ingest,
        index,
        model_work,
        search,
        embed_queries,
        idle_search,
        busy_search,
        second_ingest,
    })
}

/// Starts a server with a fresh data directory and embeds `warmup` through it
/// (untimed), so that first-batch allocations stay out of the figures.
async fn start_warm(
    command: &ServerCommand,
    config: &BenchConfig,
    warmup: &Arc<[String]>,
) -> anyhow::Result<ServerProcess> {
    let (server, took) = ServerProcess::start(command).await?;
    println!("  server pid {} SERVING after {:.2} s", server.pid, took.as_secs_f64());
    let channels = connect(&server, config.embed_clients, config.clients_per_connection).await?;
    embed_corpus::embed_all(&channels, config.embed_clients, warmup.clone(), config.embed_batch).await?;
    Ok(server)
}

/// Connections for `clients` clients, `per_connection` of them on each.
async fn connect(server: &ServerProcess, clients: usize, per_connection: usize) -> anyhow::Result<Vec<Channel>> {
    let mut channels = Vec::new();
    for _ in 0..clients.div_ceil(per_connection) {
        channels.push(server.connect().await?);
    }
    Ok(channels)
}

/// Prints the server's warnings and errors, if any, then stops it.
async fn finish(server: ServerProcess) -> anyhow::Result<()> {
    for line in server.log_tail().iter().filter(|line| line.contains(" WARN ") || line.contains(" ERROR ")) {
        println!("  server log: {line}");
    }
    server.stop().await
}

/// The corpus in slices, each embedded on `embed_server` and then ingested on
/// `ingest_server`; the slices of each side combined.
async fn embed_and_ingest(
    embed_server: &ServerProcess,
    ingest_server: &ServerProcess,
    config: &BenchConfig,
    plan: &Plan,
    documents: &[Paragraph],
) -> anyhow::Result<(Measured<EmbedCorpusRun>, Measured<IngestRun>)> {
    let embed_channels = connect(embed_server, config.embed_clients, config.clients_per_connection).await?;
    let ingest_channel = ingest_server.connect().await?;
    let (mut embeds, mut ingests) = (Vec::new(), Vec::new());
    let slice_len = documents.len().div_ceil(plan.slices);
    for (slice, paragraphs) in documents.chunks(slice_len).enumerate() {
        let cpu = CpuWindow::start(embed_server.pid)?;
        let run = embed_corpus::embed_all(&embed_channels, config.embed_clients, texts(paragraphs), config.embed_batch)
            .await?;
        let embed = Measured { cpu: cpu.finish()?, run };
        let cpu = CpuWindow::start(ingest_server.pid)?;
        let run = ingest::ingest(ingest_channel.clone(), paragraphs, ("doc-", slice * slice_len), config.ingest_batch)
            .await?;
        let ingest = Measured { cpu: cpu.finish()?, run };
        println!(
            "  slice {}/{}: Embed {:.1} s ({:.1} texts/s, server {:.2} cores), Ingest {:.1} s ({:.1} docs/s, \
             server {:.2} cores): {:.2} x",
            slice + 1,
            documents.len().div_ceil(slice_len),
            embed.run.elapsed.as_secs_f64(),
            embed.run.rate(),
            embed.cpu.server_cores,
            ingest.run.completed.as_secs_f64(),
            ingest.run.rate(),
            ingest.cpu.server_cores,
            ingest.run.rate() / embed.run.rate()
        );
        embeds.push(embed);
        ingests.push(ingest);
    }
    let combine_cpu = |parts: &[&CpuUse]| CpuUse::combine(&parts.iter().map(|&cpu| cpu.clone()).collect::<Vec<_>>());
    let embed = Measured {
        run: EmbedCorpusRun::combine(&embeds.iter().map(|m| m.run.clone()).collect::<Vec<_>>()),
        cpu: combine_cpu(&embeds.iter().map(|m| &m.cpu).collect::<Vec<_>>()),
    };
    let ingest = Measured {
        run: IngestRun::combine(&ingests.iter().map(|m| m.run.clone()).collect::<Vec<_>>()),
        cpu: combine_cpu(&ingests.iter().map(|m| &m.cpu).collect::<Vec<_>>()),
    };
    Ok((embed, ingest))
}

/// Two closed-loop loads of `clients` clients, each warmed up, then measured in
/// alternating rounds (a, b, a, b, ...) with the CPU recorded; each side's rounds
/// combined.
async fn alternate_runs(
    server: &ServerProcess,
    channels: &[Channel],
    clients: usize,
    texts: &Arc<[String]>,
    rpcs: [Rpc; 2],
    plan: &Plan,
) -> anyhow::Result<[Measured<LoadResult>; 2]> {
    for rpc in rpcs {
        load::run(channels, clients, texts.clone(), rpc, Stop::After(plan.run_warmup)).await?;
    }
    let round_time = plan.run_time / plan.rounds as u32;
    let mut rounds: [Vec<Measured<LoadResult>>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..plan.rounds {
        for (side, rpc) in rpcs.into_iter().enumerate() {
            let cpu = CpuWindow::start(server.pid)?;
            let run = load::run(channels, clients, texts.clone(), rpc, Stop::After(round_time)).await?;
            rounds[side].push(Measured { cpu: cpu.finish()?, run });
        }
    }
    Ok(rounds.map(|side| Measured {
        run: LoadResult::combine(&side.iter().map(|m| m.run.clone()).collect::<Vec<_>>()),
        cpu: CpuUse::combine(&side.iter().map(|m| m.cpu.clone()).collect::<Vec<_>>()),
    }))
}

/// One open-loop client searches from the moment the second ingest's first call leaves
/// until its last job completed.
async fn search_during_ingest(
    server: &ServerProcess,
    control: &Channel,
    config: &BenchConfig,
    plan: &Plan,
    corpus: &Corpus,
    queries: Arc<[String]>,
) -> anyhow::Result<(Measured<LoadResult>, IngestRun)> {
    let ingest_done = Arc::new(AtomicBool::new(false));
    let ingest_channel = server.connect().await?;
    let cpu = CpuWindow::start(server.pid)?;
    let ingesting = async {
        let result = ingest::ingest(ingest_channel, &corpus.second_ingest, ("second-", 0), config.ingest_batch).await;
        ingest_done.store(true, Ordering::Release);
        result
    };
    let searching = load::run_paced(
        control,
        queries,
        Rpc::Search { top_k: config.top_k },
        Stop::When(ingest_done.clone()),
        plan.latency_interval,
    );
    let (second_ingest, busy_search) = tokio::join!(ingesting, searching);
    let cpu = cpu.finish()?;
    Ok((Measured { run: busy_search?, cpu }, second_ingest?))
}

fn print_latency(l: &LatencySummary) -> String {
    format!("p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  max {:.1} ms", ms(l.p50), ms(l.p95), ms(l.p99), ms(l.max))
}

fn print_load(label: &str, load: &LoadResult, unit: &str) {
    println!("{label} {} calls: {:.1} {unit}  {}", load.calls, load.rate(), print_latency(&load.latency));
}

fn print_embed_corpus(embed: &Measured<EmbedCorpusRun>) {
    let run = &embed.run;
    let tokens: u64 = run.token_counts.iter().map(|&t| u64::from(t)).sum();
    println!(
        "  Embed: {} texts ({:.0} tokens avg) in {} calls, {:.2} s: {:.1} texts/s\n    {}",
        run.texts,
        tokens as f64 / run.texts.max(1) as f64,
        run.calls,
        run.elapsed.as_secs_f64(),
        run.rate(),
        embed.cpu
    );
}

fn print_ingest(ingest: &Measured<IngestRun>, index: IndexCounts, kind: &str) {
    let run = &ingest.run;
    println!(
        "  Ingest: {} documents in {} calls: stored after {:.2} s, COMPLETED after {:.2} s: {:.1} docs/s\n    {}\n  \
         index ({kind}): {} documents, {} chunks, {} unique vectors",
        run.documents,
        run.calls,
        run.stored.as_secs_f64(),
        run.completed.as_secs_f64(),
        run.rate(),
        ingest.cpu,
        index.documents,
        index.chunks,
        index.unique_vectors
    );
}
