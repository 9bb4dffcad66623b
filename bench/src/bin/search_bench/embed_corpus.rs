//! The Embed side of the ingest comparison: every corpus text through
//! `EmbedService/Embed`, in calls of a fixed size taken in order from a shared
//! queue by a few concurrent clients, the way a client batch job would.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use embedwire_proto::v1::EmbedRequest;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use tonic::transport::Channel;

/// What embedding a list of texts did.
#[derive(Debug, Clone)]
pub struct EmbedCorpusRun {
    /// Texts embedded.
    pub texts: usize,
    /// Embed calls made.
    pub calls: usize,
    /// From the first call leaving to the last answer.
    pub elapsed: Duration,
    /// Tokens of each text as the server counted them (special tokens included),
    /// in text order.
    pub token_counts: Vec<u32>,
}

impl EmbedCorpusRun {
    /// Texts per second.
    pub fn rate(&self) -> f64 {
        self.texts as f64 / self.elapsed.as_secs_f64()
    }

    /// Runs over consecutive slices of the texts as one run over all of them.
    pub fn combine(parts: &[EmbedCorpusRun]) -> Self {
        EmbedCorpusRun {
            texts: parts.iter().map(|part| part.texts).sum(),
            calls: parts.iter().map(|part| part.calls).sum(),
            elapsed: parts.iter().map(|part| part.elapsed).sum(),
            token_counts: parts.iter().flat_map(|part| part.token_counts.iter().copied()).collect(),
        }
    }
}

/// Embeds all `texts` in calls of `per_call` texts from `clients` concurrent clients
/// (client k on channel k mod n); fails on the first failed call.
pub async fn embed_all(
    channels: &[Channel],
    clients: usize,
    texts: Arc<[String]>,
    per_call: usize,
) -> anyhow::Result<EmbedCorpusRun> {
    anyhow::ensure!(!channels.is_empty() && clients > 0 && per_call > 0, "nothing to run");
    let calls = texts.len().div_ceil(per_call);
    let next_call = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|k| {
            let client = EmbedServiceClient::new(channels[k % channels.len()].clone());
            tokio::spawn(client_loop(client, texts.clone(), per_call, calls, next_call.clone()))
        })
        .collect();
    let mut answered: Vec<(usize, Vec<u32>)> = Vec::with_capacity(calls);
    for task in tasks {
        answered.extend(task.await.context("client task")??);
    }
    let elapsed = started.elapsed();
    answered.sort_unstable_by_key(|(call, _)| *call);
    let token_counts: Vec<u32> = answered.into_iter().flat_map(|(_, counts)| counts).collect();
    anyhow::ensure!(token_counts.len() == texts.len(), "{} of {} texts answered", token_counts.len(), texts.len());
    Ok(EmbedCorpusRun { texts: texts.len(), calls, elapsed, token_counts })
}

/// One client: takes the next call's texts until none are left; returns the call
/// indices it made with the token counts of their texts.
async fn client_loop(
    mut client: EmbedServiceClient<Channel>,
    texts: Arc<[String]>,
    per_call: usize,
    calls: usize,
    next_call: Arc<AtomicUsize>,
) -> anyhow::Result<Vec<(usize, Vec<u32>)>> {
    let mut answered = Vec::new();
    loop {
        let call = next_call.fetch_add(1, Ordering::Relaxed);
        if call >= calls {
            return Ok(answered);
        }
        let inputs = texts[call * per_call..((call + 1) * per_call).min(texts.len())].to_vec();
        let count = inputs.len();
        let response = client
            .embed(EmbedRequest { inputs, ..Default::default() })
            .await
            .with_context(|| format!("Embed call {call} failed"))?
            .into_inner();
        anyhow::ensure!(
            response.count as usize == count && response.token_counts.len() == count,
            "Embed answered {} vectors for {count} inputs",
            response.count
        );
        answered.push((call, response.token_counts));
    }
}
