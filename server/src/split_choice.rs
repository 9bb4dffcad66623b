//! Whether a batch large enough to split runs whole or as parts side by side: by
//! which of the two has been faster per padded token lately, measured on the batches
//! themselves.
//!
//! Neither way wins everywhere (`embedwire-bench`, 2 cores, 2026-11-30). When the
//! model has the cores to itself (32 one-sentence gRPC callers, a client using 0.04
//! cores), whole batches on two threads serve 0.95-0.99 x the in-process ceiling and
//! parts 0.85-0.89 x: the parts seldom end together, and one core idles while the
//! other finishes (the server used 1.77 cores against 1.94). When something else
//! wants the cores (a load generator, the refusals of an overload), a whole batch
//! waits at each of its matrix products for whichever thread lost its core, and
//! parts win: goodput at 3 x capacity 0.81 x against 0.68 x whole. The load decides,
//! so the batches measure it: most run the way that has been faster, and one in
//! [`EXPLORE_EVERY`] the other way, so a change of conditions is seen.

use std::time::Duration;

/// One eligible batch in this many runs the way that is not the faster: often
/// enough to follow a change of load within a second or two of batches, rare enough
/// that the slower way costs a few percent at most.
pub const EXPLORE_EVERY: u64 = 8;

/// Weight of the newest batch in each way's running mean of time per token.
const NEWEST_WEIGHT: f64 = 0.25;

/// The two ways to run a batch that could be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Whole,
    Parts,
}

impl Way {
    fn other(self) -> Way {
        match self {
            Way::Whole => Way::Parts,
            Way::Parts => Way::Whole,
        }
    }
}

/// Running means of seconds per padded token, one per way.
#[derive(Debug, Default)]
pub struct SplitChoice {
    whole: Option<f64>,
    parts: Option<f64>,
    chosen: u64,
}

impl SplitChoice {
    /// The way to run the next eligible batch. Parts first (the first batches then
    /// show both ways at once, and a test of parts sees them), then whole, then
    /// mostly the faster.
    pub fn next(&mut self) -> Way {
        self.chosen += 1;
        let faster = match (self.whole, self.parts) {
            (_, None) => return Way::Parts,
            (None, Some(_)) => return Way::Whole,
            (Some(whole), Some(parts)) => {
                if parts <= whole {
                    Way::Parts
                } else {
                    Way::Whole
                }
            }
        };
        if self.chosen.is_multiple_of(EXPLORE_EVERY) { faster.other() } else { faster }
    }

    /// A batch of `padded_tokens` ran `way` in `took`.
    pub fn observe(&mut self, way: Way, padded_tokens: usize, took: Duration) {
        if padded_tokens == 0 {
            return;
        }
        let per_token = took.as_secs_f64() / padded_tokens as f64;
        let mean = match way {
            Way::Whole => &mut self.whole,
            Way::Parts => &mut self.parts,
        };
        *mean = Some(mean.map_or(per_token, |mean| mean + NEWEST_WEIGHT * (per_token - mean)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn both_ways_are_measured_then_the_faster_runs_and_the_other_now_and_then() {
        let mut choice = SplitChoice::default();
        assert_eq!(choice.next(), Way::Parts);
        choice.observe(Way::Parts, 1000, ms(12));
        assert_eq!(choice.next(), Way::Whole);
        choice.observe(Way::Whole, 1000, ms(10));
        let ways: Vec<Way> = (0..2 * EXPLORE_EVERY).map(|_| choice.next()).collect();
        let parts = ways.iter().filter(|&&way| way == Way::Parts).count();
        assert_eq!(parts, 2, "whole is faster: parts only when exploring, {ways:?}");
    }

    #[test]
    fn a_change_of_conditions_turns_the_choice() {
        let mut choice = SplitChoice::default();
        choice.observe(Way::Whole, 1000, ms(10));
        choice.observe(Way::Parts, 1000, ms(12));
        // The cores get busy: whole batches slow down to twice the parts' time.
        for _ in 0..4 {
            choice.observe(Way::Whole, 1000, ms(24));
        }
        let ways: Vec<Way> = (0..EXPLORE_EVERY).map(|_| choice.next()).collect();
        assert_eq!(ways.iter().filter(|&&way| way == Way::Whole).count(), 1, "{ways:?}");
    }

    #[test]
    fn time_counts_per_padded_token() {
        let mut choice = SplitChoice::default();
        // Parts ran a batch twice the size in 1.5 x the time: faster per token.
        choice.observe(Way::Whole, 1000, ms(10));
        choice.observe(Way::Parts, 2000, ms(15));
        choice.chosen = 1;
        assert_eq!(choice.next(), Way::Parts);
    }
}
