//! How long new interactive work would wait for the model: the tokens admitted and
//! not yet embedded, times the model's recent cost per token.
//!
//! A bound on inputs in flight cannot keep latency low under overload: one queued
//! text may be 5 tokens or 256, and the model's speed changes with the batch size
//! and the cores it gets. Admission by expected wait refuses a request exactly when
//! its answer would come late, whatever the mix, and adapts as the speed changes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Weight of the newest batch in the moving average of the cost per token: recent
/// enough to follow a change of load within a few batches, smooth enough that one
/// slow batch (a page fault, a preempted thread) does not swing admission.
const NEWEST_BATCH_WEIGHT: f64 = 0.2;
/// Most one batch's sample may exceed the average by, as a factor: a stall (a new
/// input shape's first allocations, a descheduled thread) then moves the estimate
/// a little instead of refusing every call for the next dozen batches, while a
/// real slowdown still shows within a few batches.
const MAX_SAMPLE_JUMP: f64 = 4.0;

/// Tokens ahead and the measured model speed, shared by the request path (reads,
/// adds) and the model thread (removes, measures). Lock-free: admission checks it on
/// every call.
#[derive(Debug, Default)]
pub struct WorkAhead {
    /// Interactive tokens queued or in the running batch.
    tokens: AtomicU64,
    /// Moving average of model nanoseconds per padded token, as f64 bits; 0 until
    /// the first batch is measured.
    nanos_per_token_bits: AtomicU64,
}

impl WorkAhead {
    /// Counts `tokens` of newly queued interactive work.
    pub fn add(&self, tokens: u64) {
        self.tokens.fetch_add(tokens, Ordering::Relaxed);
    }

    /// Removes `tokens` that were embedded or dropped.
    pub fn remove(&self, tokens: u64) {
        // Never below zero, whatever the order of concurrent updates.
        let _ = self.tokens.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| Some(now.saturating_sub(tokens)));
    }

    /// Interactive tokens queued or running now.
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed)
    }

    /// Records a batch of `padded_tokens` (size x longest sequence: padding costs
    /// model time too) that took `took`.
    pub fn observe_batch(&self, padded_tokens: usize, took: Duration) {
        if padded_tokens == 0 {
            return;
        }
        let sample = took.as_nanos() as f64 / padded_tokens as f64;
        // Only the model thread writes, so a load-then-store cannot lose an update.
        let previous = f64::from_bits(self.nanos_per_token_bits.load(Ordering::Relaxed));
        let average = if previous > 0.0 {
            previous + NEWEST_BATCH_WEIGHT * (sample.min(MAX_SAMPLE_JUMP * previous) - previous)
        } else {
            sample
        };
        self.nanos_per_token_bits.store(average.to_bits(), Ordering::Relaxed);
    }

    /// Model time of the work ahead at the recent speed; None before any batch was
    /// measured (nothing to go by, so nothing is refused).
    pub fn expected_wait(&self) -> Option<Duration> {
        self.time_for(self.tokens())
    }

    /// Model time of `tokens` at the recent speed; None before any batch was measured.
    pub fn time_for(&self, tokens: u64) -> Option<Duration> {
        let nanos_per_token = f64::from_bits(self.nanos_per_token_bits.load(Ordering::Relaxed));
        (nanos_per_token > 0.0).then(|| Duration::from_nanos((nanos_per_token * tokens as f64) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_tokens_ahead_times_the_recent_cost() {
        let ahead = WorkAhead::default();
        ahead.add(500);
        assert_eq!(ahead.expected_wait(), None, "no speed measured yet");
        ahead.observe_batch(1000, Duration::from_millis(10)); // 10 µs a token
        assert_eq!(ahead.expected_wait(), Some(Duration::from_millis(5)));
        ahead.remove(400);
        assert_eq!(ahead.expected_wait(), Some(Duration::from_millis(1)));
        ahead.remove(1000);
        assert_eq!(ahead.tokens(), 0, "never below zero");
    }

    #[test]
    fn one_stalled_batch_moves_the_estimate_a_bounded_step() {
        let ahead = WorkAhead::default();
        ahead.add(1000);
        ahead.observe_batch(100, Duration::from_micros(1000)); // 10 µs a token
        ahead.observe_batch(100, Duration::from_millis(100)); // 1 ms a token: a stall
        // The sample counts as 4 x 10 = 40 µs: 10 + 0.2 x 30 = 16 µs a token.
        assert_eq!(ahead.expected_wait(), Some(Duration::from_millis(16)));
    }

    #[test]
    fn the_cost_follows_a_slower_model_gradually() {
        let ahead = WorkAhead::default();
        ahead.add(1000);
        ahead.observe_batch(100, Duration::from_micros(1000)); // 10 µs a token
        ahead.observe_batch(100, Duration::from_micros(3000)); // 30 µs a token
        // 10 + 0.2 x (30 - 10) = 14 µs a token.
        assert_eq!(ahead.expected_wait(), Some(Duration::from_millis(14)));
    }
}
