//! overload: admission control at the server's default flags. Two questions, both asked of the real server:
//! - **Closed loop** (N callers, each waiting for its answer): load to queue and batch, never to refuse. At 1 to 64
//!   callers, one text and 32 texts per call, over gRPC `Embed` and over HTTP (`POST /v1/search`, `POST /embed`), the
//!   default server must refuse nothing and serve at least 0.95 x the throughput of a server without any load bound
//!   (`--max-queue-ms 0`), measured side by side in the same run (both servers up, the idle one asleep).
//! - **Open loop** past capacity (calls leave on a schedule whatever the answers do): 3 x the maximum one-text Embed
//!   rate for 30 s. Goodput must stay at least 0.9 x that maximum, accepted calls' p99 at most 4 x the model time of one
//!   full batch at capacity (read from the server's /metrics during the run), refusals answered in at most 5 ms p99, and
//!   after the burst a lone caller's latency back within the unloaded p99 within 2 s.

use std::{ffi::OsString, net::SocketAddr, sync::Arc, time::Duration, time::Instant};

use anyhow::Context;
use embedwire_bench::{
    closed_loop::{self, Caller, ClosedLoopRun},
    corpus::CorpusOptions,
    cpu::CpuWindow,
    http_client::HttpConnection,
    ingest,
    latency::{LatencySummary, ms},
    load::{self, Rpc, Stop},
    open_loop::{self, Call, Outcome, Schedule, Tally},
    options::{Common, connections},
    report::{Report, Row, Table},
    server_metrics::MetricsSnapshot,
    server_process::ServerProcess,
    wire_count::ByteCounters,
};
use embedwire_proto::v1::{EmbedRequest, embed_service_client::EmbedServiceClient};
use serde_json::json;
use tonic::transport::Channel;

/// The value of `--max-queue-ms` that turns every load bound off: the reference the default is compared with, never a
/// server whose figures are published as ours.
const NO_LOAD_BOUND: &str = "0";
/// Closed loop: no refusal, and at least this fraction of the unbounded server's throughput.
const MIN_CLOSED_LOOP_RATIO: f64 = 0.95;
/// Open loop: goodput at least this fraction of the maximum; accepted p99 at most this many full batches; refusals in
/// at most this p99; back to the unloaded p99 within this long after the burst.
const MIN_GOODPUT_RATIO: f64 = 0.9;
const MAX_ACCEPTED_P99_BATCHES: f64 = 4.0;
const MAX_REJECTION_P99_MS: f64 = 5.0;
const MAX_RECOVERY_SECS: f64 = 2.0;
/// The offered open-loop rate, as a multiple of the maximum; the unloaded latency's, as a fraction of it.
const FACTOR: f64 = 3.0;
const UNLOADED_FRACTION: f64 = 0.5;
/// Query sentences (the Embed texts and search queries) and documents indexed for the searches.
const TEXTS: usize = 500;
const DOCUMENTS: (usize, usize) = (2000, 100);
const INGEST_BATCH: usize = 500;
/// Closed-loop clients measuring the maximum on the unbounded server: with one batch's worth (64) the model idles
/// between answers and the next calls; 256 keep a batch queued while one runs.
const MAX_CLIENTS: usize = 256;
/// HTTP/2 connections of the gRPC load (hyper allows 100 calls at once on one).
const CONNECTIONS: usize = 8;
const STREAMS_PER_CONNECTION: usize = 100;
/// Unanswered open-loop calls at most: above what the default bound keeps waiting.
const MAX_IN_FLIGHT: usize = 50_000;
/// After the burst: how long a lone caller probes (full, --quick), and how many probes in a row within the unloaded
/// p99 count as recovered.
const PROBE_SECS: (f64, f64) = (4.0, 2.5);
const RECOVERED_PROBES: usize = 10;
const TOP_K: u32 = 5;
const CLOSED_COLUMNS: &str = "workload,texts_per_call,callers,server,calls,ok,errors,seconds,texts_per_s,p50_ms,p99_ms";
const RUNS_COLUMNS: &str = "max_per_s,unloaded_p50_ms,unloaded_p99_ms,offered_per_s,sent,accepted,rejected,errors,\
    rejected_p50_ms,rejected_p99_ms,accepted_p50_ms,accepted_p99_ms,goodput_per_s,full_batch_ms,full_batch_size,burst_batch_ms,burst_batch_size,\
    recovery_s,lag_p99_ms,held_back,server_cores,bench_cores,max_server_cores,max_bench_cores,full_padded_per_text,\
    burst_padded_per_text,full_us_per_padded_token,burst_us_per_padded_token";

/// Options of the overload scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Seconds of each closed-loop cell [default: 4, --quick: 0.5].
    #[arg(long, env = "OVERLOAD_BENCH_CELL_SECS", value_parser = embedwire_bench::options::seconds)]
    pub cell_secs: Option<f64>,
    /// Seconds of the open-loop overload [default: 30, --quick: 2].
    #[arg(long, env = "OVERLOAD_BENCH_OVERLOAD_SECS", value_parser = embedwire_bench::options::seconds)]
    pub overload_secs: Option<f64>,
    #[command(flatten)]
    pub corpus: CorpusOptions,
}

/// What a closed-loop caller sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    /// gRPC `Embed` with this many texts.
    GrpcEmbed(usize),
    /// HTTP `POST /v1/search`, one query, top_k 5: the existing gateways' load pattern.
    HttpSearch,
    /// HTTP `POST /embed` with this many texts.
    HttpEmbed(usize),
}

impl Workload {
    const ALL: [Workload; 4] =
        [Workload::GrpcEmbed(1), Workload::GrpcEmbed(32), Workload::HttpSearch, Workload::HttpEmbed(32)];

    fn name(self) -> &'static str {
        match self {
            Workload::GrpcEmbed(_) => "grpc_embed",
            Workload::HttpSearch => "http_v1_search",
            Workload::HttpEmbed(_) => "http_embed",
        }
    }

    fn texts(self) -> usize {
        match self {
            Workload::GrpcEmbed(n) | Workload::HttpEmbed(n) => n,
            Workload::HttpSearch => 1,
        }
    }
}

/// The two servers compared: the default and the unbounded reference, each with the same documents.
struct Servers {
    default: ServerProcess,
    unbounded: ServerProcess,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let mut report = Report::new(common.results("overload"), "overload_bench")?.summary_also_as("overload_bench.csv");
    tokio::runtime::Runtime::new()?.block_on(measure(common, &args, &mut report))?;
    report.finish()
}

async fn measure(common: &Common, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let corpus = args.corpus.select(common.pick(DOCUMENTS.0, DOCUMENTS.1), 0, TEXTS)?;
    let texts: Arc<[String]> = corpus.queries.clone().into();
    let binary = common.server_binary()?;
    let start = async |flags: Vec<(&str, OsString)>| -> anyhow::Result<ServerProcess> {
        let (server, _) = ServerProcess::start(&common.server_command(binary.clone(), flags)).await?;
        ingest::ingest(server.connect().await?, &corpus.documents, ("doc-", 0), INGEST_BATCH).await?;
        // Warm: the first batches of each shape are unmeasured.
        let warm = connections(&server, 1).await?;
        load::run(&warm, 8, texts.clone(), Rpc::Embed, Stop::Calls(common.pick(64, 16))).await?;
        Ok(server)
    };
    let servers = Servers {
        default: start(vec![]).await?,
        unbounded: start(vec![("--max-queue-ms", NO_LOAD_BOUND.into())]).await?,
    };
    println!("overload: {} documents indexed on both servers", corpus.documents.len());
    let closed = closed_loop_sweep(common, args, &servers, &texts, report).await;
    let open = match closed {
        Ok(()) => on_one_thread(|| open_loop_overload(common, args, &servers, &texts, report)),
        Err(error) => Err(error),
    };
    servers.default.stop().await?;
    servers.unbounded.stop().await?;
    open
}

/// Runs `work` on a runtime of its own, on one thread of its own: the open-loop load generator shares the 2 cores with
/// the server, and on one thread it costs a fraction of the CPU (no wake-ups across worker threads, for each of the
/// ~1,000 calls a second, and its connections' tasks on the same thread), so the server is measured with more of the
/// machine. What the server sees is the same: the same schedule of calls on the same connections.
fn on_one_thread<'a, F: std::future::Future<Output = anyhow::Result<()>>>(
    work: impl FnOnce() -> F + Send + 'a,
) -> anyhow::Result<()>
where
    F: 'a,
{
    tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            scope
                .spawn(|| tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(work()))
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the open-loop thread panicked")))
        })
    })
}

/// Every workload at every caller count, on the default server and on the unbounded one, alternating in two rounds
/// (default, unbounded, unbounded, default) so a drift of the machine's speed falls on both alike.
async fn closed_loop_sweep(
    common: &Common,
    args: &Args,
    servers: &Servers,
    texts: &Arc<[String]>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let cell = args.cell_secs.map_or(common.duration(4.0, 0.5), Duration::from_secs_f64);
    let callers = common.sweep(&[1, 4, 16, 64], &[1, 64]);
    let rounds: &[bool] = if common.quick { &[true, false] } else { &[true, false, false, true] };
    let mut table = Table::new(CLOSED_COLUMNS);
    for workload in Workload::ALL {
        // A closed-loop cell ends when its callers' last calls are answered: at 64 callers of 32 texts that is
        // 2,048 texts, 5 s a server on 2 cores, more than the cell. --quick checks that the cells run, not capacity.
        let callers = if workload.texts() > 1 { common.sweep(&callers, &[1, 8]) } else { callers.clone() };
        for &c in &callers {
            let (mut default, mut unbounded) = (Vec::new(), Vec::new());
            for &on_default in rounds {
                let server = if on_default { &servers.default } else { &servers.unbounded };
                let run = closed_run(server.address, workload, c, texts, cell).await?;
                if on_default { default.push(run) } else { unbounded.push(run) }
            }
            let (default, unbounded) = (ClosedLoopRun::combine(&default), ClosedLoopRun::combine(&unbounded));
            let per_call = workload.texts() as f64;
            let (ours, reference) = (default.rate() * per_call, unbounded.rate() * per_call);
            for (name, run, rate) in [("default", &default, ours), ("no_bound", &unbounded, reference)] {
                let l = run.latency();
                table.row([
                    workload.name().to_string(),
                    workload.texts().to_string(),
                    c.to_string(),
                    name.to_string(),
                    run.timings.len().to_string(),
                    run.ok().to_string(),
                    run.errors().to_string(),
                    format!("{:.3}", run.elapsed.as_secs_f64()),
                    format!("{rate:.1}"),
                    format!("{:.3}", ms(l.p50)),
                    format!("{:.3}", ms(l.p99)),
                ]);
            }
            let label = format!("closed loop {} x{} c={c}", workload.name(), workload.texts());
            let errors = default.errors() as f64;
            let first_error = default.first_error.clone().unwrap_or_default();
            let ratio = ours / reference.max(1e-9);
            println!("{label}: {ours:.0} vs {reference:.0} texts/s ({ratio:.2} x), {errors} refused or failed");
            report.figures([
                Row::info(format!("{label}: refusals at defaults"), errors, "calls", format!("{errors} {first_error}"))
                    .at_most(0.0, "0".into()),
                Row::info(
                    format!("{label}: throughput, default / no bound"),
                    ratio,
                    "x",
                    format!("{ours:.0} / {reference:.0} texts/s"),
                )
                .at_least(MIN_CLOSED_LOOP_RATIO, format!(">= {MIN_CLOSED_LOOP_RATIO} x")),
            ]);
        }
    }
    report.table("overload_closed_loop.csv", &table)?;
    Ok(())
}

/// One closed-loop run of `callers` callers of `workload` against the server at `address`; failures are counted.
async fn closed_run(
    address: SocketAddr,
    workload: Workload,
    callers: usize,
    texts: &Arc<[String]>,
    time: Duration,
) -> anyhow::Result<ClosedLoopRun> {
    let first = |k: usize| k * texts.len() / callers;
    match workload {
        Workload::GrpcEmbed(count) => {
            let channels = channel_set(address, callers.div_ceil(STREAMS_PER_CONNECTION).max(1)).await?;
            let each = (0..callers).map(|k| GrpcEmbedCaller {
                client: EmbedServiceClient::new(channels[k % channels.len()].clone()),
                texts: texts.clone(),
                first: first(k),
                count,
            });
            closed_loop::run(each.collect(), Stop::After(time)).await
        }
        Workload::HttpSearch | Workload::HttpEmbed(_) => {
            let mut each = Vec::with_capacity(callers);
            for k in 0..callers {
                let connection = HttpConnection::open(address, ByteCounters::new()).await?;
                each.push(HttpCaller { connection, workload, texts: texts.clone(), first: first(k) });
            }
            closed_loop::run(each, Stop::After(time)).await
        }
    }
}

async fn channel_set(address: SocketAddr, count: usize) -> anyhow::Result<Vec<Channel>> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}"))?.tcp_nodelay(true);
    let mut channels = Vec::with_capacity(count);
    for _ in 0..count {
        channels.push(endpoint.connect().await.with_context(|| format!("connecting to {address}"))?);
    }
    Ok(channels)
}

/// The texts of call `n` of a caller starting at `first`.
fn texts_of(texts: &[String], first: usize, n: usize, count: usize) -> Vec<String> {
    (0..count).map(|i| texts[(first + n * count + i) % texts.len()].clone()).collect()
}

struct GrpcEmbedCaller {
    client: EmbedServiceClient<Channel>,
    texts: Arc<[String]>,
    first: usize,
    count: usize,
}

impl Caller for GrpcEmbedCaller {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let request = EmbedRequest { inputs: texts_of(&self.texts, self.first, n, self.count), ..Default::default() };
        let response = self.client.embed(request).await.context("Embed")?.into_inner();
        anyhow::ensure!(response.count as usize == self.count, "Embed answered {} vectors", response.count);
        Ok(())
    }
}

struct HttpCaller {
    connection: HttpConnection,
    workload: Workload,
    texts: Arc<[String]>,
    first: usize,
}

impl Caller for HttpCaller {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let texts = texts_of(&self.texts, self.first, n, self.workload.texts());
        let (path, body) = match self.workload {
            Workload::HttpSearch => ("/v1/search", json!({"query": texts[0], "top_k": TOP_K})),
            _ => ("/embed", json!({"texts": texts})),
        };
        let response = self.connection.post_json(path, &body).await?;
        anyhow::ensure!(response.status.is_success(), "POST {path}: HTTP {}", response.status);
        Ok(())
    }
}

/// The maximum on the unbounded server, the unloaded latency and 3 x the maximum open loop on the default server, and
/// a lone caller's latency right after it.
async fn open_loop_overload(
    common: &Common,
    args: &Args,
    servers: &Servers,
    texts: &Arc<[String]>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let reference = connections(&servers.unbounded, CONNECTIONS).await?;
    // A full batch's model time is read at capacity: from the unbounded server's /metrics across the maximum's run.
    let (before, max_cpu) = (MetricsSnapshot::read(servers.unbounded.address).await?, CpuWindow::start(servers.unbounded.pid)?);
    let max =
        load::run(&reference, MAX_CLIENTS, texts.clone(), Rpc::Embed, Stop::After(common.duration(10.0, 1.0))).await?;
    let after = MetricsSnapshot::read(servers.unbounded.address).await?;
    let (full_batch, full_batch_size) = mean_batch(&before, &after);
    let (max_work, max_cpu) = (ModelWork::between(&before, &after), max_cpu.finish()?);
    let max_rate = max.rate();
    println!("max: {max_rate:.0} Embed calls/s ({MAX_CLIENTS} clients on the server without a bound)");
    println!("  model: {max_work}; {max_cpu}");
    let server = &servers.default;
    let offered = max_rate * FACTOR;
    // Room for every call the server keeps, and the refused ones, without waiting for a stream in the client.
    let channels =
        connections(server, CONNECTIONS.max(2 * (offered as usize).div_ceil(STREAMS_PER_CONNECTION))).await?;
    let caller = Arc::new(EmbedOne(channels.iter().cloned().map(EmbedServiceClient::new).collect(), texts.clone()));
    let unloaded_time = common.duration(10.0, 1.0);
    let mut unloaded = Tally::default();
    let schedule =
        Schedule { rate: max_rate * UNLOADED_FRACTION, duration: unloaded_time, max_in_flight: MAX_IN_FLIGHT };
    open_loop::run(caller.clone(), schedule, |sample| unloaded.add(&sample)).await?;
    let unloaded_p99 = unloaded.latency().p99;

    let time = args.overload_secs.map_or(common.duration(30.0, 2.0), Duration::from_secs_f64);
    let (before, cpu) = (MetricsSnapshot::read(server.address).await?, CpuWindow::start(server.pid)?);
    let mut tally = Tally::default();
    let schedule = Schedule { rate: offered, duration: time, max_in_flight: MAX_IN_FLIGHT };
    let burst = open_loop::run(caller.clone(), schedule, |sample| tally.add(&sample));
    // The burst's batches and CPU are read when it stops sending: the probe that follows runs batches of one text,
    // which would otherwise count as the burst's.
    let burst_window = async {
        tokio::time::sleep(time).await;
        anyhow::Ok((MetricsSnapshot::read(server.address).await?, cpu.finish()?))
    };
    let (run, probes, window) =
        tokio::join!(burst, probe_after(channels[0].clone(), texts.clone(), time, common.pick(PROBE_SECS.0, PROBE_SECS.1)), burst_window);
    let (run, probes, (after, cpu)) = (run?, probes?, window?);
    let (burst_batch, batch_size) = mean_batch(&before, &after);
    let burst_work = ModelWork::between(&before, &after);
    let recovery = recovery_time(&probes, unloaded_p99);

    let (accepted, rejections) = (tally.latency(), LatencySummary::from_samples(tally.rejected.clone()));
    let goodput = accepted.count as f64 / run.elapsed.as_secs_f64().max(1e-9);
    let rejected = rejections.count;
    println!(
        "  {offered:.0} calls/s for {:.0} s: {} accepted, {rejected} rejected, {} errors; {cpu}",
        time.as_secs_f64(),
        accepted.count,
        tally.failed
    );
    println!("  model: {burst_work}");
    tally.first_error.iter().for_each(|error| println!("  first error: {error}"));
    let accepted_limit = MAX_ACCEPTED_P99_BATCHES * ms(full_batch);
    let rejection_p99 = if rejected == 0 { 0.0 } else { ms(rejections.p99) };
    let recovery_secs = recovery.map_or(f64::INFINITY, |r| r.as_secs_f64());
    let label = |figure: &str| format!("open loop {FACTOR} x max: {figure}");
    let (burst_per_core, max_per_core) =
        (per_server_core(goodput, cpu.server_cores), per_server_core(max_rate, max_cpu.server_cores));
    report.figures([
        Row::info(
            "max Embed throughput (no bound, 256 callers)",
            max_rate,
            "calls/s",
            format!("{max_rate:.0} calls/s"),
        ),
        Row::info(
            label("offered"),
            offered,
            "calls/s",
            format!("{offered:.0} calls/s for {:.0} s", time.as_secs_f64()),
        ),
        Row::info(
            "full batch at capacity (no bound, 256 callers)",
            ms(full_batch),
            "ms",
            format!("{:.1} ms, {full_batch_size:.1} texts on average", ms(full_batch)),
        ),
        Row::info(
            label("batches during the burst"),
            ms(burst_batch),
            "ms",
            format!("{:.1} ms, {batch_size:.1} texts on average", ms(burst_batch)),
        ),
        Row::info(
            label("goodput / max"),
            goodput / max_rate,
            "x",
            format!(
                "{goodput:.0} calls/s; server / load generator {:.2} / {:.2} cores (at max {:.2} / {:.2}), model {:.0} µs \
                 a padded token (at max {:.0})",
                cpu.server_cores,
                cpu.bench_cores,
                max_cpu.server_cores,
                max_cpu.bench_cores,
                burst_work.micros_per_padded_token(),
                max_work.micros_per_padded_token()
            ),
        )
            .at_least(MIN_GOODPUT_RATIO, format!(">= {MIN_GOODPUT_RATIO} x")),
        Row::info(
            label("goodput a server core / max's"),
            burst_per_core / max_per_core,
            "x",
            format!(
                "{burst_per_core:.0} against {max_per_core:.0} calls a server core-second: the server's own work under \
                 overload, apart from the cores the load generator and the kernel's loopback take on this shared box"
            ),
        ),
        Row::info(
            label("accepted p99"),
            ms(accepted.p99),
            "ms",
            format!("p50 {:.1} / p99 {:.1} ms", ms(accepted.p50), ms(accepted.p99)),
        )
        .at_most(accepted_limit, format!("<= {MAX_ACCEPTED_P99_BATCHES} x {:.1} ms", ms(full_batch))),
        Row::info(
            label("refusals p99"),
            rejection_p99,
            "ms",
            format!("{rejected} of {} refused, p99 {rejection_p99:.2} ms", run.sent),
        )
        .at_most(MAX_REJECTION_P99_MS, format!("<= {MAX_REJECTION_P99_MS} ms")),
        Row::info(
            label("back to the unloaded p99 after"),
            recovery_secs,
            "s",
            format!("{recovery_secs:.2} s (unloaded p99 {:.1} ms)", ms(unloaded_p99)),
        )
        .at_most(MAX_RECOVERY_SECS, format!("<= {MAX_RECOVERY_SECS} s")),
    ]);
    anyhow::ensure!(rejected > 0, "3 x the maximum was offered and nothing was refused: no overload was measured");
    let unloaded = unloaded.latency();
    let lag_p99 = ms(LatencySummary::from_samples(tally.lags).p99);
    let line = format!(
        "{max_rate:.1},{:.3},{:.3},{offered:.1},{},{},{rejected},{},{:.3},{rejection_p99:.3},{:.3},{:.3},{goodput:.1},\
         {:.3},{full_batch_size:.1},{:.3},{batch_size:.1},{recovery_secs:.3},{lag_p99:.3},{},{:.2},{:.2},{:.2},{:.2},\
         {:.2},{:.2},{:.1},{:.1}",
        ms(unloaded.p50),
        ms(unloaded.p99),
        run.sent,
        accepted.count,
        tally.failed,
        ms(rejections.p50),
        ms(accepted.p50),
        ms(accepted.p99),
        ms(full_batch),
        ms(burst_batch),
        run.held_back,
        cpu.server_cores,
        cpu.bench_cores,
        max_cpu.server_cores,
        max_cpu.bench_cores,
        max_work.padded_tokens_per_text,
        burst_work.padded_tokens_per_text,
        max_work.micros_per_padded_token(),
        burst_work.micros_per_padded_token(),
    );
    let mut table = Table::new(RUNS_COLUMNS);
    table.row(line.split(','));
    report.table("overload_bench_runs.csv", &table)?;
    Ok(())
}

/// Calls answered a second for each core the server process kept busy.
fn per_server_core(calls_per_s: f64, server_cores: f64) -> f64 {
    calls_per_s / server_cores.max(1e-9)
}

/// The mean model time and size of the batches a server ran between two reads of its /metrics.
fn mean_batch(before: &MetricsSnapshot, after: &MetricsSnapshot) -> (Duration, f64) {
    let batches = after.since(before, "embedwire_inference_seconds_count").max(1.0);
    let time = Duration::from_secs_f64(after.since(before, "embedwire_inference_seconds_sum") / batches);
    (time, after.since(before, "embedwire_batch_size_sum") / batches)
}

/// What the model did between two reads of a server's /metrics: where capacity goes besides the batch size (padding,
/// and model time, which grows when the model threads share the cores with request handling and the load generator).
struct ModelWork {
    texts: f64,
    padded_tokens_per_text: f64,
    real_tokens_per_text: f64,
    /// Summed over the batch parts that ran side by side, so up to 2 s a second on 2 cores.
    model_seconds: f64,
}

impl ModelWork {
    fn between(before: &MetricsSnapshot, after: &MetricsSnapshot) -> Self {
        let since = |name: &str| after.since(before, name);
        let texts = since("embedwire_model_sequences_total");
        let per_text = |name: &str| since(name) / texts.max(1.0);
        ModelWork {
            texts,
            padded_tokens_per_text: per_text("embedwire_model_padded_tokens_total"),
            real_tokens_per_text: per_text("embedwire_model_real_tokens_total"),
            model_seconds: since("embedwire_inference_seconds_sum"),
        }
    }

    /// Model time per padded token, in microseconds.
    fn micros_per_padded_token(&self) -> f64 {
        1e6 * self.model_seconds / (self.texts * self.padded_tokens_per_text).max(1.0)
    }
}

impl std::fmt::Display for ModelWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} texts, {:.1} padded / {:.1} real tokens each, {:.0} µs of model time a padded token",
            self.texts,
            self.padded_tokens_per_text,
            self.real_tokens_per_text,
            self.micros_per_padded_token()
        )
    }
}

/// From the moment the burst stops sending, one caller's one-text Embed calls back to back for `probe_secs`: when
/// each left (from the burst's end) and how long it took (None: refused or failed).
async fn probe_after(
    channel: Channel,
    texts: Arc<[String]>,
    burst: Duration,
    probe_secs: f64,
) -> anyhow::Result<Vec<(Duration, Option<Duration>)>> {
    let end = Instant::now() + burst;
    tokio::time::sleep_until(end.into()).await;
    let mut client = EmbedServiceClient::new(channel);
    let mut probes = Vec::new();
    while end.elapsed().as_secs_f64() < probe_secs {
        let (left, started) = (end.elapsed(), Instant::now());
        let request = EmbedRequest { inputs: vec![texts[probes.len() % texts.len()].clone()], ..Default::default() };
        let answered = client.embed(request).await.is_ok().then(|| started.elapsed());
        probes.push((left, answered));
    }
    Ok(probes)
}

/// When the first of [`RECOVERED_PROBES`] probes in a row, each answered within `unloaded_p99`, left; None if that
/// never happened.
fn recovery_time(probes: &[(Duration, Option<Duration>)], unloaded_p99: Duration) -> Option<Duration> {
    let good = |probe: &(Duration, Option<Duration>)| probe.1.is_some_and(|took| took <= unloaded_p99);
    probes.windows(RECOVERED_PROBES).find(|window| window.iter().all(good)).map(|window| window[0].0)
}

/// Embed of one text per call, call n with text n on connection n (modulo their count).
struct EmbedOne(Vec<EmbedServiceClient<Channel>>, Arc<[String]>);

impl Call for EmbedOne {
    async fn call(&self, n: u64) -> (usize, Outcome) {
        let (n, EmbedOne(clients, texts)) = (n as usize, self);
        let request = EmbedRequest { inputs: vec![texts[n % texts.len()].clone()], ..Default::default() };
        let outcome = Outcome::of(clients[n % clients.len()].clone().embed(request).await, |response| {
            let response = response.into_inner();
            let (count, bytes) = (response.count, response.embeddings.len());
            let expected = count == 1 && bytes == response.dim as usize * 4;
            if expected { Ok(()) } else { Err(format!("Embed of one text answered {count} vectors in {bytes} bytes")) }
        });
        (0, outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_is_the_first_of_enough_fast_probes_in_a_row() {
        let ms = Duration::from_millis;
        let mut probes: Vec<_> = (0..5).map(|i| (ms(i * 10), Some(ms(90)))).collect();
        probes.push((ms(50), None)); // refused
        probes.extend((0..RECOVERED_PROBES as u64).map(|i| (ms(60 + i * 5), Some(ms(4)))));
        assert_eq!(recovery_time(&probes, ms(20)), Some(ms(60)));
        assert_eq!(recovery_time(&probes[..probes.len() - 1], ms(20)), None, "one probe short");
    }
}
