//! Client load on the server: a number of clients, each a tokio task sending one
//! text per call (Embed, or Search with one text query) in a closed loop (the next
//! call leaves when the previous answer arrives), sharing a few HTTP/2 connections
//! the way real clients would; or one open-loop client, whose calls leave on a fixed
//! schedule whether or not earlier ones have been answered, so that they sample the
//! server at moments that do not depend on how fast it answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::search_query::Query;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{EmbedRequest, SearchQuery, SearchRequest};
use tonic::transport::Channel;

use crate::latency::LatencySummary;

/// What a load run did.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Calls answered, one text each.
    pub calls: usize,
    /// From the first call leaving to the last answer arriving.
    pub elapsed: Duration,
    /// Time of each call, as the client saw it.
    pub latency: LatencySummary,
    /// The times summarized in `latency`, kept so runs can be combined.
    pub samples: Vec<Duration>,
}

impl LoadResult {
    fn from_samples(samples: Vec<Duration>, elapsed: Duration) -> Self {
        LoadResult { calls: samples.len(), elapsed, latency: LatencySummary::from_samples(samples.clone()), samples }
    }

    /// Several runs as one: calls and time added up, latencies pooled.
    pub fn combine(parts: &[LoadResult]) -> Self {
        let samples = parts.iter().flat_map(|part| part.samples.iter().copied()).collect();
        LoadResult::from_samples(samples, parts.iter().map(|part| part.elapsed).sum())
    }

    /// Calls (= texts) per second.
    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }
}

/// The call each client repeats, always with one text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    /// `EmbedService/Embed` with default options (float32, normalized), as a typical
    /// client sends it.
    Embed,
    /// `SearchService/Search` with one text query and default options (hit texts and
    /// metadata included, rerank as the server decides).
    Search {
        /// Hits asked for.
        top_k: u32,
    },
}

/// How long the clients keep calling.
#[derive(Debug, Clone)]
pub enum Stop {
    /// Calls leave until this much time has passed.
    After(Duration),
    /// Each client makes this many calls.
    Calls(usize),
    /// Calls leave until the flag is set (by whatever the run is measured against).
    When(Arc<AtomicBool>),
}

impl Stop {
    /// Whether a client that started at `started` and made `calls` calls stops.
    pub fn reached(&self, started: Instant, calls: usize) -> bool {
        match self {
            Stop::After(time) => started.elapsed() >= *time,
            Stop::Calls(limit) => calls >= *limit,
            Stop::When(flag) => flag.load(Ordering::Acquire),
        }
    }
}

/// Runs `clients` clients spread evenly over `channels` (client k on channel
/// k mod n) until `stop`, and fails on the first failed call: a run with errors
/// would measure something else than the work asked for.
pub async fn run(
    channels: &[Channel],
    clients: usize,
    texts: Arc<[String]>,
    rpc: Rpc,
    stop: Stop,
) -> anyhow::Result<LoadResult> {
    anyhow::ensure!(!channels.is_empty() && clients > 0 && !texts.is_empty(), "nothing to run");
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|k| {
            let client = Client::new(rpc, channels[k % channels.len()].clone());
            // Clients start far apart in the text list, so concurrent calls carry
            // different texts.
            let first = k * texts.len() / clients;
            tokio::spawn(client_loop(client, texts.clone(), first, started, stop.clone()))
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.context("client task")??);
    }
    Ok(LoadResult::from_samples(latencies, started.elapsed()))
}

/// Open-loop calls beyond which a paced client waits for an answer before sending
/// more: a bound for a server that stopped answering, never reached in a sane run.
const MAX_PACED_IN_FLIGHT: usize = 256;

/// One client on `channel` whose calls leave every `interval` until `stop`, each on
/// its own task, whether or not the earlier ones have been answered (open loop).
///
/// A closed-loop client measures the latency of the calls it happens to make, at
/// moments set by the server: when the server alternates between a slow phase and
/// short gaps (a model batch of background work, then a gap where a query slips
/// in), each next call leaves right after the previous answer, at the start of the
/// next slow phase, and waits all of it. Calls on a fixed schedule arrive at moments
/// independent of the server's phases, as users' do.
pub async fn run_paced(
    channel: &Channel,
    texts: Arc<[String]>,
    rpc: Rpc,
    stop: Stop,
    interval: Duration,
) -> anyhow::Result<LoadResult> {
    anyhow::ensure!(!texts.is_empty() && !interval.is_zero(), "nothing to run");
    let client = Client::new(rpc, channel.clone());
    let mut ticks = tokio::time::interval(interval);
    // If the bench itself falls behind, it goes on at the same pace instead of
    // sending the missed calls in a burst.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight = tokio::task::JoinSet::new();
    let mut latencies = Vec::new();
    let started = Instant::now();
    for n in 0.. {
        ticks.tick().await;
        if stop.reached(started, n) {
            break;
        }
        while in_flight.len() >= MAX_PACED_IN_FLIGHT {
            latencies.push(in_flight.join_next().await.context("no call in flight")?.context("call task")??);
        }
        let (mut client, text) = (client.clone(), texts[n % texts.len()].clone());
        in_flight.spawn(async move {
            let call = Instant::now();
            client.call(text).await?;
            anyhow::Ok(call.elapsed())
        });
        while let Some(done) = in_flight.try_join_next() {
            latencies.push(done.context("call task")??);
        }
    }
    while let Some(done) = in_flight.join_next().await {
        latencies.push(done.context("call task")??);
    }
    Ok(LoadResult::from_samples(latencies, started.elapsed()))
}

/// One client: calls until `stop`, each right after the previous answer; returns
/// the latency of each call.
async fn client_loop(
    mut client: Client,
    texts: Arc<[String]>,
    first: usize,
    started: Instant,
    stop: Stop,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::new();
    for n in 0.. {
        if stop.reached(started, n) {
            break;
        }
        let text = texts[(first + n) % texts.len()].clone();
        let call = Instant::now();
        client.call(text).await?;
        latencies.push(call.elapsed());
    }
    Ok(latencies)
}

/// A generated client for the rpc under load.
#[derive(Clone)]
enum Client {
    Embed(EmbedServiceClient<Channel>),
    Search { client: SearchServiceClient<Channel>, top_k: u32 },
}

impl Client {
    fn new(rpc: Rpc, channel: Channel) -> Self {
        match rpc {
            Rpc::Embed => Client::Embed(EmbedServiceClient::new(channel)),
            Rpc::Search { top_k } => Client::Search { client: SearchServiceClient::new(channel), top_k },
        }
    }

    /// One call with one text; checks that the answer has the expected shape.
    async fn call(&mut self, text: String) -> anyhow::Result<()> {
        match self {
            Client::Embed(client) => {
                let request = EmbedRequest { inputs: vec![text], ..Default::default() };
                let response = client.embed(request).await.context("Embed call failed")?.into_inner();
                anyhow::ensure!(
                    response.count == 1 && response.embeddings.len() == response.dim as usize * 4,
                    "Embed answered {} vectors in {} bytes for one input",
                    response.count,
                    response.embeddings.len()
                );
            }
            Client::Search { client, top_k } => {
                let request = SearchRequest {
                    queries: vec![SearchQuery { query: Some(Query::Text(text)) }],
                    top_k: Some(*top_k),
                    ..Default::default()
                };
                let response = client.search(request).await.context("Search call failed")?.into_inner();
                anyhow::ensure!(
                    response.results.len() == 1 && !response.results[0].hits.is_empty(),
                    "Search answered {} results (the first with {} hits) for one query",
                    response.results.len(),
                    response.results.first().map_or(0, |r| r.hits.len())
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_runs_add_up_and_pool_latencies() {
        let ms = Duration::from_millis;
        let a = LoadResult::from_samples(vec![ms(1), ms(3)], ms(10));
        let b = LoadResult::from_samples(vec![ms(2)], ms(5));
        let both = LoadResult::combine(&[a, b]);
        assert_eq!((both.calls, both.elapsed), (3, ms(15)));
        assert_eq!((both.latency.p50, both.latency.max), (ms(2), ms(3)));
        assert!((both.rate() - 200.0).abs() < 1e-9);
    }
}
