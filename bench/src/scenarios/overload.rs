//! overload: the real server offered three times the Embed calls it can answer, and which queue-time bound
//! (--max-queue-ms) keeps both overload targets. Before each bound's run (the server's default first), a reference
//! server without a bound measures the maximum (closed loop) and the unloaded p99 (open loop at half of it) again,
//! since a shared machine's capacity changes from minute to minute; then a fresh server with the bound is offered
//! 3 x that maximum open loop, so a queue in the server shows up as latency.

use std::{ffi::OsString, sync::Arc, time::Duration};

use clap::Parser;
use embedwire_bench::{
    corpus::CorpusOptions,
    cpu::CpuWindow,
    latency::{LatencySummary, ms},
    load::{self, Rpc, Stop},
    open_loop::{self, Call, OpenLoopRun, Outcome, Schedule, Tally},
    options::{Common, at_least_one, connections, seconds},
    report::{Report, Row, Table},
    server_process::ServerProcess,
};
use embedwire_proto::v1::{EmbedRequest, embed_service_client::EmbedServiceClient};
use embedwire_server::ServerConfig;
use tonic::transport::Channel;

/// Targets: rejections in p99 <= 5 ms, accepted calls' p99 <= 2 x the unloaded p99.
const MAX_REJECTION_P99_MS: f64 = 5.0;
const REJECTION_TARGET: &str = "p99 <= 5 ms";
const MAX_ACCEPTED_P99_RATIO: f64 = 2.0;
/// Query sentences, the Embed texts.
const TEXTS: usize = 500;
/// Calls a connection carries at once (no SETTINGS_MAX_CONCURRENT_STREAMS: hyper's 100);
/// more would wait in the client, where the server's admission control never sees them.
const STREAMS_PER_CONNECTION: usize = 100;
/// The derived default bound is a few ms here; connections are sized as if it were this.
const DERIVED_BOUND_GUESS_MS: u64 = 20;
/// HTTP/2 connections, at least: an overloaded server gets one per 100 calls its bound admits.
const CONNECTIONS: usize = 8;
/// Closed-loop clients measuring the maximum: with one batch's worth (64) the model idles
/// between answers and the next calls (~170 calls/s on 2 cores; 256: ~270-300).
const MAX_CLIENTS: usize = 256;
/// The unloaded latency's rate, as a fraction of the maximum; the overload's, as a multiple.
const UNLOADED_FRACTION: f64 = 0.5;
const FACTOR: f64 = 3.0;
/// Unanswered calls at most: above what admission keeps waiting at 3 x load.
const MAX_IN_FLIGHT: usize = 50_000;
const RUNS_COLUMNS: &str = "queue_bound_ms,default,max_per_s,unloaded_p50_ms,unloaded_p99_ms,offered_per_s,sent,\
    accepted,rejected,errors,rejected_p50_ms,rejected_p99_ms,accepted_p50_ms,accepted_p99_ms,goodput_per_s,lag_p99_ms,\
    held_back,server_cores";

/// Options of the overload scenario; each run's length defaults to --duration-secs.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// --max-queue-ms values to overload after the server's default (0 would turn the
    /// bound off) [default: 50,20,15,10,5; --quick: 20].
    #[arg(long, env = "OVERLOAD_BENCH_QUEUE_BOUNDS_MS", value_delimiter = ',', value_parser = at_least_one::<u64>())]
    pub queue_bounds_ms: Vec<u64>,
    /// Seconds of the maximum's run [default: 10, --quick: 2].
    #[arg(long, env = "OVERLOAD_BENCH_MAX_SECS", value_parser = seconds)]
    pub max_secs: Option<f64>,
    /// Seconds of the unloaded latency's run [default: 10, --quick: 2].
    #[arg(long, env = "OVERLOAD_BENCH_UNLOADED_SECS", value_parser = seconds)]
    pub unloaded_secs: Option<f64>,
    /// Seconds of each overload run [default: 20, --quick: 3].
    #[arg(long, env = "OVERLOAD_BENCH_OVERLOAD_SECS", value_parser = seconds)]
    pub overload_secs: Option<f64>,
    #[command(flatten)]
    pub corpus: CorpusOptions,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    // The summary, also under the name it always had.
    let mut report = Report::new(common.results(""), "overload_bench")?.summary_also_as("overload_bench.csv");
    let passing = tokio::runtime::Runtime::new()?.block_on(measure(common, &args, &mut report))?;
    println!(
        "\nunloaded p99 = p99 latency of answered Embed calls (one text each) offered open loop at {:.0}% of the \
         maximum (closed loop, measured just before), on a server with default flags but no queue-time bound; \
         measured again before each bound's overload run",
        UNLOADED_FRACTION * 100.0
    );
    report.finish()?;
    println!("--max-queue-ms bounds meeting both overload targets: {passing:?}");
    Ok(())
}

/// Per bound: the baseline again on the reference server (kept running), then the overload on a fresh server with
/// the bound; its figures and runs row go to `report`. Returns the bounds meeting both targets.
async fn measure(common: &Common, args: &Args, report: &mut Report) -> anyhow::Result<Vec<String>> {
    let texts: Arc<[String]> = args.corpus.select(0, 0, TEXTS)?.queries.into();
    let others = Some(args.queue_bounds_ms.clone()).filter(|given| !given.is_empty());
    let others = others.unwrap_or_else(|| common.pick(vec![50, 20, 15, 10, 5], vec![20]));
    // The server's default first: a fixed number when it has one, else no flag (derived).
    let default_bound = ServerConfig::try_parse_from(["embedwire-server"])?.max_queue_ms;
    let bounds: Vec<Option<u64>> = std::iter::once(default_bound).chain(others.into_iter().map(Some)).collect();
    println!("overload: --max-queue-ms bounds {bounds:?} (None: the server's default), {FACTOR} x the maximum");
    let binary = common.server_binary()?;
    let secs = |own: Option<f64>, full, quick| own.map_or(common.duration(full, quick), Duration::from_secs_f64);
    // A fresh server, warmed by one client (whom no bound refuses): first batches stay unmeasured.
    let start = async |flags: Vec<(&str, OsString)>, count: usize| -> anyhow::Result<_> {
        let (server, _) = ServerProcess::start(&common.server_command(binary.clone(), flags)).await?;
        let channels = connections(&server, count).await?;
        load::run(&channels, 1, texts.clone(), Rpc::Embed, Stop::Calls(common.pick(512, 64))).await?;
        Ok((server, channels))
    };
    // The reference measures capacity: no queue-time bound refuses its closed-loop clients.
    let (reference, reference_channels) = start(vec![("--max-queue-ms", "0".into())], CONNECTIONS).await?;
    let (mut passing, mut table) = (Vec::new(), Table::new(RUNS_COLUMNS));
    for bound_ms in bounds {
        let stop = Stop::After(secs(args.max_secs, 10.0, 2.0));
        let max = load::run(&reference_channels, MAX_CLIENTS, texts.clone(), Rpc::Embed, stop).await?;
        let (max_rate, max_p50, max_p99) = (max.rate(), ms(max.latency.p50), ms(max.latency.p99));
        println!("max: {max_rate:.0} Embed calls/s ({MAX_CLIENTS} clients, p50 {max_p50:.1} / p99 {max_p99:.1} ms)");
        let (rate, time) = (max_rate * UNLOADED_FRACTION, secs(args.unloaded_secs, 10.0, 2.0));
        let (_, unloaded, _) = open_run(&reference, &reference_channels, &texts, rate, time).await?;
        let offered = max_rate * FACTOR;
        // Twice the calls in flight when each accepted call waits its bound and a little
        // more (Little's law), so no call waits for a stream in the client.
        let in_flight = offered * (bound_ms.unwrap_or(DERIVED_BOUND_GUESS_MS) as f64 + 100.0) / 1000.0;
        let connections = CONNECTIONS.max(2 * (in_flight.ceil() as usize).div_ceil(STREAMS_PER_CONNECTION));
        let flags = bound_ms.iter().map(|ms| ("--max-queue-ms", ms.to_string().into())).collect();
        let (server, channels) = start(flags, connections).await?;
        let time = secs(args.overload_secs, 20.0, 3.0);
        let (run, tally, cores) = open_run(&server, &channels, &texts, offered, time).await?;
        server.stop().await?;
        let unloaded = unloaded.latency();
        let (accepted, rejections) = (tally.latency(), LatencySummary::from_samples(tally.rejected.clone()));
        let (unloaded_p50, unloaded_p99) = (ms(unloaded.p50), ms(unloaded.p99));
        let (accepted_p50, accepted_p99) = (ms(accepted.p50), ms(accepted.p99));
        let (rejected_p50, rejected_p99) = (ms(rejections.p50), ms(rejections.p99));
        // Answered calls/s over the whole run, the drain included: the server works all along.
        let goodput = accepted.count as f64 / run.elapsed.as_secs_f64().max(1e-9);
        let (sent, rejected, failed) = (run.sent, rejections.count, tally.failed);
        let name = bound_ms.map_or("auto".to_string(), |ms| format!("{ms} ms"));
        let label = format!("queue bound {name}{}", if bound_ms.is_none() { " (default)" } else { "" });
        // A run without rejections has none to be fast.
        let rejection_p99 = if rejected == 0 { f64::INFINITY } else { rejected_p99 };
        let accepted_limit = MAX_ACCEPTED_P99_RATIO * unloaded_p99;
        if rejection_p99 <= MAX_REJECTION_P99_MS && accepted_p99 <= accepted_limit {
            passing.push(name);
        }
        let rejections = format!("p50 {rejected_p50:.2} / p99 {rejected_p99:.2} ms");
        let rejections = if rejected == 0 { "no rejections".into() } else { rejections };
        let accepted_text = format!("p50 {accepted_p50:.1} / p99 {accepted_p99:.1} ms");
        let accepted_target = format!("p99 <= {MAX_ACCEPTED_P99_RATIO:.0} x {unloaded_p99:.2} ms");
        let goodput_text = format!("{goodput:.0} calls/s ({:.0}% of max)", 100.0 * goodput / max_rate);
        let row = |figure: &str, value, unit, measured| Row::info(format!("{figure} {label}"), value, unit, measured);
        report.figures([
            row("max Embed throughput, before", max_rate, "calls/s", format!("{max_rate:.0} calls/s")),
            row("unloaded p99, before", unloaded_p99, "ms", format!("{unloaded_p99:.2} ms")),
            row("offered,", offered, "calls/s", format!("{offered:.0} calls/s ({FACTOR} x max)")),
            row("rejected,", rejected as f64, "calls", format!("{rejected} of {sent}, {failed} errors")),
            row("rejection latency,", rejection_p99, "ms", rejections)
                .at_most(MAX_REJECTION_P99_MS, REJECTION_TARGET.into()),
            row("accepted latency,", accepted_p99, "ms", accepted_text)
                .at_most(accepted_limit, accepted_target)
                .with_note(format!("{:.1} x unloaded", accepted_p99 / unloaded_p99.max(1e-9))),
            row("goodput,", goodput, "calls/s", goodput_text),
        ]);
        let (bound, default) = (bound_ms.map_or("auto".into(), |ms| ms.to_string()), u8::from(bound_ms.is_none()));
        let lag_p99 = ms(LatencySummary::from_samples(tally.lags).p99);
        let (accepted, held_back) = (accepted.count, run.held_back);
        let line = format!(
            "{bound},{default},{max_rate:.1},{unloaded_p50:.3},{unloaded_p99:.3},{offered:.1},{sent},{accepted},\
             {rejected},{failed},{rejected_p50:.3},{rejected_p99:.3},{accepted_p50:.3},{accepted_p99:.3},{goodput:.1},\
             {lag_p99:.3},{held_back},{cores:.2}"
        );
        table.row(line.split(','));
    }
    reference.stop().await?;
    report.table("overload_bench_runs.csv", &table)?;
    Ok(passing)
}

/// Offers one-text Embed calls open loop; the run, its calls by outcome, the server's cores.
async fn open_run(
    server: &ServerProcess,
    channels: &[Channel],
    texts: &Arc<[String]>,
    rate: f64,
    duration: Duration,
) -> anyhow::Result<(OpenLoopRun, Tally, f64)> {
    let call = Arc::new(EmbedOne(channels.iter().cloned().map(EmbedServiceClient::new).collect(), texts.clone()));
    let (cpu, mut tally) = (CpuWindow::start(server.pid)?, Tally::default());
    let schedule = Schedule { rate, duration, max_in_flight: MAX_IN_FLIGHT };
    let run = open_loop::run(call, schedule, |sample| tally.add(&sample)).await?;
    let (cpu, (accepted, rejected)) = (cpu.finish()?, (tally.ok.len(), tally.rejected.len()));
    println!("  {rate:.0} calls/s: {accepted} accepted, {rejected} rejected, {} errors; {cpu}", tally.failed);
    tally.first_error.iter().for_each(|error| println!("  first error: {error}"));
    Ok((run, tally, cpu.server_cores))
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
