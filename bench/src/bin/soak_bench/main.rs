//! soak-bench: ten minutes of mixed load on the real server (real model, default
//! flags), then the soak targets:
//!
//! 1. the index: 3000 paragraphs of Python docstrings ingested to COMPLETED;
//! 2. the mix's maximum: 32 closed-loop clients making the mix's calls for 20 s,
//!    answered calls per second. (An Ingest is answered once stored; its embedding
//!    runs afterwards, in the background, at a lower priority.)
//! 3. the soak: the same mix open loop at 80% of that maximum, calls leaving on a
//!    fixed schedule whatever the answers, so a slow minute is sampled as densely
//!    as a fast one (no coordinated omission). The mix is 70% Embed of 1 to 32
//!    paragraphs, 25% Search with one query sentence (top 10), 5% Ingest of 4
//!    documents whose ids cycle through a set of 200, so the index stops growing
//!    once they all exist (RSS growth then shows leaks, not data). The server's RSS
//!    is sampled every second.
//! 4. the figures: calls by kind and outcome; errors other than
//!    RESOURCE_EXHAUSTED, ingest jobs included (target 0); RSS growth, the mean of
//!    the last minute against the first minute after a warm-up minute (target at
//!    most 10%); p99 drift, the last minute's p99 against that first minute's, for
//!    Embed and for Search (target at most 20%; Ingest's is printed).
//!
//! The client runs on the same (small, shared) machine as the server: the
//! generator's own lag is printed so a late client can be told from a slow server.
//! A MISS is a result, not a failure: the exit status is non-zero only when the
//! bench could not run.
//!
//! # Layout
//! - [`config`]: the flags, and the amounts of work of a full or `--quick` run.
//! - [`cpu_sampling`]: the server's, the bench's and the other processes' CPU,
//!   second by second.
//! - [`mix`]: the mixed calls, chosen and filled from a hash of the call number.
//! - [`windows`]: the per-minute tallies, RSS growth and p99 drift.
//! - [`report`]: the rows of the table and the CSV files.
//!
//! The server process, the corpus, ingestion, RSS sampling and both load
//! generators come from the bench crate's library ([`embedwire_bench`]).

mod config;
mod cpu_sampling;
mod mix;
mod report;
mod windows;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use embedwire_bench::closed_loop;
use embedwire_bench::corpus::{self, Corpus};
use embedwire_bench::cpu::CpuWindow;
use embedwire_bench::ingest;
use embedwire_bench::latency::ms;
use embedwire_bench::load::Stop;
use embedwire_bench::memory::{RssSampler, mib, rss_bytes};
use embedwire_bench::open_loop::{self, Schedule};
use embedwire_bench::server_binary;
use embedwire_bench::server_process::{ServerCommand, ServerProcess};
use embedwire_bench::targets;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{GetJobRequest, JobStatus};
use tonic::transport::Channel;

use crate::config::{BenchConfig, Plan};
use crate::cpu_sampling::CpuSampler;
use crate::mix::{Kind, MixInputs, MixShape, MixWorker, MixedLoad};
use crate::report::{IngestCheck, RateSetting, Results};
use crate::windows::Windows;

/// RSS and CPU sampling interval during the soak.
const RSS_INTERVAL: Duration = Duration::from_secs(1);
/// Query sentences searched for.
const QUERIES: usize = 500;
/// Documents per Ingest call when building the index.
const POPULATE_BATCH: usize = 500;
/// A bound on the soak's unanswered calls, far above what 80% load keeps waiting.
const MAX_IN_FLIGHT: usize = 20_000;
/// How often the ingest backlog is polled after the load.
const DRAIN_POLL: Duration = Duration::from_millis(200);

fn main() -> anyhow::Result<()> {
    let config = BenchConfig::parse();
    config.validate().map_err(anyhow::Error::msg)?;
    let plan = config.plan();
    let python = config.python().map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    let server_bin = server_binary::resolve(config.server_bin.as_deref())?;
    let command = ServerCommand::new(server_bin, Vec::new(), &config.server_args);
    println!(
        "soak-bench{}: {} windows of {} s ({} warm-up), mix Embed/Search/Ingest {:?}, server flags: [{}]",
        if config.quick { " --quick" } else { "" },
        plan.windows,
        plan.window.as_secs(),
        config.warmup_windows,
        config.mix,
        command.args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
    );
    println!("{} at the start", load_average());
    let docstrings = corpus::docstrings(&python, &config.cache_dir, false)?;
    let corpus = corpus::select(&docstrings, plan.documents, plan.ingest_texts, QUERIES)?;
    drop(docstrings);

    let runtime = tokio::runtime::Runtime::new()?;
    let results = runtime.block_on(measure(&config, &plan, &command, corpus))?;
    let rows = report::rows(&results);
    println!();
    print!("{}", targets::table(&rows));
    for error in &results.windows.first_errors {
        println!("  error: {error}");
    }
    let paths = report::write_csv(&config.results_dir, &rows, &results.windows)?;
    for path in paths {
        println!("wrote {}", path.display());
    }
    println!("run time {:.1} s; {}", started.elapsed().as_secs_f64(), load_average());
    Ok(())
}

/// Steps 1 to 3 on one server.
async fn measure(
    config: &BenchConfig,
    plan: &Plan,
    command: &ServerCommand,
    corpus: Corpus,
) -> anyhow::Result<Results> {
    let (server, cold_start) = ServerProcess::start(command).await?;
    println!("server pid {} ready in {:.2} s", server.pid, cold_start.as_secs_f64());
    let mut channels = Vec::with_capacity(config.connections);
    for _ in 0..config.connections {
        channels.push(server.connect().await?);
    }

    let populated = ingest::ingest(channels[0].clone(), &corpus.documents, ("soak-doc-", 0), POPULATE_BATCH).await?;
    let documents_before = ingest::index_stats(channels[0].clone()).await?.document_count;
    println!(
        "index: {} documents ingested to COMPLETED in {:.1} s ({:.0} docs/s); RSS {:.1} MiB",
        populated.documents,
        populated.completed.as_secs_f64(),
        populated.rate(),
        mib(rss_bytes(server.pid)?)
    );

    let inputs = MixInputs {
        embed_texts: corpus.documents.iter().map(|p| p.text.clone()).collect(),
        queries: corpus.queries.clone().into(),
        ingest_documents: corpus.second_ingest.clone().into(),
    };
    let weights = [config.mix[0], config.mix[1], config.mix[2]];
    let shape = MixShape {
        weights,
        embed_max_texts: config.embed_max_texts,
        top_k: config.top_k,
        ingest_batch: config.ingest_batch,
        ingest_ids: plan.ingest_ids,
    };
    let load = Arc::new(MixedLoad::new(&channels, inputs, shape));

    let setting = match config.rate {
        Some(rate) => RateSetting { max_rate: None, max_clients: 0, max_errors: 0, rate },
        None => {
            let workers = (0..config.max_clients)
                .map(|worker| MixWorker { load: load.clone(), worker, workers: config.max_clients })
                .collect();
            let run = closed_loop::run(workers, Stop::After(plan.max_time)).await?;
            if let Some(error) = &run.first_error {
                println!("  the maximum's run had {} failed calls, the first: {error}", run.errors());
            }
            let max = run.rate();
            anyhow::ensure!(max > 0.0, "no call succeeded while measuring the maximum");
            println!(
                "max mix rate: {max:.1} calls/s ({} clients, closed loop, {:.0} s; latency p50 {:.1} ms, p99 {:.1} ms)",
                config.max_clients,
                run.elapsed.as_secs_f64(),
                ms(run.latency().p50),
                ms(run.latency().p99)
            );
            let rate = max * config.load_fraction;
            RateSetting { max_rate: Some(max), max_clients: config.max_clients, max_errors: run.errors(), rate }
        }
    };

    println!(
        "soak: {:.1} calls/s open loop for {} s, windows of {} s",
        setting.rate,
        plan.soak_time().as_secs(),
        plan.window.as_secs()
    );
    let schedule = Schedule { rate: setting.rate, duration: plan.soak_time(), max_in_flight: MAX_IN_FLIGHT };
    let mut windows = Windows::new(plan.window, plan.windows, config.warmup_windows);
    let sampler = RssSampler::start(server.pid, RSS_INTERVAL);
    let cpu_sampler = CpuSampler::start(server.pid, RSS_INTERVAL);
    let cpu = CpuWindow::start(server.pid)?;
    let mut progress = Progress::new(plan.window);
    let run = open_loop::run(load.clone(), schedule, |sample| {
        windows.add(&sample);
        progress.maybe_print(&sample, &windows, server.pid);
    })
    .await?;
    let cpu = cpu.finish()?;
    println!("  cpu during the soak: {cpu}");
    let series = sampler.finish(server.pid).await?;
    windows.add_rss(&series);
    windows.add_cpu(&cpu_sampler.finish().await?);
    if run.held_back > 0 {
        println!("  the generator held back {} calls at its bound of {MAX_IN_FLIGHT} in flight", run.held_back);
    }

    let ingest = check_ingest(&channels[0], &load, plan.drain_timeout, documents_before).await?;
    if let Some(failure) = &ingest.first_failure {
        println!("  first failed ingest job: {failure}");
    }
    server.stop().await?;
    Ok(Results { setting, windows, sent: run.sent, held_back: run.held_back, ingest, cpu })
}

/// Prints a line per window while the soak runs, once the window's calls have
/// most likely all been answered.
struct Progress {
    window: Duration,
    /// Windows printed so far.
    printed: usize,
    /// Wait after a window's end before printing it.
    slack: Duration,
}

impl Progress {
    fn new(window: Duration) -> Self {
        Progress { window, printed: 0, slack: (window / 4).min(Duration::from_secs(5)) }
    }

    fn maybe_print(&mut self, sample: &open_loop::Sample, windows: &Windows, pid: u32) {
        let end = self.window * (self.printed + 1) as u32 + self.slack;
        if sample.due < end || self.printed + 1 >= windows.windows.len() {
            return;
        }
        let window = &windows.windows[self.printed];
        let cells: Vec<String> = Kind::ALL
            .iter()
            .map(|kind| {
                let tally = &window.kinds[kind.index()];
                format!(
                    "{} {} ok/{} RE/{} err p99 {:.1} ms",
                    kind.name(),
                    tally.ok,
                    tally.rejected,
                    tally.failed,
                    ms(tally.latency().p99)
                )
            })
            .collect();
        let rss = rss_bytes(pid).map(mib).unwrap_or(f64::NAN);
        println!("  window {:>2} (answered by now): {}; RSS now {rss:.1} MiB", self.printed + 1, cells.join(", "));
        self.printed += 1;
    }
}

/// Waits for the ingest backlog to drain, then checks every job the load created.
async fn check_ingest(
    channel: &Channel,
    load: &MixedLoad,
    timeout: Duration,
    documents_before: u64,
) -> anyhow::Result<IngestCheck> {
    let waiting = Instant::now();
    let mut drained_secs = None;
    while waiting.elapsed() < timeout {
        if ingest::index_stats(channel.clone()).await?.pending_documents == 0 {
            drained_secs = Some(waiting.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
    let jobs = load.jobs();
    let mut client = SearchServiceClient::new(channel.clone());
    let mut check = IngestCheck { jobs: jobs.len(), drained_secs, documents_before, ..Default::default() };
    for job_id in jobs {
        let job = client
            .get_job(GetJobRequest { job_id: job_id.clone() })
            .await
            .with_context(|| format!("GetJob {job_id}"))?
            .into_inner()
            .job
            .context("GetJob answered without a job")?;
        let completed = job.status == JobStatus::Completed as i32 && job.failed_documents == 0;
        if !completed {
            check.failed_jobs += 1;
            check.first_failure.get_or_insert_with(|| {
                format!(
                    "job {} {:?}: {} of {} processed, {} failed: {}",
                    job.job_id,
                    JobStatus::try_from(job.status).unwrap_or(JobStatus::Unspecified),
                    job.processed_documents,
                    job.total_documents,
                    job.failed_documents,
                    job.error
                )
            });
        }
    }
    check.documents_after = ingest::index_stats(channel.clone()).await?.document_count;
    println!(
        "ingest: {} documents sent in {} jobs during the run, {} jobs not completed; backlog {}",
        load.ingested_documents(),
        check.jobs,
        check.failed_jobs,
        drained_secs.map_or("not drained in time".into(), |s| format!("drained in {s:.1} s"))
    );
    Ok(check)
}

/// The machine's load averages, printed at the start and the end: the machine is
/// shared, and other work running meanwhile is part of what the figures mean.
fn load_average() -> String {
    let loads = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!("load average {}", loads.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}
