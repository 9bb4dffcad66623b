//! Clients sending one text per call (Embed, or Search with one text query), sharing a few HTTP/2 connections the way
//! real clients would, in a closed loop or paced. A failed call fails the run: errors mean other work than asked.

use std::{sync::Arc, time::Duration, time::Instant};

use anyhow::Context;
use embedwire_proto::v1::{
    EmbedRequest, SearchQuery, SearchRequest, embed_service_client::EmbedServiceClient, search_query::Query,
    search_service_client::SearchServiceClient,
};
use tonic::transport::Channel;

pub use crate::closed_loop::Stop;
use crate::{
    closed_loop, closed_loop::Caller, latency::LatencySummary, open_loop, open_loop::Call, open_loop::Outcome,
};

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

    /// Runs as one: calls and time added up, latencies pooled.
    pub fn combine(parts: &[LoadResult]) -> Self {
        let samples = parts.iter().flat_map(|part| part.samples.iter().copied()).collect();
        LoadResult::from_samples(samples, parts.iter().map(|part| part.elapsed).sum())
    }

    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }
}

/// The call each client repeats, always with one text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    /// `EmbedService/Embed` with default options (float32, normalized), as a typical client sends it.
    Embed,
    /// `SearchService/Search`, one text query, default options (hit texts and metadata included, server-chosen rerank),
    /// in `collection` (empty: the default one).
    Search { top_k: u32, collection: &'static str },
}

/// Runs `clients` clients over `channels` (client k on channel k mod n) until `stop`; a failed call fails the run.
pub async fn run(
    channels: &[Channel],
    clients: usize,
    texts: Arc<[String]>,
    rpc: Rpc,
    stop: Stop,
) -> anyhow::Result<LoadResult> {
    anyhow::ensure!(!channels.is_empty() && clients > 0 && !texts.is_empty(), "nothing to run");
    // Clients start far apart in the text list, so concurrent calls carry different texts.
    let callers = (0..clients).map(|k| {
        let channel = channels[k % channels.len()].clone();
        OneText { rpc, channel, texts: texts.clone(), first: k * texts.len() / clients }
    });
    let run = closed_loop::run(callers.collect(), stop).await?;
    if let Some(error) = run.first_error {
        anyhow::bail!(error);
    }
    Ok(LoadResult::from_samples(run.timings.iter().map(|timing| timing.latency).collect(), run.elapsed))
}

/// Unanswered calls at which a paced client waits: a bound for a server that stopped answering, not hit in a sane run.
const MAX_PACED_IN_FLIGHT: usize = 256;

/// One client on `channel` whose calls leave every `interval` until `stop`, whether or not the earlier ones have been
/// answered ([`open_loop::paced`]).
///
/// A closed-loop client samples the server at moments the server sets: when it alternates between a slow phase and
/// short gaps (a model batch of background work, then a gap where a query slips in), each next call leaves right after
/// the previous answer, at the start of the next slow phase, and waits all of it. Calls on a fixed schedule arrive
/// independently of the server's phases, as users' do.
pub async fn run_paced(
    channel: &Channel,
    texts: Arc<[String]>,
    rpc: Rpc,
    stop: Stop,
    interval: Duration,
) -> anyhow::Result<LoadResult> {
    anyhow::ensure!(!texts.is_empty(), "nothing to run");
    let started = Instant::now();
    let caller = Arc::new(OneText { rpc, channel: channel.clone(), texts, first: 0 });
    let (latencies, elapsed) =
        open_loop::paced(caller, interval, MAX_PACED_IN_FLIGHT, |n| stop.reached(started, n as usize)).await?;
    Ok(LoadResult::from_samples(latencies, elapsed))
}

/// One client: its rpc, and the texts it sends in rotation from `first`.
#[derive(Clone)]
struct OneText {
    rpc: Rpc,
    channel: Channel,
    texts: Arc<[String]>,
    first: usize,
}

impl Call for OneText {
    async fn call(&self, n: u64) -> (usize, Outcome) {
        let result = Caller::call(&mut self.clone(), n as usize).await;
        (0, result.map_or_else(|error| Outcome::Failed(format!("{error:#}")), |()| Outcome::Ok))
    }
}

impl Caller for OneText {
    /// One call with the next text; checks that the answer has the expected shape.
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let text = self.texts[(self.first + n) % self.texts.len()].clone();
        match self.rpc {
            Rpc::Embed => {
                let request = EmbedRequest { inputs: vec![text], ..Default::default() };
                let mut client = EmbedServiceClient::new(self.channel.clone());
                let response = client.embed(request).await.context("Embed call failed")?.into_inner();
                anyhow::ensure!(
                    response.count == 1 && response.embeddings.len() == response.dim as usize * 4,
                    "Embed answered {} vectors in {} bytes for one input",
                    response.count,
                    response.embeddings.len()
                );
            }
            Rpc::Search { top_k, collection } => {
                let request = SearchRequest {
                    queries: vec![SearchQuery { query: Some(Query::Text(text)) }],
                    top_k: Some(top_k),
                    collection: collection.to_string(),
                    ..Default::default()
                };
                let mut client = SearchServiceClient::new(self.channel.clone());
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
