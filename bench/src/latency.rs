//! Latency summaries from samples: mean and nearest-rank percentiles; the median time of work too short to time once.

use std::time::Duration;

/// Mean and percentiles of a set of durations.
#[derive(Debug, Clone, Copy, Default)]
pub struct LatencySummary {
    /// Samples summarized.
    pub count: usize,
    pub mean: Duration,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl LatencySummary {
    /// All zero when there are no samples.
    pub fn from_samples(mut samples: Vec<Duration>) -> Self {
        if samples.is_empty() {
            return LatencySummary::default();
        }
        samples.sort_unstable();
        let total: Duration = samples.iter().sum();
        LatencySummary {
            count: samples.len(),
            mean: total / samples.len() as u32,
            p50: percentile(&samples, 50.0),
            p95: percentile(&samples, 95.0),
            p99: percentile(&samples, 99.0),
            max: samples[samples.len() - 1],
        }
    }
}

/// Nearest-rank percentile of sorted, non-empty `samples`: always a measured value, never an interpolation between two.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// The median time of `work`, repeated for about `time` (at least 5 times): for work too short to time once.
pub fn median_time<T>(time: Duration, mut work: impl FnMut() -> T) -> Duration {
    let (mut samples, started) = (Vec::new(), std::time::Instant::now());
    while samples.len() < 5 || started.elapsed() < time {
        let one = std::time::Instant::now();
        std::hint::black_box(work());
        samples.push(one.elapsed());
    }
    samples.sort_unstable();
    samples[samples.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let summary = LatencySummary::from_samples((1..=100).rev().map(Duration::from_millis).collect());
        let [p50, p95, p99, max] = [summary.p50, summary.p95, summary.p99, summary.max].map(|d| d.as_millis());
        assert_eq!((summary.count, p50, p95, p99, max), (100, 50, 95, 99, 100));
        assert_eq!(summary.mean, Duration::from_micros(50_500));
        let one = LatencySummary::from_samples(vec![Duration::from_millis(7)]);
        assert_eq!((one.p50, one.p99), (Duration::from_millis(7), Duration::from_millis(7)));
    }
}
