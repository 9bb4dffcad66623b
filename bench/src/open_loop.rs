//! Open-loop load at a fixed request rate: call n is due at `n / rate` seconds from
//! the start and leaves then, on its own task, whether or not earlier calls have
//! been answered. A closed-loop client sends its next call only after an answer,
//! so a slow server also slows the load and the slow moments are sampled less
//! (coordinated omission); on a schedule the offered load stays fixed and a queue
//! in the server shows up as latency. Failed calls are results: each one is
//! classified, RESOURCE_EXHAUSTED (the server's admission control refusing work)
//! apart from every other failure.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::task::JoinSet;

use crate::latency::LatencySummary;

/// How one call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered, and the answer had the expected shape.
    Ok,
    /// RESOURCE_EXHAUSTED: refused by admission control, the answer overload is
    /// meant to get.
    Rejected,
    /// Anything else: another status, a transport error or a malformed answer.
    Failed(String),
}

impl Outcome {
    /// A call's result: a gRPC status code says whether it was a rejection;
    /// `check` validates a successful answer.
    pub fn of<T>(result: Result<T, tonic::Status>, check: impl FnOnce(T) -> Result<(), String>) -> Self {
        match result {
            Ok(answer) => match check(answer) {
                Ok(()) => Outcome::Ok,
                Err(problem) => Outcome::Failed(problem),
            },
            Err(status) if status.code() == tonic::Code::ResourceExhausted => Outcome::Rejected,
            Err(status) => Outcome::Failed(format!("{:?}: {}", status.code(), status.message())),
        }
    }
}

/// One call as the load generator saw it.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The caller's own kind of call (e.g. Embed, Search, Ingest of a mix).
    pub kind: usize,
    /// When the call was due, from the start of the run.
    pub due: Duration,
    /// How late it left: the generator's own delay (a client short of CPU, timer
    /// granularity). Kept apart so it can be judged separately from the server.
    pub lag: Duration,
    /// From leaving to the answer: what a client of the server waits.
    pub latency: Duration,
    pub outcome: Outcome,
}

/// The call a run repeats; `n` numbers the calls from 0, so a caller can pick
/// inputs and kinds deterministically.
pub trait Call: Send + Sync + 'static {
    /// Makes call `n`; returns its kind and how it ended.
    fn call(&self, n: u64) -> impl Future<Output = (usize, Outcome)> + Send;
}

/// The offered load.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Calls per second.
    pub rate: f64,
    /// Calls leave for this long; the run ends when the last one is answered.
    pub duration: Duration,
    /// A bound on unanswered calls, for a server that stopped answering: when it
    /// is reached the schedule waits (and the run records it in `held_back`).
    pub max_in_flight: usize,
}

impl Schedule {
    /// Calls the schedule sends.
    pub fn calls(&self) -> u64 {
        (self.rate * self.duration.as_secs_f64()).round() as u64
    }
}

/// What a run did, besides its samples.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoopRun {
    /// Calls sent.
    pub sent: u64,
    /// From the start to the last answer.
    pub elapsed: Duration,
    /// Calls that waited for `max_in_flight`: non-zero means the offered load was
    /// not the scheduled one.
    pub held_back: u64,
}

/// Sends `schedule`'s calls of `caller`, handing each finished call to `on_sample`
/// (in the order they finish) as the run goes, so a long run can report as it goes
/// and keep only what it needs.
pub async fn run<C: Call>(
    caller: Arc<C>,
    schedule: Schedule,
    mut on_sample: impl FnMut(Sample),
) -> anyhow::Result<OpenLoopRun> {
    anyhow::ensure!(
        schedule.rate > 0.0 && schedule.rate.is_finite() && schedule.max_in_flight > 0,
        "bad schedule {schedule:?}"
    );
    let started = Instant::now();
    let mut in_flight: JoinSet<Sample> = JoinSet::new();
    let mut held_back = 0;
    let calls = schedule.calls();
    for n in 0..calls {
        let due = Duration::from_secs_f64(n as f64 / schedule.rate);
        let at = started + due;
        // Until the call is due, collect the answers that arrive (those already in
        // first: biased).
        loop {
            tokio::select! {
                biased;
                Some(done) = in_flight.join_next() => on_sample(done.context("call task")?),
                () = tokio::time::sleep_until(at.into()) => break,
            }
        }
        if in_flight.len() >= schedule.max_in_flight {
            held_back += 1;
            while in_flight.len() >= schedule.max_in_flight {
                on_sample(in_flight.join_next().await.context("no call in flight")?.context("call task")?);
            }
        }
        let caller = caller.clone();
        in_flight.spawn(async move {
            let left = Instant::now();
            let (kind, outcome) = caller.call(n).await;
            Sample { kind, due, lag: left.saturating_duration_since(at), latency: left.elapsed(), outcome }
        });
    }
    while let Some(done) = in_flight.join_next().await {
        on_sample(done.context("call task")?);
    }
    Ok(OpenLoopRun { sent: calls, elapsed: started.elapsed(), held_back })
}

/// Calls by outcome, answered and refused ones timed apart; how late each left; the first failure.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub ok: Vec<Duration>,
    pub rejected: Vec<Duration>,
    pub failed: usize,
    pub lags: Vec<Duration>,
    pub first_error: Option<String>,
}

impl Tally {
    pub fn add(&mut self, sample: &Sample) {
        self.lags.push(sample.lag);
        match &sample.outcome {
            Outcome::Ok => self.ok.push(sample.latency),
            Outcome::Rejected => self.rejected.push(sample.latency),
            Outcome::Failed(error) => {
                self.failed += 1;
                self.first_error.get_or_insert_with(|| error.clone());
            }
        }
    }

    /// Latency of the answered calls.
    pub fn latency(&self) -> LatencySummary {
        LatencySummary::from_samples(self.ok.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rejects every third call and fails every fifth, after a short pause.
    struct Scripted;

    impl Call for Scripted {
        async fn call(&self, n: u64) -> (usize, Outcome) {
            tokio::time::sleep(Duration::from_millis(2)).await;
            let outcome = match n {
                n if n % 5 == 4 => Outcome::Failed("boom".into()),
                n if n % 3 == 2 => Outcome::Rejected,
                _ => Outcome::Ok,
            };
            ((n % 2) as usize, outcome)
        }
    }

    #[tokio::test]
    async fn sends_every_scheduled_call_and_classifies_them() {
        let schedule = Schedule { rate: 500.0, duration: Duration::from_millis(60), max_in_flight: 1000 };
        let (mut samples, mut tally) = (Vec::new(), Tally::default());
        let run = run(Arc::new(Scripted), schedule, |s| samples.push(s)).await.unwrap();
        samples.iter().for_each(|s| tally.add(s));
        assert_eq!((run.sent, samples.len()), (30, 30));
        assert_eq!(run.held_back, 0);
        // n in 0..30: 6 with n % 5 == 4; of the rest, n % 3 == 2 and n % 5 != 4: 8.
        assert_eq!((tally.failed, tally.rejected.len(), tally.ok.len()), (6, 8, 16));
        assert_eq!(tally.first_error.as_deref(), Some("boom"));
        // Calls leave on schedule (one every 2 ms), not one after the other's answer.
        let mut due: Vec<_> = samples.iter().map(|s| s.due).collect();
        due.sort();
        assert_eq!(due[29], Duration::from_millis(58));
        assert!(samples.iter().all(|s| s.latency >= Duration::from_millis(2)));
        assert!(run.elapsed >= Duration::from_millis(60));
    }

    #[tokio::test]
    async fn a_full_in_flight_bound_holds_calls_back() {
        let schedule = Schedule { rate: 10_000.0, duration: Duration::from_millis(5), max_in_flight: 2 };
        let mut answered = 0;
        let run = run(Arc::new(Scripted), schedule, |_| answered += 1).await.unwrap();
        assert_eq!((run.sent, answered), (50, 50));
        assert!(run.held_back > 0, "{run:?}");
    }

    #[test]
    fn statuses_are_classified() {
        let ok = Outcome::of(Ok::<u32, tonic::Status>(1), |v| if v == 1 { Ok(()) } else { Err("bad".into()) });
        assert_eq!(ok, Outcome::Ok);
        let malformed = Outcome::of(Ok::<u32, tonic::Status>(2), |_| Err("two".into()));
        assert_eq!(malformed, Outcome::Failed("two".into()));
        let refused = Outcome::of(Err::<(), _>(tonic::Status::resource_exhausted("full")), |_| Ok(()));
        assert_eq!(refused, Outcome::Rejected);
        let failed = Outcome::of(Err::<(), _>(tonic::Status::internal("oops")), |_| Ok(()));
        assert_eq!(failed, Outcome::Failed("Internal: oops".into()));
    }
}
