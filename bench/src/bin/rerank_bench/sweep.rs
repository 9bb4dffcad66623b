//! The server under closed-loop Rerank clients at each concurrency: every call timed,
//! refusals (RESOURCE_EXHAUSTED: the server's admission by expected queue time)
//! counted apart from other errors, and for each run the CPU that the server, the
//! bench's own clients and the rest of the machine used, and what the server's
//! /metrics say its model did (batches, pairs per batch, busy time).
//!
//! A refused client pauses before its next call, 5 ms doubling to 200 ms while it
//! keeps being refused, as the clients' retry policies do: the figure is what the
//! server answers to clients that back off, not how fast it refuses ones that do not
//! (which would take the CPU the model needs on a small machine).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use embedwire_bench::closed_loop::{self, Caller, ClosedLoopRun};
use embedwire_bench::cpu::{self, CpuUse, CpuWindow};
use embedwire_bench::latency::{LatencySummary, ms};
use embedwire_bench::load::Stop;
use embedwire_bench::server_metrics::MetricsSnapshot;
use embedwire_bench::server_process::ServerProcess;
use embedwire_proto::v1::rerank_service_client::RerankServiceClient;
use embedwire_proto::v1::{RerankRequest, RerankResponse};
use tonic::transport::Channel;

use crate::workload::Workload;

/// Which scorer the server reranks with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scorer {
    /// --rerank-model-dir: the cross-encoder behind its own batcher.
    Cross,
    /// No cross-encoder: the embedding model's cosine.
    Bi,
}

impl Scorer {
    /// The name in tables and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Scorer::Cross => "cross-encoder",
            Scorer::Bi => "bi-encoder",
        }
    }

    /// The metrics of the model that scores: batches run, inputs in them, and the
    /// model time summed over them. The bi-encoder's inputs are the query and the
    /// texts, on the embedding model's batcher.
    fn model_metrics(self) -> [&'static str; 3] {
        match self {
            Scorer::Cross => [
                "embedwire_rerank_batches_total",
                "embedwire_rerank_batch_size_sum",
                "embedwire_rerank_inference_seconds_sum",
            ],
            Scorer::Bi => {
                ["embedwire_model_batches_total", "embedwire_model_sequences_total", "embedwire_inference_seconds_sum"]
            }
        }
    }
}

/// Longest pause of a refused client.
const MAX_PAUSE: Duration = Duration::from_millis(200);
/// First pause of a refused client.
const FIRST_PAUSE: Duration = Duration::from_millis(5);

/// What the clients of one run counted besides the closed loop's own timings: the
/// refusals, and the server's account of each answered call's time (its
/// RerankMetadata), summed.
#[derive(Debug, Default)]
struct Tally {
    refused: AtomicU64,
    server_total_ns: AtomicU64,
    tokenization_ns: AtomicU64,
    queue_ns: AtomicU64,
    inference_ns: AtomicU64,
    /// The first failure other than a refusal, to show why calls failed.
    first_failure: std::sync::Mutex<Option<String>>,
}

/// One closed-loop client: worker w of W makes calls w, w + W, w + 2W, ... of the
/// workload, so the clients together make its calls in order.
struct RerankCaller {
    client: RerankServiceClient<Channel>,
    workload: Arc<Workload>,
    scorer: Scorer,
    worker: usize,
    workers: usize,
    tally: Arc<Tally>,
    pause: Duration,
}

impl Caller for RerankCaller {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let (query, texts) = self.workload.call(self.worker + n * self.workers);
        let count = texts.len();
        let request = RerankRequest { query, texts, ..Default::default() };
        match self.client.rerank(request).await {
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                self.tally.refused.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(self.pause).await;
                self.pause = (self.pause * 2).min(MAX_PAUSE);
                anyhow::bail!("RESOURCE_EXHAUSTED: {}", status.message())
            }
            answer => {
                let checked = self.record(answer, count);
                if let Err(error) = &checked
                    && let Ok(mut first) = self.tally.first_failure.lock()
                {
                    first.get_or_insert_with(|| format!("{error:#}"));
                }
                checked
            }
        }
    }
}

impl RerankCaller {
    /// Checks an answer (or failure other than a refusal) and adds its timing.
    fn record(
        &mut self,
        answer: Result<tonic::Response<RerankResponse>, tonic::Status>,
        count: usize,
    ) -> anyhow::Result<()> {
        let response = match answer {
            Ok(response) => response.into_inner(),
            Err(status) => anyhow::bail!("Rerank failed: {:?}: {}", status.code(), status.message()),
        };
        self.pause = FIRST_PAUSE;
        anyhow::ensure!(
            response.ranks.len() == count && response.scorer.starts_with(self.scorer.name()),
            "Rerank of {count} texts answered {} ranks by {:?}",
            response.ranks.len(),
            response.scorer
        );
        let metadata = response.metadata.unwrap_or_default();
        let tally = &self.tally;
        tally.server_total_ns.fetch_add(metadata.total_time_ns, Ordering::Relaxed);
        tally.tokenization_ns.fetch_add(metadata.tokenization_time_ns, Ordering::Relaxed);
        tally.queue_ns.fetch_add(metadata.queue_time_ns, Ordering::Relaxed);
        tally.inference_ns.fetch_add(metadata.inference_time_ns, Ordering::Relaxed);
        Ok(())
    }
}

/// One concurrency's measured run (or several rounds of it, pooled).
#[derive(Debug, Clone)]
pub struct SweepPoint {
    pub scorer: Scorer,
    pub concurrency: usize,
    pub texts_per_call: usize,
    /// Every call, timed; refusals count as failed calls here.
    pub run: ClosedLoopRun,
    pub refused: usize,
    /// The first failure other than a refusal.
    pub first_error: Option<String>,
    pub cpu: CpuUse,
    /// Cores busy on the whole machine during the run.
    pub machine_cores: f64,
    /// From the server's /metrics over the run.
    pub model: ModelActivity,
    /// The server's own times (RerankMetadata), summed over the answered calls.
    pub server_sums: ServerTime,
}

impl SweepPoint {
    /// Calls answered.
    pub fn ok(&self) -> usize {
        self.run.ok()
    }

    /// Failures other than refusals.
    pub fn errors(&self) -> usize {
        self.run.errors().saturating_sub(self.refused)
    }

    /// From the first call to the last answer (summed over rounds).
    pub fn elapsed(&self) -> Duration {
        self.run.elapsed
    }

    /// Latency of the answered calls, as the client saw it.
    pub fn latency(&self) -> LatencySummary {
        self.run.latency()
    }

    /// Pairs scored per second, answered calls only.
    pub fn pairs_per_s(&self) -> f64 {
        (self.ok() * self.texts_per_call) as f64 / self.elapsed().as_secs_f64().max(1e-9)
    }

    /// Cores busy on the machine outside the server and the bench.
    pub fn other_cores(&self) -> f64 {
        (self.machine_cores - self.cpu.server_cores - self.cpu.bench_cores).max(0.0)
    }

    /// The server's mean times per answered call.
    pub fn server_time(&self) -> ServerTime {
        let calls = self.ok().max(1) as u32;
        let sums = self.server_sums;
        ServerTime {
            total: sums.total / calls,
            tokenization: sums.tokenization / calls,
            queue: sums.queue / calls,
            inference: sums.inference / calls,
        }
    }

    /// The rounds of one concurrency as one run: calls pooled, times, counts and model
    /// activity added up, CPU shares weighted by each round's time.
    pub fn combine(rounds: &[SweepPoint]) -> SweepPoint {
        let first = &rounds[0];
        let runs: Vec<ClosedLoopRun> = rounds.iter().map(|round| round.run.clone()).collect();
        let cpus: Vec<CpuUse> = rounds.iter().map(|round| round.cpu.clone()).collect();
        let wall: f64 = rounds.iter().map(|round| round.cpu.wall.as_secs_f64()).sum();
        let machine = rounds.iter().map(|round| round.machine_cores * round.cpu.wall.as_secs_f64()).sum::<f64>();
        let sum = |field: fn(&ServerTime) -> Duration| rounds.iter().map(|round| field(&round.server_sums)).sum();
        SweepPoint {
            scorer: first.scorer,
            concurrency: first.concurrency,
            texts_per_call: first.texts_per_call,
            run: ClosedLoopRun::combine(&runs),
            refused: rounds.iter().map(|round| round.refused).sum(),
            first_error: rounds.iter().find_map(|round| round.first_error.clone()),
            cpu: CpuUse::combine(&cpus),
            machine_cores: machine / wall.max(1e-9),
            model: ModelActivity {
                batches: rounds.iter().map(|round| round.model.batches).sum(),
                inputs: rounds.iter().map(|round| round.model.inputs).sum(),
                busy: rounds.iter().map(|round| round.model.busy).sum(),
                refused: rounds.iter().map(|round| round.model.refused).sum(),
            },
            server_sums: ServerTime {
                total: sum(|t| t.total),
                tokenization: sum(|t| t.tokenization),
                queue: sum(|t| t.queue),
                inference: sum(|t| t.inference),
            },
        }
    }
}

/// What the scoring model did during a run, from the server's counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelActivity {
    pub batches: f64,
    /// Inputs run in those batches (pairs; for the bi-encoder, texts and queries).
    pub inputs: f64,
    /// Model time summed over the batches.
    pub busy: Duration,
    /// Calls the server counted as refused (its view of `refused`).
    pub refused: f64,
}

impl ModelActivity {
    /// Inputs per batch.
    pub fn mean_batch(&self) -> f64 {
        self.inputs / self.batches.max(1.0)
    }

    /// Model time per input, in ms: what a pair (or text) costs in the batches the
    /// server formed.
    pub fn ms_per_input(&self) -> f64 {
        self.busy.as_secs_f64() * 1e3 / self.inputs.max(1.0)
    }
}

/// Time of answered calls, as the server accounts it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerTime {
    /// From the request's arrival to its answer.
    pub total: Duration,
    /// Tokenizing the pairs (the cross-encoder; the bi-encoder's is inside its model
    /// time).
    pub tokenization: Duration,
    /// From queueing to the start of the call's first batch.
    pub queue: Duration,
    /// Model time of the batches that held the call's inputs.
    pub inference: Duration,
}

/// One pass over the concurrencies of `concurrency` against `server`, each run after
/// an unmeasured warm-up at the same concurrency.
pub async fn pass(
    server: &ServerProcess,
    scorer: Scorer,
    workload: &Arc<Workload>,
    concurrency: &[usize],
    clients_per_connection: usize,
    warmup: Duration,
    run_time: Duration,
) -> anyhow::Result<Vec<SweepPoint>> {
    let mut points = Vec::with_capacity(concurrency.len());
    for &clients in concurrency {
        let mut channels = Vec::new();
        for _ in 0..clients.div_ceil(clients_per_connection) {
            channels.push(server.connect().await?);
        }
        let callers = |tally: &Arc<Tally>| -> Vec<RerankCaller> {
            (0..clients)
                .map(|worker| RerankCaller {
                    client: RerankServiceClient::new(channels[worker % channels.len()].clone()),
                    workload: workload.clone(),
                    scorer,
                    worker,
                    workers: clients,
                    tally: tally.clone(),
                    pause: FIRST_PAUSE,
                })
                .collect()
        };
        if !warmup.is_zero() {
            closed_loop::run(callers(&Arc::new(Tally::default())), Stop::After(warmup)).await?;
        }

        let tally = Arc::new(Tally::default());
        let metrics_before = MetricsSnapshot::read(server.address).await?;
        let machine_before = cpu::machine_busy_time()?;
        let window = CpuWindow::start(server.pid)?;
        let run = closed_loop::run(callers(&tally), Stop::After(run_time)).await?;
        let cpu = window.finish()?;
        let machine_cores = cpu::cores(machine_before, cpu::machine_busy_time()?, cpu.wall);
        let metrics_after = MetricsSnapshot::read(server.address).await?;

        let [batches, inputs, seconds] = scorer.model_metrics();
        let total = |sum: &AtomicU64| Duration::from_nanos(sum.load(Ordering::Relaxed));
        let point = SweepPoint {
            scorer,
            concurrency: clients,
            texts_per_call: workload.texts_per_call,
            run,
            refused: tally.refused.load(Ordering::Relaxed) as usize,
            first_error: tally.first_failure.lock().ok().and_then(|first| first.clone()),
            cpu,
            machine_cores,
            model: ModelActivity {
                batches: metrics_after.since(&metrics_before, batches),
                inputs: metrics_after.since(&metrics_before, inputs),
                busy: Duration::from_secs_f64(metrics_after.since(&metrics_before, seconds).max(0.0)),
                refused: metrics_after.since(&metrics_before, "embedwire_rerank_rejected_overload_total"),
            },
            server_sums: ServerTime {
                total: total(&tally.server_total_ns),
                tokenization: total(&tally.tokenization_ns),
                queue: total(&tally.queue_ns),
                inference: total(&tally.inference_ns),
            },
        };
        print_point(&point);
        anyhow::ensure!(
            point.ok() > 0,
            "{} c={clients}: no call was answered ({} refused, {} errors; first: {})",
            scorer.name(),
            point.refused,
            point.errors(),
            point.first_error.as_deref().unwrap_or("-")
        );
        points.push(point);
    }
    Ok(points)
}

fn print_point(point: &SweepPoint) {
    let (l, t) = (point.latency(), point.server_time());
    println!(
        "  c={:<2} {:>6.1} pairs/s  {} calls, {} refused, {} errors  p50 {:.1} ms  p99 {:.1} ms  | model busy {:.2}, \
         {:.1} inputs/batch, {:.2} ms/input  | server: queue {:.1} ms, tokenize {:.2} ms per call",
        point.concurrency,
        point.pairs_per_s(),
        point.ok(),
        point.refused,
        point.errors(),
        ms(l.p50),
        ms(l.p99),
        point.model.busy.as_secs_f64() / point.cpu.wall.as_secs_f64(),
        point.model.mean_batch(),
        point.model.ms_per_input(),
        ms(t.queue),
        ms(t.tokenization),
    );
    println!("       CPU: {}, other {:.2} cores", point.cpu, point.other_cores());
    if let Some(error) = &point.first_error {
        println!("       first error: {error}");
    }
}
