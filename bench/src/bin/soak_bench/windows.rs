//! The soak cut into fixed windows (a minute in a full run): calls by kind and
//! outcome, latencies of the answered calls and the server's RSS samples of each
//! window, and the drift between the first window after the warm-up and the last.

use std::time::Duration;

use embedwire_bench::latency::LatencySummary;
use embedwire_bench::memory::RssSeries;
use embedwire_bench::open_loop::{Outcome, Sample};

use crate::cpu_sampling::{CpuSample, cores_between};
use crate::mix::Kind;

/// Failure messages kept to show what went wrong.
const KEPT_ERRORS: usize = 5;

/// One kind of call in one window (or in the whole run).
#[derive(Debug, Clone, Default)]
pub struct KindTally {
    pub ok: usize,
    pub rejected: usize,
    pub failed: usize,
    /// Latency of each answered call.
    pub latencies: Vec<Duration>,
}

impl KindTally {
    fn add(&mut self, sample: &Sample) {
        match sample.outcome {
            Outcome::Ok => {
                self.ok += 1;
                self.latencies.push(sample.latency);
            }
            Outcome::Rejected => self.rejected += 1,
            Outcome::Failed(_) => self.failed += 1,
        }
    }

    pub fn calls(&self) -> usize {
        self.ok + self.rejected + self.failed
    }

    pub fn latency(&self) -> LatencySummary {
        LatencySummary::from_samples(self.latencies.clone())
    }
}

/// One window.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// By [`Kind::index`].
    pub kinds: [KindTally; 3],
    /// The server's RSS samples taken in the window, in bytes.
    pub rss: Vec<u64>,
    /// Busy cores over the window: the server, the bench's clients, and every
    /// other process on the machine.
    pub cores: Option<(f64, f64, f64)>,
}

impl Window {
    /// The mean RSS in bytes; 0 without samples.
    pub fn rss_mean(&self) -> u64 {
        (self.rss.iter().sum::<u64>()).checked_div(self.rss.len() as u64).unwrap_or(0)
    }

    pub fn rss_max(&self) -> u64 {
        self.rss.iter().copied().max().unwrap_or(0)
    }
}

/// Every window of a soak, and the run's totals.
#[derive(Debug, Clone)]
pub struct Windows {
    pub length: Duration,
    pub windows: Vec<Window>,
    /// Leading windows left out of the comparisons.
    pub warmup: usize,
    /// How late the generator sent each call (its own delay, not the server's).
    pub lags: Vec<Duration>,
    /// The first few failure messages.
    pub first_errors: Vec<String>,
}

/// Last against first: `(last - first) / first`, None when first is zero.
pub fn growth(first: f64, last: f64) -> Option<f64> {
    (first > 0.0).then(|| (last - first) / first)
}

impl Windows {
    pub fn new(length: Duration, count: usize, warmup: usize) -> Self {
        Windows { length, windows: vec![Window::default(); count], warmup, lags: Vec::new(), first_errors: Vec::new() }
    }

    /// The window a moment of the run falls in (the last one for a moment past it).
    pub fn index(&self, at: Duration) -> usize {
        ((at.as_secs_f64() / self.length.as_secs_f64()) as usize).min(self.windows.len() - 1)
    }

    /// Counts a call in the window it was due in.
    pub fn add(&mut self, sample: &Sample) {
        let window = self.index(sample.due);
        self.windows[window].kinds[sample.kind].add(sample);
        self.lags.push(sample.lag);
        if let Outcome::Failed(message) = &sample.outcome
            && self.first_errors.len() < KEPT_ERRORS
        {
            self.first_errors.push(format!("{}: {message}", Kind::ALL[sample.kind].name()));
        }
    }

    /// Puts each RSS sample in its window (times from the start of the load).
    pub fn add_rss(&mut self, series: &RssSeries) {
        for &(at, bytes) in &series.samples {
            if at < self.length * self.windows.len() as u32 {
                let window = self.index(at);
                self.windows[window].rss.push(bytes);
            }
        }
    }

    /// Each window's busy cores, from the first to the last CPU sample inside it.
    pub fn add_cpu(&mut self, samples: &[CpuSample]) {
        for (index, window) in self.windows.iter_mut().enumerate() {
            let (start, end) = (self.length * index as u32, self.length * (index + 1) as u32);
            let inside: Vec<&CpuSample> = samples.iter().filter(|s| s.at >= start && s.at <= end).collect();
            if let [first, .., last] = inside.as_slice() {
                window.cores = Some(cores_between(first, last));
            }
        }
    }

    /// One kind's calls over the whole run.
    pub fn total(&self, kind: Kind) -> KindTally {
        let mut total = KindTally::default();
        for window in &self.windows {
            let tally = &window.kinds[kind.index()];
            total.ok += tally.ok;
            total.rejected += tally.rejected;
            total.failed += tally.failed;
            total.latencies.extend(&tally.latencies);
        }
        total
    }

    /// The first window after the warm-up, and the last.
    pub fn compared(&self) -> (&Window, &Window) {
        (&self.windows[self.warmup], &self.windows[self.windows.len() - 1])
    }

    /// RSS growth between the compared windows' means.
    pub fn rss_growth(&self) -> Option<f64> {
        let (first, last) = self.compared();
        growth(first.rss_mean() as f64, last.rss_mean() as f64)
    }

    /// One kind's p99 drift between the compared windows, and the two p99s. None
    /// when either window answered no call of the kind: a window of rejections
    /// has no latency to compare, and must not pass as a drift of -100%.
    pub fn p99_drift(&self, kind: Kind) -> (Option<f64>, Duration, Duration) {
        let (first, last) = self.compared();
        let latency = |window: &Window| window.kinds[kind.index()].latency();
        let (first, last) = (latency(first), latency(last));
        let drift = if first.count == 0 || last.count == 0 {
            None
        } else {
            growth(first.p99.as_secs_f64(), last.p99.as_secs_f64())
        };
        (drift, first.p99, last.p99)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: Kind, due_ms: u64, latency_ms: u64, outcome: Outcome) -> Sample {
        Sample {
            kind: kind.index(),
            due: Duration::from_millis(due_ms),
            lag: Duration::ZERO,
            latency: Duration::from_millis(latency_ms),
            outcome,
        }
    }

    #[test]
    fn windows_compare_the_first_measured_with_the_last() {
        let mut windows = Windows::new(Duration::from_secs(1), 3, 1);
        // Warm-up window: slow, left out.
        windows.add(&sample(Kind::Embed, 100, 900, Outcome::Ok));
        for ms in [10, 20] {
            windows.add(&sample(Kind::Embed, 1000 + ms, ms, Outcome::Ok));
            windows.add(&sample(Kind::Embed, 2000 + ms, ms + 2, Outcome::Ok));
        }
        windows.add(&sample(Kind::Search, 2500, 1, Outcome::Rejected));
        windows.add(&sample(Kind::Search, 1500, 7, Outcome::Ok));
        windows.add(&sample(Kind::Ingest, 9000, 1, Outcome::Failed("boom".into())));
        let (drift, first, last) = windows.p99_drift(Kind::Embed);
        assert_eq!((first, last), (Duration::from_millis(20), Duration::from_millis(22)));
        assert!((drift.unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(windows.p99_drift(Kind::Search).0, None, "no answered search in the last window");
        assert_eq!(windows.p99_drift(Kind::Ingest).0, None, "no answered ingest at all");
        assert_eq!(windows.total(Kind::Embed).ok, 5);
        assert_eq!(windows.total(Kind::Search).rejected, 1);
        // A call due past the end counts in the last window.
        assert_eq!(windows.windows[2].kinds[Kind::Ingest.index()].failed, 1);
        assert_eq!(windows.first_errors, ["Ingest: boom"]);

        let series = RssSeries {
            samples: [(0, 50), (1100, 100), (1900, 100), (2100, 110), (2900, 110), (3100, 999)]
                .map(|(ms, bytes)| (Duration::from_millis(ms), bytes))
                .to_vec(),
        };
        windows.add_rss(&series);
        assert!((windows.rss_growth().unwrap() - 0.1).abs() < 1e-9, "the sample after the end is left out");
    }
}
