//! Which lane an Embed call or search query takes, and whether it is admitted.
//!
//! Two lanes share the model thread:
//! - **interactive**: calls of at most [`INTERACTIVE_MAX_INPUTS`] inputs (a query,
//!   a few texts). They run first, and are refused with
//!   RESOURCE_EXHAUSTED while the interactive work queued ahead would keep them
//!   waiting longer than the bound, so under overload the calls accepted stay about
//!   as fast as on an idle server.
//! - **bulk**: calls with more inputs (hundreds of texts) and background
//!   ingestion. They are never refused for queue time (a bulk caller
//!   wants throughput and would only retry the same work), run in full batches when
//!   no interactive work waits, and get one batch in every few while it does, so
//!   they are slowed by overload, never starved.
//!
//! The bound is `--max-queue-ms` when set; by default it is derived from the model
//! itself: a few times what one short text costs it, measured at start. A fixed
//! default cannot fit both a fast model and a slow one: 500 ms let accepted calls'
//! p99 reach 1.2 s at 3 x load on the default model, where ~10 ms kept it within
//! 2 x the unloaded p99 (bench/results/overload).

use std::time::Duration;

use crate::batcher::Priority;
use crate::error::{Error, Result};
use crate::work_ahead::WorkAhead;

/// The derived bound, in lone short texts' model time: about the batch that runs
/// when a call arrives; an accepted call then waits for it and its own batch. Small
/// enough that accepted calls stay within about 2 x the unloaded latency: measured
/// at 3 x load on 2 cores (overload-bench), 3 x (a 16 ms bound) gave accepted p99 3.3
/// x the unloaded p99, a 10 ms bound 1.2 x.
pub const AUTO_BOUND_LONE_TEXTS: u32 = 2;

/// The derived bound never goes below this: the model's time for one short text on
/// a fast CPU is under a millisecond, less than a scheduler's time slice, and a
/// bound that small would refuse calls an idle server answers at once.
pub const AUTO_BOUND_FLOOR: Duration = Duration::from_millis(4);

/// Calls with more inputs than this take the bulk lane. By count, not by estimated
/// work: a count is what a caller can see and choose, and one long text stays
/// interactive (protected by the bound) however slow the model is.
pub const INTERACTIVE_MAX_INPUTS: usize = 8;

/// How the queue-time bound is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueBound {
    /// Derived from the model's measured time for one short text.
    Auto,
    /// No bound: nothing is refused for queue time, and every call is interactive.
    Off,
    /// `--max-queue-ms`.
    Fixed(Duration),
}

impl QueueBound {
    /// From `--max-queue-ms`: absent is auto, 0 is off.
    pub fn from_flag(max_queue_ms: Option<u64>) -> Self {
        match max_queue_ms {
            None => QueueBound::Auto,
            Some(0) => QueueBound::Off,
            Some(ms) => QueueBound::Fixed(Duration::from_millis(ms)),
        }
    }

    /// The bound in time, given the model's time for one short text; None when off.
    pub fn resolve(self, lone_short_text: Duration) -> Option<Duration> {
        match self {
            QueueBound::Auto => Some((lone_short_text * AUTO_BOUND_LONE_TEXTS).max(AUTO_BOUND_FLOOR)),
            QueueBound::Off => None,
            QueueBound::Fixed(bound) => Some(bound),
        }
    }
}

/// Picks the lane of a call of `inputs` texts and admits it or refuses it. `bound`
/// is the resolved queue-time bound (None: off, and every call is interactive).
pub fn admit(work_ahead: &WorkAhead, bound: Option<Duration>, inputs: usize) -> Result<Priority> {
    let Some(bound) = bound else { return Ok(Priority::Interactive) };
    if inputs > INTERACTIVE_MAX_INPUTS {
        return Ok(Priority::Bulk);
    }
    admit_within(work_ahead, bound, &format!("{AUTO_BOUND_LONE_TEXTS} x the model's time for one short text"))?;
    Ok(Priority::Interactive)
}

/// Admits a call while the interactive work queued ahead fits in `bound`, whatever
/// its size; `default_bound` says how the bound is derived when `--max-queue-ms` is
/// not set, for the refusal's message.
pub fn admit_within(work_ahead: &WorkAhead, bound: Duration, default_bound: &str) -> Result<()> {
    // No batch measured yet: nothing to go by, so nothing is refused.
    let Some(wait) = work_ahead.expected_wait() else { return Ok(()) };
    if wait <= bound {
        return Ok(());
    }
    Err(Error::ResourceExhausted(format!(
        "server overloaded: about {} ms of model work is queued ahead, more than the {} ms queue-time bound \
         (--max-queue-ms; by default {default_bound}); retry later",
        wait.as_millis(),
        bound.as_millis()
    )))
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

    const BOUND: Option<Duration> = Some(Duration::from_millis(10));

    #[test]
    fn small_calls_are_admitted_while_the_wait_is_within_the_bound() {
        assert_eq!(admit(&queued(900), BOUND, 1).unwrap(), Priority::Interactive); // 9 ms ahead
        let refused = admit(&queued(1100), BOUND, INTERACTIVE_MAX_INPUTS).unwrap_err(); // 11 ms ahead
        assert!(matches!(refused, Error::ResourceExhausted(_)));
        assert!(refused.to_string().contains("--max-queue-ms"), "{refused}");
    }

    #[test]
    fn calls_of_many_inputs_take_the_bulk_lane_and_are_never_refused() {
        let many = INTERACTIVE_MAX_INPUTS + 1;
        assert_eq!(admit(&queued(0), BOUND, many).unwrap(), Priority::Bulk);
        assert_eq!(admit(&queued(100_000), BOUND, many).unwrap(), Priority::Bulk);
    }

    #[test]
    fn without_a_bound_or_a_measured_speed_everything_is_interactive() {
        assert_eq!(admit(&queued(100_000), None, 1000).unwrap(), Priority::Interactive);
        let unmeasured = WorkAhead::default();
        unmeasured.add(100_000);
        assert_eq!(admit(&unmeasured, BOUND, 1).unwrap(), Priority::Interactive);
    }

    #[test]
    fn the_auto_bound_is_a_few_short_texts_with_a_floor() {
        let auto = QueueBound::from_flag(None);
        assert_eq!(auto.resolve(Duration::from_millis(3)), Some(Duration::from_millis(6)));
        assert_eq!(auto.resolve(Duration::from_micros(200)), Some(AUTO_BOUND_FLOOR));
        assert_eq!(QueueBound::from_flag(Some(0)).resolve(Duration::from_millis(3)), None);
        assert_eq!(QueueBound::from_flag(Some(25)).resolve(Duration::ZERO), Some(Duration::from_millis(25)));
    }
}
