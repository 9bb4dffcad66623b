//! Client load on the server: a number of clients, each a tokio task sending one
//! sentence per Embed call in a closed loop (the next call leaves when the previous
//! answer arrives), sharing a few HTTP/2 connections the way real clients would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use embedwire_proto::v1::EmbedRequest;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use tonic::transport::Channel;

use crate::latency::LatencySummary;

/// What a load run did.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Embed calls answered, one sentence each.
    pub calls: usize,
    /// From the first call leaving to the last answer arriving.
    pub elapsed: Duration,
    /// Time of each call, as the client saw it.
    pub latency: LatencySummary,
}

impl LoadResult {
    /// Sentences per second.
    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }
}

/// How long the clients keep calling.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// Calls leave until this much time has passed.
    After(Duration),
    /// Each client makes this many calls.
    Calls(usize),
}

/// Runs `clients` clients spread evenly over `channels` (client k on channel
/// k mod n) until `stop`, and fails on the first failed call: a run with errors
/// would measure something else than embedding.
pub async fn run(channels: &[Channel], clients: usize, texts: Arc<[String]>, stop: Stop) -> anyhow::Result<LoadResult> {
    anyhow::ensure!(!channels.is_empty() && clients > 0 && !texts.is_empty(), "nothing to run");
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|k| {
            let client = EmbedServiceClient::new(channels[k % channels.len()].clone());
            // Clients start far apart in the sentence list, so concurrent calls carry
            // different texts.
            let first = k * texts.len() / clients;
            tokio::spawn(client_loop(client, texts.clone(), first, started, stop))
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.context("client task")??);
    }
    let elapsed = started.elapsed();
    Ok(LoadResult { calls: latencies.len(), elapsed, latency: LatencySummary::from_samples(latencies) })
}

/// One client: calls until `stop`, returns the latency of each call.
async fn client_loop(
    mut client: EmbedServiceClient<Channel>,
    texts: Arc<[String]>,
    first: usize,
    started: Instant,
    stop: Stop,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::new();
    for n in 0.. {
        let done = match stop {
            Stop::After(time) => started.elapsed() >= time,
            Stop::Calls(calls) => n >= calls,
        };
        if done {
            break;
        }
        let text = texts[(first + n) % texts.len()].clone();
        let call = Instant::now();
        embed_one(&mut client, text).await?;
        latencies.push(call.elapsed());
    }
    Ok(latencies)
}

/// One Embed call with one sentence and default options (float32, normalized), as a
/// typical client sends it; checks that one vector came back.
async fn embed_one(client: &mut EmbedServiceClient<Channel>, text: String) -> anyhow::Result<()> {
    let request = EmbedRequest { inputs: vec![text], ..Default::default() };
    let response = client.embed(request).await.context("Embed call failed")?.into_inner();
    anyhow::ensure!(
        response.count == 1 && response.embeddings.len() == response.dim as usize * 4,
        "Embed answered {} vectors in {} bytes for one input",
        response.count,
        response.embeddings.len()
    );
    Ok(())
}
