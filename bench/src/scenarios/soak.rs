//! soak: ten minutes of mixed load on the real server (real model, default flags) against the soak targets: no errors
//! besides RESOURCE_EXHAUSTED, RSS growth <= 10% and p99 drift <= 20%, last window against the first after a warm-up.
//! The mix's maximum is measured closed loop, then 80% of it is offered open loop, so a slow minute is sampled as
//! densely as a fast one; the client's lag and the other processes' CPU are printed beside.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use embedwire_bench::{
    closed_loop::{self, Caller},
    corpus::{CorpusOptions, Paragraph},
    cpu::{CpuWindow, cpu_time, machine_busy_time},
    ingest,
    latency::{LatencySummary, ms},
    load::Stop,
    memory::{RssSeries, mib, rss_bytes},
    open_loop::{self, Call, Outcome, Schedule, Tally},
    options::{Common, connections},
    report::{Report, Row, Table},
    server_process::ServerProcess,
};
use embedwire_proto::v1::{
    Document, EmbedRequest, GetJobRequest, IngestRequest, JobStatus, SearchQuery, SearchRequest,
    embed_service_client::EmbedServiceClient, search_query::Query, search_service_client::SearchServiceClient,
};
use tonic::transport::Channel;

/// Most RSS growth and p99 drift, percent, first measured window to last.
const MAX_RSS_GROWTH_PERCENT: f64 = 10.0;
const MAX_P99_DRIFT_PERCENT: f64 = 20.0;
/// Percent of the calls that are Embed, Search and Ingest.
const MIX: [u64; 3] = [70, 25, 5];
const KINDS: [&str; 3] = ["Embed", "Search", "Ingest"];
/// The soak's rate, as a fraction of the mix's maximum.
const LOAD_FRACTION: f64 = 0.8;
/// Closed-loop clients measuring the maximum: enough to keep the model busy, few enough for the bound.
const MAX_CLIENTS: usize = 8;
/// Leading windows left out of the comparisons: allocators, arenas and the index settle in them.
const WARMUP_WINDOWS: usize = 1;
/// Document ids the soak's ingests cycle through (full, --quick): they wrap within minutes.
const INGEST_IDS: (usize, usize) = (200, 40);
/// Texts of an Embed (1 to this many), hits of a Search, documents of an Ingest (soak, populating).
const EMBED_MAX_TEXTS: usize = 32;
const TOP_K: u32 = 10;
const INGEST_BATCH: usize = 4;
const POPULATE_BATCH: usize = 500;
const QUERIES: usize = 500;
const CONNECTIONS: usize = 4;
/// Unanswered calls at most, far above what 80% load keeps waiting.
const MAX_IN_FLIGHT: usize = 20_000;
const WINDOWS_COLUMNS: &str = "window,start_s,warmup,rss_mean_mib,rss_max_mib,server_cores,bench_cores,other_cores,\
    embed_ok,embed_rejected,embed_errors,embed_p50_ms,embed_p99_ms,search_ok,search_rejected,search_errors,\
    search_p50_ms,search_p99_ms,ingest_ok,ingest_rejected,ingest_errors,ingest_p50_ms,ingest_p99_ms";

/// Options of the soak scenario; --duration-secs is the soak's length, warm-up window included
/// [default: 600, --quick: 6].
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub corpus: CorpusOptions,
}

/// A window of the soak: calls by kind and outcome, RSS, busy cores (server, bench, others).
#[derive(Debug, Clone, Default)]
struct Window {
    kinds: [Tally; 3],
    rss: RssSeries,
    cores: Option<[f64; 3]>,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    // RSS and p99 are compared window against window.
    let window = Duration::from_secs(common.pick(60, 2));
    let windows = (common.duration(600.0, 6.0).as_secs_f64() / window.as_secs_f64().max(1e-9)) as usize;
    anyhow::ensure!(windows >= WARMUP_WINDOWS + 2, "{windows} windows: too few to compare");
    // The summary, also under the name it always had.
    let mut report = Report::new(common.results(""), "soak_bench")?.summary_also_as("soak_bench.csv");
    println!("soak: {windows} windows of {} s ({WARMUP_WINDOWS} warm-up), mix {MIX:?}", window.as_secs());
    let mut windows = vec![Window::default(); windows];
    let errors =
        tokio::runtime::Runtime::new()?.block_on(measure(common, &args, window, (&mut windows, &mut report)))?;
    let mut table = Table::new(WINDOWS_COLUMNS);
    for (i, w) in windows.iter().enumerate() {
        let (start, warmup) = (window.as_secs_f64() * i as f64, u8::from(i < WARMUP_WINDOWS));
        let mut cells = vec![(i + 1).to_string(), format!("{start:.0}"), warmup.to_string()];
        cells.extend([w.rss.mean(), w.rss.peak()].map(|bytes| format!("{:.1}", mib(bytes))));
        cells.extend(w.cores.unwrap_or([f64::NAN; 3]).map(|cores| format!("{cores:.2}")));
        for tally in &w.kinds {
            let latency = tally.latency();
            cells.extend([tally.ok.len(), tally.rejected.len(), tally.failed].map(|count| count.to_string()));
            cells.extend([latency.p50, latency.p99].map(|time| format!("{:.2}", ms(time))));
        }
        table.row(cells);
    }
    report.table("soak_bench_windows.csv", &table)?;
    report.finish()?;
    errors.iter().for_each(|error| println!("  error: {error}"));
    Ok(())
}

/// Populates the index, measures the maximum, soaks, checks the jobs; the figures go to `report`, the first
/// failures are returned.
async fn measure(
    common: &Common,
    args: &Args,
    window: Duration,
    (windows, report): (&mut [Window], &mut Report),
) -> anyhow::Result<Vec<String>> {
    let ingest_ids = common.pick(INGEST_IDS.0, INGEST_IDS.1);
    // Documents ingested before any load, so searches run on a real index; twice the
    // ids to ingest during the soak, so an upsert usually brings a new text to embed.
    let corpus = args.corpus.select(common.pick(3000, 200), 2 * ingest_ids, QUERIES)?;
    let (server, took) = ServerProcess::start(&common.server_command(common.server_binary()?, Vec::new())).await?;
    let channels = connections(&server, CONNECTIONS).await?;
    let populated = ingest::ingest(channels[0].clone(), &corpus.documents, ("soak-doc-", 0), POPULATE_BATCH).await?;
    let documents_before = ingest::index_stats(channels[0].clone()).await?.document_count;
    let (count, secs) = (populated.documents, populated.completed.as_secs_f64());
    println!("server ready in {:.2} s; {count} documents to COMPLETED in {secs:.1} s", took.as_secs_f64());
    let load = Arc::new(MixedLoad {
        channels: channels.clone(),
        texts: corpus.documents.iter().map(|p| p.text.clone()).collect(),
        queries: corpus.queries.into(),
        documents: corpus.second_ingest.into(),
        ingest_ids,
        ingested: AtomicU64::new(0),
        jobs: Mutex::new(Vec::new()),
    });

    let workers = (0..MAX_CLIENTS).map(|worker| MixWorker { load: load.clone(), worker }).collect();
    let run = closed_loop::run(workers, Stop::After(Duration::from_secs(common.pick(20, 2)))).await?;
    let (max, errors, first) = (run.rate(), run.errors(), run.first_error);
    anyhow::ensure!(max > 0.0, "no call succeeded while measuring the maximum: {first:?}");
    println!("max mix rate: {max:.1} calls/s ({errors} failed calls, the first: {first:?})");
    let text = format!("{max:.1} calls/s ({errors} failed calls)");
    report.figure(Row::info(format!("max mix rate (closed loop, {MAX_CLIENTS} clients)"), max, "calls/s", text));
    let rate = max * LOAD_FRACTION;
    let schedule = Schedule { rate, duration: window * windows.len() as u32, max_in_flight: MAX_IN_FLIGHT };
    println!("soak: {rate:.1} calls/s open loop for {} s", schedule.duration.as_secs());
    let mut totals = <[Tally; 3]>::default();
    let (started, cpu, mut samples) = (Instant::now(), CpuWindow::start(server.pid)?, Vec::new());
    let soak = open_loop::run(load.clone(), schedule, |sample| {
        let index = ((sample.due.as_secs_f64() / window.as_secs_f64()) as usize).min(windows.len() - 1);
        windows[index].kinds[sample.kind].add(&sample);
        totals[sample.kind].add(&sample);
    });
    // RSS, and CPU of server, bench and machine: other work taking the cores looks like a slower server.
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    let run = {
        tokio::pin!(soak);
        loop {
            tokio::select! {
                run = &mut soak => break run?,
                _ = ticks.tick() => {
                    let cpu = [cpu_time(server.pid)?, cpu_time(std::process::id())?, machine_busy_time()?];
                    samples.push((started.elapsed(), rss_bytes(server.pid)?, cpu));
                }
            }
        }
    };
    let cpu = cpu.finish()?;
    for (i, w) in windows.iter_mut().enumerate() {
        let (start, end) = (window * i as u32, window * (i + 1) as u32);
        w.rss.samples = samples.iter().filter(|s| s.0 >= start && s.0 < end).map(|s| (s.0, s.1)).collect();
        if let [first, .., last] = samples.iter().filter(|s| s.0 >= start && s.0 <= end).collect::<Vec<_>>()[..] {
            let wall = (last.0 - first.0).as_secs_f64().max(1e-9);
            let [server, bench, all] = [0, 1, 2].map(|k| last.2[k].saturating_sub(first.2[k]).as_secs_f64() / wall);
            w.cores = Some([server, bench, (all - server - bench).max(0.0)]);
        }
    }
    // Waits for the ingest backlog to drain, then checks every job the load created.
    let (waiting, limit) = (Instant::now(), common.pick(Duration::from_secs(120), Duration::from_secs(30)));
    let pending = async || anyhow::Ok(ingest::index_stats(channels[0].clone()).await?.pending_documents);
    while pending().await? > 0 && waiting.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drained = (pending().await? == 0).then(|| waiting.elapsed().as_secs_f64());
    let (jobs, mut failed_jobs) = (load.jobs.lock().map(|jobs| jobs.clone()).unwrap_or_default(), Vec::new());
    let mut client = SearchServiceClient::new(channels[0].clone());
    for job_id in jobs.iter().cloned() {
        let job = client.get_job(GetJobRequest { job_id, ..Default::default() }).await.context("GetJob")?.into_inner().job;
        let job = job.context("GetJob answered without a job")?;
        if job.status != JobStatus::Completed as i32 || job.failed_documents > 0 {
            failed_jobs.push(format!("ingest job not completed: {job:?}"));
        }
    }
    let documents_after = ingest::index_stats(channels[0].clone()).await?.document_count;
    server.stop().await?;
    let minutes = schedule.duration.as_secs_f64() / 60.0;
    let length = format!("{minutes:.1} min, {} calls sent ({} held back)", run.sent, run.held_back);
    report.figure(Row::info("soak rate (open loop)", rate, "calls/s", format!("{rate:.1} calls/s")));
    report.figure(Row::info("soak length", minutes, "min", length));
    for (kind, total) in KINDS.iter().zip(&totals) {
        let (ok, rejected, failed, latency) = (total.ok.len(), total.rejected.len(), total.failed, total.latency());
        let (p50, p99) = (ms(latency.p50), ms(latency.p99));
        let calls = format!("{ok} ok, {rejected} RESOURCE_EXHAUSTED, {failed} other errors");
        report.figure(Row::info(format!("{kind} calls"), (ok + rejected + failed) as f64, "calls", calls));
        let latency = format!("p50 {p50:.1} / p99 {p99:.1} ms");
        report.figure(Row::info(format!("{kind} p99 (whole soak)"), p99, "ms", latency));
    }
    let lag = ms(LatencySummary::from_samples(totals.iter().flat_map(|t| t.lags.iter().copied()).collect()).p99);
    let server = format!("{:.2} cores (the bench's clients: {:.2})", cpu.server_cores, cpu.bench_cores);
    let others: Vec<f64> = windows.iter().filter_map(|w| w.cores.map(|cores| cores[2])).collect();
    let per_window: Vec<_> = windows.iter().map(|w| w.cores.map_or("?".into(), |c| format!("{:.1}", c[2]))).collect();
    let mean_others = others.iter().sum::<f64>() / others.len().max(1) as f64;
    let completed = jobs.len() - failed_jobs.len();
    let drained = drained.map_or("NOT in time".into(), |s| format!("in {s:.1} s"));
    let jobs = format!("{completed} of {}; backlog drained {drained}", jobs.len());
    let documents = format!("{documents_after} (before the soak: {documents_before})");
    let (first, last) = (&windows[WARMUP_WINDOWS], &windows[windows.len() - 1]);
    let compared = format!("window {} -> {}", WARMUP_WINDOWS + 1, windows.len());
    let (first_rss, last_rss) = (mib(first.rss.mean()), mib(last.rss.mean()));
    let errors = totals.iter().map(|t| t.failed).sum::<usize>() + failed_jobs.len();
    let errors_text = format!("{errors} (calls and ingest jobs)");
    report.figures([
        Row::info("generator lag p99", lag, "ms", format!("{lag:.2} ms")),
        Row::info("server CPU during the soak", cpu.server_cores, "cores", server),
        Row::info("other processes' CPU per window", mean_others, "cores", format!("{} cores", per_window.join(" "))),
        Row::info("ingest jobs completed", completed as f64, "jobs", jobs),
        Row::info("index documents after", documents_after as f64, "documents", documents),
        Row::info(format!("RSS mean, {compared}"), last_rss, "MiB", format!("{first_rss:.1} -> {last_rss:.1} MiB")),
        Row::info("errors besides RESOURCE_EXHAUSTED", errors as f64, "errors", errors_text).at_most(0.0, "0".into()),
    ]);
    // Growth in percent; a comparison without data (no RSS sample, no answered call) never passes.
    let growth = |first: f64, last: f64| {
        let growth = (first > 0.0).then(|| (last - first) / first * 100.0);
        (growth.unwrap_or(f64::INFINITY), growth.map_or("n/a".into(), |g| format!("{g:+.1}%")))
    };
    let (rss_growth, text) = growth(first_rss, last_rss);
    let rss_row = Row::info(format!("RSS growth, {compared}"), rss_growth, "%", text);
    report.figure(rss_row.at_most(MAX_RSS_GROWTH_PERCENT, format!("<= {MAX_RSS_GROWTH_PERCENT:.0}%")));
    for (k, kind) in KINDS.iter().enumerate() {
        let (first, last) = (first.kinds[k].latency(), last.kinds[k].latency());
        let (first_p99, last_p99) = (ms(first.p99), ms(last.p99));
        let (drift, text) = growth(if first.count * last.count == 0 { 0.0 } else { first_p99 }, last_p99);
        let measured = format!("{text} ({first_p99:.1} -> {last_p99:.1} ms)");
        let row = Row::info(format!("{kind} p99 drift, {compared}"), drift, "%", measured);
        // Ingest is a few percent of the calls: a window's p99 of a handful of ingests
        // is close to their maximum, so it is printed, not judged.
        let target = format!("<= {MAX_P99_DRIFT_PERCENT:.0}%");
        report.figure(if k == 2 { row } else { row.at_most(MAX_P99_DRIFT_PERCENT, target) });
    }
    let errors = KINDS.iter().zip(&totals).flat_map(|(kind, t)| t.first_error.as_ref().map(|e| format!("{kind}: {e}")));
    Ok(errors.chain(failed_jobs.into_iter().take(1)).collect())
}

/// The mix's calls. Call n's kind and inputs follow from a hash of n: every run makes the same calls in the same
/// order, with no period a batcher could lock onto.
struct MixedLoad {
    channels: Vec<Channel>,
    texts: Arc<[String]>,
    queries: Arc<[String]>,
    /// Documents the soak's ingests send (none in the index beforehand), their ids cycling.
    documents: Arc<[Paragraph]>,
    ingest_ids: usize,
    /// Documents sent by Ingest so far: the next call's ids and texts start here.
    ingested: AtomicU64,
    /// The job of every accepted Ingest, checked when the load is over.
    jobs: Mutex<Vec<String>>,
}

impl Call for MixedLoad {
    async fn call(&self, n: u64) -> (usize, Outcome) {
        let pick = splitmix64(n) % MIX.iter().sum::<u64>();
        // A second hash for the inputs, independent of the kind's.
        let (hash, channel) =
            (splitmix64(n ^ 0x5bd1_e995_5bd1_e995), self.channels[n as usize % self.channels.len()].clone());
        if pick < MIX[0] {
            let count = 1 + (hash >> 32) as usize % EMBED_MAX_TEXTS;
            let first = (hash & 0xffff_ffff) as usize;
            let inputs = (0..count).map(|i| self.texts[(first + i) % self.texts.len()].clone()).collect();
            let answer = EmbedServiceClient::new(channel).embed(EmbedRequest { inputs, ..Default::default() }).await;
            let outcome = Outcome::of(answer, |response| {
                let response = response.into_inner();
                let (vectors, bytes) = (response.count as usize, response.embeddings.len());
                let problem = format!("Embed of {count} texts answered {vectors} vectors in {bytes} bytes");
                if vectors == count && bytes == count * response.dim as usize * 4 { Ok(()) } else { Err(problem) }
            });
            (0, outcome)
        } else if pick < MIX[0] + MIX[1] {
            let query = Some(Query::Text(self.queries[n as usize % self.queries.len()].clone()));
            let request =
                SearchRequest { queries: vec![SearchQuery { query }], top_k: Some(TOP_K), ..Default::default() };
            let answer = SearchServiceClient::new(channel).search(request).await;
            let outcome = Outcome::of(answer, |response| match response.into_inner().results.as_slice() {
                [one] if !one.hits.is_empty() => Ok(()),
                results => Err(format!("Search of one query answered {} results, or no hits", results.len())),
            });
            (1, outcome)
        } else {
            let first = self.ingested.fetch_add(INGEST_BATCH as u64, Ordering::Relaxed) as usize;
            let documents = (first..first + INGEST_BATCH).map(|k| {
                let paragraph = &self.documents[k % self.documents.len()];
                let metadata = HashMap::from([("source".to_string(), paragraph.source.clone())]);
                Document { id: format!("soak-live-{:05}", k % self.ingest_ids), text: paragraph.text.clone(), metadata }
            });
            let answer =
                SearchServiceClient::new(channel).ingest(IngestRequest { documents: documents.collect(), ..Default::default() }).await;
            let outcome = Outcome::of(answer, |response| {
                let response = response.into_inner();
                let ids = response.document_ids.len();
                let job = response.job.filter(|_| ids == INGEST_BATCH).ok_or(format!("Ingest: {ids} ids/no job"))?;
                self.jobs.lock().map(|mut jobs| jobs.push(job.job_id)).ok();
                Ok(())
            });
            (2, outcome)
        }
    }
}

/// A worker of the maximum's run: worker w makes calls w, w + W, ... A refused call is retried after a pause doubling
/// up to 200 ms, as the clients do: the maximum is what the server answers clients that back off, not how fast it
/// refuses the others.
struct MixWorker {
    load: Arc<MixedLoad>,
    worker: usize,
}

impl Caller for MixWorker {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let (call, mut pause) = ((self.worker + n * MAX_CLIENTS) as u64, Duration::from_millis(5));
        loop {
            match self.load.call(call).await {
                (_, Outcome::Ok) => return Ok(()),
                (_, Outcome::Rejected) => tokio::time::sleep(pause).await,
                (kind, outcome) => anyhow::bail!("{} call {call}: {outcome:?}", KINDS[kind]),
            }
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }
}

/// SplitMix64's finalizer: well-spread pseudo-random numbers from a counter.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
