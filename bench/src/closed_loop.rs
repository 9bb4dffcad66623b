//! The closed-loop engine for any call (HTTP or gRPC, so a comparison differs only in the protocol): N workers, each
//! sending its next call when the previous answer has arrived, every call timed. A failed call is recorded, not fatal:
//! an overloaded gateway answering errors is a result ([`crate::load`] makes it fatal).

use std::time::{Duration, Instant};
use std::{fmt::Write as _, future::Future, sync::Arc, sync::atomic::AtomicBool, sync::atomic::Ordering};

use anyhow::Context;

use crate::latency::{LatencySummary, ms};

/// How long the workers keep calling.
#[derive(Debug, Clone)]
pub enum Stop {
    /// Calls leave until this much time has passed.
    After(Duration),
    /// Each worker makes this many calls.
    Calls(usize),
    /// Calls leave until the flag is set (by whatever the run is measured against).
    When(Arc<AtomicBool>),
}

impl Stop {
    /// Whether a worker that started at `started` and made `calls` calls stops.
    pub(crate) fn reached(&self, started: Instant, calls: usize) -> bool {
        match self {
            Stop::After(time) => started.elapsed() >= *time,
            Stop::Calls(limit) => calls >= *limit,
            Stop::When(flag) => flag.load(Ordering::Acquire),
        }
    }
}

/// One worker's way of making a call; `n` counts its calls from 0 (to rotate inputs).
pub trait Caller: Send + 'static {
    fn call(&mut self, n: usize) -> impl Future<Output = anyhow::Result<()>> + Send;
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub worker: usize,
    /// When the call left, from the start of the run.
    pub start: Duration,
    pub latency: Duration,
    pub ok: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ClosedLoopRun {
    /// Every call, in order of the workers, then of their calls.
    pub timings: Vec<Timing>,
    /// From the start to the last answer.
    pub elapsed: Duration,
    /// The first failure, to show why calls failed.
    pub first_error: Option<String>,
}

impl ClosedLoopRun {
    pub fn ok(&self) -> usize {
        self.timings.iter().filter(|t| t.ok).count()
    }

    pub fn errors(&self) -> usize {
        self.timings.len() - self.ok()
    }

    pub fn rate(&self) -> f64 {
        self.ok() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn latency(&self) -> LatencySummary {
        LatencySummary::from_samples(self.timings.iter().filter(|t| t.ok).map(|t| t.latency).collect())
    }

    /// Rounds of the same measurement as one: calls pooled, times added up.
    pub fn combine(parts: &[ClosedLoopRun]) -> ClosedLoopRun {
        ClosedLoopRun {
            timings: parts.iter().flat_map(|part| part.timings.iter().copied()).collect(),
            elapsed: parts.iter().map(|part| part.elapsed).sum(),
            first_error: parts.iter().find_map(|part| part.first_error.clone()),
        }
    }

    /// Per-call CSV: `worker,start_ms,latency_ms,ok`.
    pub fn csv(&self) -> String {
        let mut out = String::from("worker,start_ms,latency_ms,ok\n");
        for t in &self.timings {
            let _ = writeln!(out, "{},{:.3},{:.3},{}", t.worker, ms(t.start), ms(t.latency), u8::from(t.ok));
        }
        out
    }
}

/// Runs one task per caller until `stop` (checked before each call).
pub async fn run<C: Caller>(callers: Vec<C>, stop: Stop) -> anyhow::Result<ClosedLoopRun> {
    anyhow::ensure!(!callers.is_empty(), "no workers");
    let started = Instant::now();
    let tasks: Vec<_> = callers
        .into_iter()
        .enumerate()
        .map(|(worker, mut caller)| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut timings = Vec::new();
                let mut first_error = None;
                for n in (0..).take_while(|&n| !stop.reached(started, n)) {
                    let start = started.elapsed();
                    let call = Instant::now();
                    let result = caller.call(n).await;
                    let latency = call.elapsed();
                    if let Err(error) = &result {
                        first_error.get_or_insert_with(|| format!("{error:#}"));
                    }
                    timings.push(Timing { worker, start, latency, ok: result.is_ok() });
                }
                (timings, first_error)
            })
        })
        .collect();
    let mut run = ClosedLoopRun::default();
    for task in tasks {
        let (timings, error) = task.await.context("worker task")?;
        run.timings.extend(timings);
        run.first_error = run.first_error.or(error);
    }
    run.elapsed = started.elapsed();
    Ok(run)
}
