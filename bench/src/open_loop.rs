//! Open-loop load: each call leaves on a schedule, on its own task, whether or not earlier calls have been answered. A
//! closed-loop client sends its next call only after an answer, so a slow server slows the load and its slow moments
//! are sampled less (coordinated omission); on a schedule a queue in the server shows up as latency. Each call is
//! classified: RESOURCE_EXHAUSTED (admission control refusing work) apart from every other failure.

use std::{future::Future, sync::Arc, time::Duration, time::Instant};

use anyhow::Context;
use tokio::{task::JoinSet, time::Interval, time::MissedTickBehavior};

use crate::latency::LatencySummary;

/// How one call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered, and the answer had the expected shape.
    Ok,
    /// RESOURCE_EXHAUSTED: refused by admission control, as overload should be.
    Rejected,
    /// Anything else: another status, a transport error or a malformed answer.
    Failed(String),
}

impl Outcome {
    /// A call's result by its gRPC status; `check` validates a successful answer.
    pub fn of<T>(result: Result<T, tonic::Status>, check: impl FnOnce(T) -> Result<(), String>) -> Self {
        match result {
            Ok(answer) => check(answer).map_or_else(Outcome::Failed, |()| Outcome::Ok),
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
    /// How late it left: the generator's own delay, judged apart from the server.
    pub lag: Duration,
    /// From leaving to the answer: what a client of the server waits.
    pub latency: Duration,
    pub outcome: Outcome,
}

/// The call a run repeats; `n` numbers the calls from 0, so a caller can pick inputs and kinds deterministically.
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
    /// A bound on unanswered calls, for a server that stopped answering: at it the schedule waits (`held_back`).
    pub max_in_flight: usize,
}

/// What a run did, besides its samples.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoopRun {
    pub sent: u64,
    /// From the start to the last answer.
    pub elapsed: Duration,
    /// Calls that waited for `max_in_flight`: non-zero means the offered load was not the scheduled one.
    pub held_back: u64,
}

/// Sends `schedule`'s calls, call n due at `n / rate` from the start (late calls leave at once, in a burst), handing
/// each finished call to `on_sample` as the run goes, so a long run can report as it goes and keep only what it needs.
pub async fn run<C: Call>(
    caller: Arc<C>,
    schedule: Schedule,
    mut on_sample: impl FnMut(Sample),
) -> anyhow::Result<OpenLoopRun> {
    let period = Duration::try_from_secs_f64(1.0 / schedule.rate).ok().filter(|period| !period.is_zero());
    let (Some(period), true) = (period, schedule.max_in_flight > 0) else { anyhow::bail!("bad schedule {schedule:?}") };
    let started = Instant::now();
    let ticks = tokio::time::interval_at(started.into(), period);
    let calls = (schedule.rate * schedule.duration.as_secs_f64()).round() as u64;
    let on_sample = |sample| {
        on_sample(sample);
        Ok(())
    };
    let held_back = drive(caller, (started, ticks), schedule.max_in_flight, |n| n >= calls, on_sample).await?;
    Ok(OpenLoopRun { sent: calls, elapsed: started.elapsed(), held_back })
}

/// Sends a call every `interval` until `stop`; a sender that falls behind goes on at the same pace instead of sending
/// the missed calls in a burst. Fails on the first call not [`Outcome::Ok`]. Returns the latencies and the run's time.
pub async fn paced<C: Call>(
    caller: Arc<C>,
    interval: Duration,
    max_in_flight: usize,
    stop: impl Fn(u64) -> bool,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    anyhow::ensure!(!interval.is_zero(), "no interval");
    let started = Instant::now();
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut latencies = Vec::new();
    drive(caller, (started, ticks), max_in_flight, stop, |sample| match sample.outcome {
        Outcome::Ok => {
            latencies.push(sample.latency);
            Ok(())
        }
        Outcome::Rejected => anyhow::bail!("refused: RESOURCE_EXHAUSTED"),
        Outcome::Failed(error) => anyhow::bail!(error),
    })
    .await?;
    Ok((latencies, started.elapsed()))
}

/// The engine of both: call n leaves at the n-th tick of `ticks` (which started at `started`) unless `stop(n)`, never
/// more than `max_in_flight` unanswered (waits counted and returned); answers go to `on_sample` as they arrive.
async fn drive<C: Call>(
    caller: Arc<C>,
    (started, mut ticks): (Instant, Interval),
    max_in_flight: usize,
    stop: impl Fn(u64) -> bool,
    mut on_sample: impl FnMut(Sample) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let mut in_flight: JoinSet<Sample> = JoinSet::new();
    let mut held_back = 0;
    for n in (0..).take_while(|&n| !stop(n)) {
        // Until the call is due, collect the answers that arrive (those already in first: biased).
        let at: Instant = loop {
            tokio::select! {
                biased;
                Some(done) = in_flight.join_next() => on_sample(done.context("call task")?)?,
                at = ticks.tick() => break at.into(),
            }
        };
        // Checked again: a flag may have been set while waiting.
        if stop(n) {
            break;
        }
        if in_flight.len() >= max_in_flight {
            held_back += 1;
            while in_flight.len() >= max_in_flight {
                on_sample(in_flight.join_next().await.context("no call in flight")?.context("call task")?)?;
            }
        }
        let caller = caller.clone();
        in_flight.spawn(async move {
            let left = Instant::now();
            let (kind, outcome) = caller.call(n).await;
            let due = at.saturating_duration_since(started);
            Sample { kind, due, lag: left.saturating_duration_since(at), latency: left.elapsed(), outcome }
        });
    }
    while let Some(done) = in_flight.join_next().await {
        on_sample(done.context("call task")?)?;
    }
    Ok(held_back)
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

    /// Answers after 2 ms; call 7 fails.
    struct Slow;

    impl Call for Slow {
        async fn call(&self, n: u64) -> (usize, Outcome) {
            tokio::time::sleep(Duration::from_millis(2)).await;
            (0, if n == 7 { Outcome::Failed("boom".into()) } else { Outcome::Ok })
        }
    }

    #[tokio::test]
    async fn calls_leave_on_schedule_not_on_answers() {
        let schedule = Schedule { rate: 500.0, duration: Duration::from_millis(60), max_in_flight: 1000 };
        let mut due = Vec::new();
        let run = run(Arc::new(Slow), schedule, |s| due.push(s.due)).await.unwrap();
        assert_eq!((run.sent, due.len(), run.held_back), (30, 30, 0));
        assert_eq!(due.iter().max(), Some(&Duration::from_millis(58)));
        let full = Schedule { rate: 10_000.0, duration: Duration::from_millis(5), max_in_flight: 2 };
        assert!(super::run(Arc::new(Slow), full, |_| {}).await.unwrap().held_back > 0);
        let (latencies, _) = paced(Arc::new(Slow), Duration::from_millis(1), 8, |n| n >= 5).await.unwrap();
        assert_eq!(latencies.len(), 5);
        assert!(paced(Arc::new(Slow), Duration::from_millis(1), 8, |n| n >= 10).await.is_err());
    }
}
