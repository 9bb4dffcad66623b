//! When to hand ONNX Runtime's arena memory back to the system.
//!
//! The arena keeps the peak of the largest batch ever run: after an ingest of long
//! paragraphs the server holds ~90 MiB more than it needs for queries, for the rest of
//! its life (gateway bench: 97 MiB healthy, 188 MiB once the ingest's batches ran).
//! ONNX Runtime frees an arena's unused regions at the end of a run that asks for it
//! (the run option `memory.enable_memory_arena_shrinkage`). Shrinking after every
//! batch would cost what running without the arena costs (every batch allocates and
//! faults its buffers in afresh, measured ~30% slower on long texts), so a run asks
//! only when it is much smaller than the largest batch since the last shrink, and no
//! batch near that size ran for [`QUIET`]: the large work is over, not paused
//! between two batches of an ingest.
//!
//! A model with nothing to do gives the memory back sooner: the model thread asks for
//! a shrink (a one-token run) once no work came for `batcher::IDLE_RELEASE` after a
//! batch larger than one text of the model's longest ([`ArenaShrink::grown_past`]).
//! An ingest keeps the model busy (its pipeline embeds the next batches while one
//! commits), so it does not pause that long between batches; a wrong guess costs
//! the next large batch its buffers' page faults, once.

use std::time::{Duration, Instant};

/// How long no large batch must have run before a small one shrinks the arena.
pub const QUIET: Duration = Duration::from_secs(1);

/// A batch this many times smaller than the largest since the last shrink (in
/// [`footprint`]) counts as small.
const SMALLER_BY: usize = 4;

/// A batch's relative memory in the arena: its activations grow with tokens x hidden
/// size, its attention scores with tokens x sequence length.
pub fn footprint(rows: usize, seq_len: usize, hidden: usize) -> usize {
    rows * seq_len * (seq_len + hidden)
}

/// The model thread's record of large batches.
#[derive(Debug)]
pub struct ArenaShrink {
    /// The largest footprint since the last shrink.
    largest: usize,
    /// When the last batch comparable to `largest` ran.
    last_large: Instant,
}

impl ArenaShrink {
    pub fn new(now: Instant) -> Self {
        ArenaShrink { largest: 0, last_large: now }
    }

    /// Whether the run of a batch of `footprint`, starting `now`, should shrink the
    /// arena once it ends.
    pub fn before_run(&mut self, footprint: usize, now: Instant) -> bool {
        if footprint.saturating_mul(SMALLER_BY) >= self.largest {
            self.largest = self.largest.max(footprint);
            self.last_large = now;
            return false;
        }
        if now.duration_since(self.last_large) < QUIET {
            return false;
        }
        self.largest = footprint;
        self.last_large = now;
        true
    }

    /// Whether a batch of at least `footprint` ran since the last shrink.
    pub fn grown_past(&self, footprint: usize) -> bool {
        self.largest >= footprint
    }

    /// Records a shrink asked for outside [`before_run`](Self::before_run) (the
    /// model idle): the arena is as small as it gets.
    pub fn shrunk(&mut self, now: Instant) {
        self.largest = 0;
        self.last_large = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUERY: usize = 16 * 12 * (12 + 384);
    const PARAGRAPHS: usize = 4 * 256 * (256 + 384);

    #[test]
    fn small_batches_alone_never_shrink() {
        let start = Instant::now();
        let mut shrink = ArenaShrink::new(start);
        for second in 0..10 {
            assert!(!shrink.before_run(QUERY, start + Duration::from_secs(second)));
        }
    }

    #[test]
    fn the_first_small_batch_after_a_quiet_second_shrinks_once() {
        let start = Instant::now();
        let mut shrink = ArenaShrink::new(start);
        assert!(!shrink.before_run(QUERY, start));
        // An ingest: large batches, queries between them.
        for ms in (0..3000).step_by(100) {
            let at = start + Duration::from_millis(ms);
            assert!(!shrink.before_run(PARAGRAPHS, at));
            assert!(!shrink.before_run(QUERY, at + Duration::from_millis(50)), "within the ingest, at {ms} ms");
        }
        let ended = start + Duration::from_millis(2900);
        assert!(!shrink.before_run(QUERY, ended + Duration::from_millis(900)));
        assert!(shrink.before_run(QUERY, ended + QUIET));
        assert!(!shrink.before_run(QUERY, ended + QUIET * 3), "once: the arena is small since");
        // The next ingest grows it again, and its end shrinks it again.
        let next = ended + QUIET * 5;
        assert!(!shrink.before_run(PARAGRAPHS, next));
        assert!(shrink.before_run(QUERY, next + QUIET));
    }

    #[test]
    fn an_idle_shrink_starts_the_record_afresh() {
        let start = Instant::now();
        let mut shrink = ArenaShrink::new(start);
        assert!(!shrink.grown_past(PARAGRAPHS), "nothing ran yet");
        assert!(!shrink.before_run(PARAGRAPHS, start));
        assert!(shrink.grown_past(PARAGRAPHS));
        shrink.shrunk(start);
        assert!(!shrink.grown_past(PARAGRAPHS));
        // Small batches after it are no reason for another shrink.
        assert!(!shrink.before_run(QUERY, start + QUIET * 2));
        assert!(!shrink.grown_past(PARAGRAPHS));
    }
}
