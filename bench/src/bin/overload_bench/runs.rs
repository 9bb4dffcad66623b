//! One open-loop Embed run (one text per call) and what it measured: calls by
//! outcome, latency of the answered calls and of the rejections apart, goodput.

use std::sync::Arc;
use std::time::Duration;

use embedwire_bench::latency::LatencySummary;
use embedwire_bench::open_loop::{self, Call, Outcome, Sample, Schedule};
use embedwire_proto::v1::EmbedRequest;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use tonic::transport::Channel;

/// A bound on unanswered calls: above what the server's admission keeps waiting
/// at 3x load, so the offered load is the scheduled one.
const MAX_IN_FLIGHT: usize = 50_000;

/// Embed of one text per call, call n with text n on connection n (both modulo
/// their count), default options (float32, normalized).
pub struct EmbedOne {
    clients: Vec<EmbedServiceClient<Channel>>,
    texts: Arc<[String]>,
}

impl EmbedOne {
    pub fn new(channels: &[Channel], texts: Arc<[String]>) -> Self {
        EmbedOne { clients: channels.iter().cloned().map(EmbedServiceClient::new).collect(), texts }
    }
}

impl Call for EmbedOne {
    async fn call(&self, n: u64) -> (usize, Outcome) {
        let n = n as usize;
        let mut client = self.clients[n % self.clients.len()].clone();
        let request = EmbedRequest { inputs: vec![self.texts[n % self.texts.len()].clone()], ..Default::default() };
        let outcome = Outcome::of(client.embed(request).await, |response| {
            let response = response.into_inner();
            if response.count == 1 && response.embeddings.len() == response.dim as usize * 4 {
                Ok(())
            } else {
                Err(format!(
                    "Embed of one text answered {} vectors in {} bytes",
                    response.count,
                    response.embeddings.len()
                ))
            }
        });
        (0, outcome)
    }
}

/// What one open-loop run measured.
#[derive(Debug, Clone)]
pub struct OpenRun {
    /// The offered rate, calls/s.
    pub offered: f64,
    pub sent: u64,
    /// From the first call to the last answer.
    pub elapsed: Duration,
    /// Calls the generator held back at its in-flight bound (0 in a sane run).
    pub held_back: u64,
    pub rejected: usize,
    pub failed: usize,
    /// Answered calls.
    pub accepted: LatencySummary,
    /// RESOURCE_EXHAUSTED answers.
    pub rejections: LatencySummary,
    /// How late the generator sent the calls.
    pub lag: LatencySummary,
    pub first_error: Option<String>,
}

impl OpenRun {
    /// Answered calls per second, over the whole run (the queue's drain included:
    /// the server works all along).
    pub fn goodput(&self) -> f64 {
        self.accepted.count as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Offers `rate` Embed calls per second for `duration`.
pub async fn run(call: Arc<EmbedOne>, rate: f64, duration: Duration) -> anyhow::Result<OpenRun> {
    let schedule = Schedule { rate, duration, max_in_flight: MAX_IN_FLIGHT };
    let mut samples: Vec<Sample> = Vec::with_capacity(schedule.calls() as usize);
    let run = open_loop::run(call, schedule, |sample| samples.push(sample)).await?;
    let failure = Outcome::Failed(String::new());
    Ok(OpenRun {
        offered: rate,
        sent: run.sent,
        elapsed: run.elapsed,
        held_back: run.held_back,
        rejected: samples.iter().filter(|s| s.outcome == Outcome::Rejected).count(),
        failed: samples.iter().filter(|s| open_loop::same_outcome(&s.outcome, &failure)).count(),
        accepted: open_loop::latency_of(&samples, None, &Outcome::Ok),
        rejections: open_loop::latency_of(&samples, None, &Outcome::Rejected),
        lag: open_loop::lag_of(&samples),
        first_error: samples.iter().find_map(|s| match &s.outcome {
            Outcome::Failed(message) => Some(message.clone()),
            _ => None,
        }),
    })
}
