//! Which lane an Embed call or search query takes, and whether it is admitted.
//!
//! Two lanes share the model thread:
//! - **interactive**: calls of at most [`INTERACTIVE_MAX_INPUTS`] inputs (a query,
//!   a few texts). They run first, and are refused with RESOURCE_EXHAUSTED only
//!   under real overload (below).
//! - **bulk**: calls with more inputs (hundreds of texts) and background
//!   ingestion. They are never refused for queue time (a bulk caller
//!   wants throughput and would only retry the same work), run in full batches when
//!   no interactive work waits, and get one batch in every few while it does, so
//!   they are slowed by overload, never starved. `--max-in-flight-inputs` bounds
//!   their memory.
//!
//! **The default bound counts calls, not time**: an interactive call is refused while
//! [`AUTO_BATCHES_OF_CALLS`] x `--max-batch-size` interactive calls are already queued
//! or running (128 with the default batch of 64). A closed-loop client, N callers each
//! waiting for its answer, never has more than N calls in flight, so any such client
//! of up to that many callers is queued and batched, never refused, whatever its calls
//! cost; only offered work that keeps coming while answers slow down (an open loop
//! beyond capacity) fills the bound. There an accepted call waits about bound /
//! goodput: 128 calls at the ~300-340 calls/s served at 3 x capacity on 2 cores is
//! 370-430 ms at p50, 650-770 at p99 (`embedwire-bench overload`, README "Overload"),
//! about 5 full batches. A smaller bound does not shorten that in batches: at 96 the
//! burst served less (229-239 against 286-358 calls/s in alternating pairs), and a
//! bound near the 64 callers that must never be refused would refuse them on the race
//! between an answer and the caller's next call. `--max-interactive-calls` sets the
//! count by hand; taking one batch at a time in arrival order cost a third of the
//! throughput on mixed-length queries.
//!
//! The old default, a bound on expected queue time of 2 x one short text's model
//! time (4-5 ms here), refused closed-loop clients of 16-32 callers on their first
//! burst: a full batch of 64 short texts alone takes ~90 ms, and the time estimate
//! is made at the batch sizes of the moment (a lone text costs 20 x more per token
//! than a full batch), so it swings with load. `--max-queue-ms` keeps that
//! time-based bound as an explicit choice.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::batcher::Priority;
use crate::error::{Error, Result};
use crate::stats::Stats;
use crate::work_ahead::WorkAhead;

/// The default bound, in full batches of calls: interactive calls queued or running
/// at most this many times `--max-batch-size`. Two: the batch running and the next
/// one full, so the model never waits for work, and a closed-loop client of up to
/// 128 callers (TEI queues 512) is never refused; more would only lengthen the
/// accepted calls' wait under overload.
pub const AUTO_BATCHES_OF_CALLS: usize = 2;

/// A refusal's retry hint stays within these: at least a scheduler's slice (a
/// client coming back sooner finds the same queue), at most the time a full queue
/// of the default bound takes to drain on a slow CPU.
const MIN_RETRY_AFTER: Duration = Duration::from_millis(5);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(2);
/// The hint before any batch was measured.
const UNMEASURED_RETRY_AFTER: Duration = Duration::from_millis(50);

/// Calls with more inputs than this take the bulk lane. By count, not by estimated
/// work: a count is what a caller can see and choose, and one long text stays
/// interactive (protected by the bound) however slow the model is.
pub const INTERACTIVE_MAX_INPUTS: usize = 8;

/// How the queue-time bound is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueBound {
    /// The default: a bound on interactive calls in flight (see the module doc).
    Auto,
    /// The same bound at a count set by hand (`--max-interactive-calls`).
    Calls(usize),
    /// No bound: nothing is refused for queue time, and every call is interactive.
    Off,
    /// `--max-queue-ms`.
    Fixed(Duration),
}

impl QueueBound {
    /// From `--max-queue-ms`: absent is auto, 0 is off.
    pub fn from_flag(max_queue_ms: Option<u64>) -> Self {
        Self::from_flags(max_queue_ms, None)
    }

    /// From `--max-queue-ms` and `--max-interactive-calls`: neither is auto, and a
    /// given `--max-queue-ms` replaces the count (so a server started with
    /// `--max-queue-ms 0` has no bound whatever its environment sets).
    pub fn from_flags(max_queue_ms: Option<u64>, max_interactive_calls: Option<usize>) -> Self {
        match (max_queue_ms, max_interactive_calls) {
            (None, None) => QueueBound::Auto,
            (None, Some(calls)) => QueueBound::Calls(calls),
            (Some(0), _) => QueueBound::Off,
            (Some(ms), _) => QueueBound::Fixed(Duration::from_millis(ms)),
        }
    }

    /// The bound in force for the embedding model, whose batches hold at most
    /// `max_batch_size` inputs.
    pub fn resolve(self, max_batch_size: usize) -> Admission {
        match self {
            QueueBound::Auto => Admission::Calls(AUTO_BATCHES_OF_CALLS * max_batch_size.max(1)),
            QueueBound::Calls(calls) => Admission::Calls(calls),
            QueueBound::Off => Admission::Off,
            QueueBound::Fixed(bound) => Admission::QueueTime(bound),
        }
    }
}

/// The admission rule in force for interactive calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Nothing is refused for load, and every call is interactive (`--max-queue-ms 0`).
    Off,
    /// At most this many interactive calls queued or running (the default).
    Calls(usize),
    /// Refused while the expected wait for the model passes this (`--max-queue-ms`).
    QueueTime(Duration),
}

impl Admission {
    /// How the bound reads in logs, Info and refusals.
    pub fn describe(self) -> String {
        match self {
            Admission::Off => "no load bound (--max-queue-ms 0)".into(),
            Admission::Calls(calls) => {
                format!("at most {calls} interactive calls queued or running")
            }
            Admission::QueueTime(bound) => {
                format!("at most {} ms of model work queued ahead (--max-queue-ms)", bound.as_millis())
            }
        }
    }
}

/// Admits interactive calls under an [`Admission`] rule and counts those in flight
/// (in [`Stats::interactive_calls`], which `/metrics` shows).
#[derive(Debug, Clone)]
pub struct InteractiveAdmission {
    rule: Admission,
    stats: Arc<Stats>,
}

/// An admitted interactive call; it leaves the count when dropped (answered, failed
/// or abandoned by its caller).
#[derive(Debug, Default)]
pub struct InteractiveCall {
    counted_in: Option<Arc<Stats>>,
}

impl Drop for InteractiveCall {
    fn drop(&mut self) {
        if let Some(stats) = &self.counted_in {
            stats.interactive_calls.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl InteractiveAdmission {
    /// Admission under `rule`; publishes the bound in `stats`.
    pub fn new(rule: Admission, stats: Arc<Stats>) -> Self {
        let (calls, queue_ms) = match rule {
            Admission::Off => (0, 0),
            Admission::Calls(calls) => (calls as u64, 0),
            Admission::QueueTime(bound) => (0, bound.as_millis() as u64),
        };
        stats.admission_max_interactive_calls.store(calls, Ordering::Relaxed);
        stats.admission_max_queue_ms.store(queue_ms, Ordering::Relaxed);
        InteractiveAdmission { rule, stats }
    }

    /// The rule in force.
    pub fn rule(&self) -> Admission {
        self.rule
    }

    /// Interactive calls queued or running now (counted under the default rule only).
    pub fn in_flight(&self) -> usize {
        self.stats.interactive_calls.load(Ordering::Acquire) as usize
    }

    /// Picks the lane of a call of `inputs` texts and admits it or refuses it.
    pub fn admit(&self, work_ahead: &WorkAhead, inputs: usize) -> Result<(Priority, InteractiveCall)> {
        match self.rule {
            Admission::Off => Ok((Priority::Interactive, InteractiveCall::default())),
            _ if inputs > INTERACTIVE_MAX_INPUTS => Ok((Priority::Bulk, InteractiveCall::default())),
            _ => self.admit_interactive(work_ahead).map(|call| (Priority::Interactive, call)),
        }
    }

    /// Admits or refuses a call already known to be interactive (a unary rerank call
    /// is one, whatever its size: its caller waits for it).
    pub fn admit_interactive(&self, work_ahead: &WorkAhead) -> Result<InteractiveCall> {
        self.admit_by_rule(work_ahead).inspect_err(|_| Stats::add(&self.stats.interactive_refusals, 1))
    }

    fn admit_by_rule(&self, work_ahead: &WorkAhead) -> Result<InteractiveCall> {
        match self.rule {
            Admission::Off => Ok(InteractiveCall::default()),
            Admission::QueueTime(bound) => {
                admit_within(work_ahead, bound, "none: the default bounds calls in flight")?;
                Ok(InteractiveCall::default())
            }
            Admission::Calls(limit) => {
                let taken = self
                    .stats
                    .interactive_calls
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| (now < limit as u64).then_some(now + 1));
                match taken {
                    Ok(_) => Ok(InteractiveCall { counted_in: Some(self.stats.clone()) }),
                    Err(_) => Err(Error::Overloaded {
                        reason: format!(
                            "server overloaded: {limit} interactive calls are already queued or running; retry \
                             after the hinted delay"
                        ),
                        retry_after: retry_after(work_ahead.expected_wait()),
                    }),
                }
            }
        }
    }
}

/// The hint for a refused call: about when the work queued now has run.
fn retry_after(expected_wait: Option<Duration>) -> Duration {
    expected_wait.map_or(UNMEASURED_RETRY_AFTER, |wait| wait.clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER))
}

/// Admits a call while the interactive work queued ahead fits in `bound`, whatever
/// its size; `default_bound` says how the bound is derived when `--max-queue-ms` is
/// not set, for the refusal's message.
fn admit_within(work_ahead: &WorkAhead, bound: Duration, default_bound: &str) -> Result<()> {
    // No batch measured yet: nothing to go by, so nothing is refused.
    let Some(wait) = work_ahead.expected_wait() else { return Ok(()) };
    if wait <= bound {
        return Ok(());
    }
    Err(Error::Overloaded {
        reason: format!(
            "server overloaded: about {} ms of model work is queued ahead, more than the {} ms queue-time bound \
             (--max-queue-ms; by default {default_bound}); retry after the hinted delay",
            wait.as_millis(),
            bound.as_millis()
        ),
        retry_after: retry_after(Some(wait - bound)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A work-ahead at 10 µs a token with `tokens` queued.
    fn queued(tokens: u64) -> WorkAhead {
        let ahead = WorkAhead::default();
        ahead.observe_batch(1000, Duration::from_millis(10));
        ahead.add(tokens);
        ahead
    }

    fn lane(admission: &InteractiveAdmission, ahead: &WorkAhead, inputs: usize) -> Result<Priority> {
        admission.admit(ahead, inputs).map(|(priority, _)| priority)
    }

    #[test]
    fn the_default_admits_calls_up_to_two_batches_whatever_the_work_ahead() {
        let admission = InteractiveAdmission::new(QueueBound::from_flag(None).resolve(4), Arc::default());
        // Far more work queued than any time bound would allow: calls still count.
        let ahead = queued(1_000_000);
        let held: Vec<_> = (0..8).map(|_| admission.admit(&ahead, INTERACTIVE_MAX_INPUTS).unwrap().1).collect();
        assert_eq!(admission.in_flight(), 8);
        let refused = admission.admit(&ahead, 1).unwrap_err();
        let Error::Overloaded { retry_after, .. } = &refused else { panic!("{refused:?}") };
        assert_eq!(*retry_after, MAX_RETRY_AFTER, "10 s of work ahead: the hint's cap");
        assert!(refused.to_string().contains("8 interactive calls"), "{refused}");
        drop(held);
        assert_eq!(admission.in_flight(), 0, "answered calls leave the count");
        assert_eq!(lane(&admission, &ahead, 1).unwrap(), Priority::Interactive);
    }

    #[test]
    fn a_call_known_to_be_interactive_is_counted_whatever_its_size() {
        let admission = InteractiveAdmission::new(Admission::Calls(2), Arc::default());
        let ahead = queued(1_000_000);
        let held = [admission.admit_interactive(&ahead).unwrap(), admission.admit_interactive(&ahead).unwrap()];
        assert!(matches!(admission.admit_interactive(&ahead), Err(Error::Overloaded { .. })));
        assert_eq!(
            admission.stats.interactive_refusals.load(Ordering::Relaxed),
            1,
            "the model thread's sign of overload"
        );
        drop(held);
        assert!(admission.admit_interactive(&ahead).is_ok(), "answered calls leave the count");
        let timed = InteractiveAdmission::new(Admission::QueueTime(Duration::from_millis(10)), Arc::default());
        assert!(timed.admit_interactive(&queued(900)).is_ok());
        assert!(timed.admit_interactive(&queued(1100)).is_err(), "11 ms queued ahead of a 10 ms bound");
    }

    #[test]
    fn calls_of_many_inputs_take_the_bulk_lane_and_are_never_refused() {
        let many = INTERACTIVE_MAX_INPUTS + 1;
        for rule in [Admission::Calls(0), Admission::QueueTime(Duration::from_millis(10))] {
            let admission = InteractiveAdmission::new(rule, Arc::default());
            assert_eq!(lane(&admission, &queued(100_000), many).unwrap(), Priority::Bulk);
            assert_eq!(admission.in_flight(), 0, "bulk calls are not counted");
        }
    }

    #[test]
    fn a_queue_time_bound_admits_while_the_wait_is_within_it() {
        let admission = InteractiveAdmission::new(QueueBound::from_flag(Some(10)).resolve(64), Arc::default());
        assert_eq!(lane(&admission, &queued(900), 1).unwrap(), Priority::Interactive); // 9 ms ahead
        let refused = lane(&admission, &queued(1100), INTERACTIVE_MAX_INPUTS).unwrap_err(); // 11 ms ahead
        let Error::Overloaded { retry_after, .. } = &refused else { panic!("{refused:?}") };
        assert_eq!(*retry_after, MIN_RETRY_AFTER, "1 ms over the bound: the hint's floor");
        assert!(refused.to_string().contains("--max-queue-ms"), "{refused}");
        let unmeasured = WorkAhead::default();
        unmeasured.add(100_000);
        assert_eq!(lane(&admission, &unmeasured, 1).unwrap(), Priority::Interactive, "no speed measured yet");
    }

    #[test]
    fn a_count_set_by_hand_replaces_the_default_one() {
        assert_eq!(QueueBound::from_flags(None, Some(128)).resolve(64), Admission::Calls(128));
        assert_eq!(QueueBound::from_flags(None, None).resolve(64), QueueBound::Auto.resolve(64));
        assert_eq!(QueueBound::from_flags(Some(0), Some(128)).resolve(64), Admission::Off);
    }

    #[test]
    fn without_a_bound_everything_is_interactive() {
        let admission = InteractiveAdmission::new(QueueBound::from_flag(Some(0)).resolve(64), Arc::default());
        assert_eq!(lane(&admission, &queued(100_000), 1000).unwrap(), Priority::Interactive);
        assert_eq!(admission.rule(), Admission::Off);
    }
}
