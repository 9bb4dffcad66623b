//! Resident memory of a server process, read from /proc (Linux only, as the
//! deployment targets are): once, or sampled over a run (its peak, and the series
//! for an RSS-over-time plot).

use std::time::{Duration, Instant};

use anyhow::Context;
use procfs::process::Process;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The process's resident set size (VmRSS) in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = Process::new(pid as i32)?.status().with_context(|| format!("reading /proc/{pid}/status"))?;
    Ok(status.vmrss.with_context(|| format!("no VmRSS in /proc/{pid}/status"))? * 1024)
}

/// Bytes to MiB, for printing and CSV.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// RSS samples of one process: (time since sampling started, bytes).
#[derive(Debug, Clone, Default)]
pub struct RssSeries {
    pub samples: Vec<(Duration, u64)>,
}

impl RssSeries {
    /// The largest sample; 0 when there is none.
    pub fn peak(&self) -> u64 {
        self.samples.iter().map(|(_, bytes)| *bytes).max().unwrap_or(0)
    }

    /// The mean of the samples; 0 when there is none.
    pub fn mean(&self) -> u64 {
        let total: u64 = self.samples.iter().map(|(_, bytes)| *bytes).sum();
        total.checked_div(self.samples.len() as u64).unwrap_or(0)
    }
}

/// Samples a process's RSS in the background, keeping every sample.
pub struct RssSampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<RssSeries>>,
    started: Instant,
}

impl RssSampler {
    /// Starts sampling `pid` every `interval` (the first sample is taken at once).
    pub fn start(pid: u32, interval: Duration) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let mut series = RssSeries::default();
            let mut ticks = tokio::time::interval(interval);
            loop {
                tokio::select! {
                    _ = &mut stopped => return Ok(series),
                    _ = ticks.tick() => series.samples.push((started.elapsed(), rss_bytes(pid)?)),
                }
            }
        });
        RssSampler { stop, task, started }
    }

    /// Stops sampling and returns the series, with one last sample taken now.
    pub async fn finish(self, pid: u32) -> anyhow::Result<RssSeries> {
        let _ = self.stop.send(());
        let mut series = self.task.await.context("RSS sampler task")??;
        series.samples.push((self.started.elapsed(), rss_bytes(pid)?));
        Ok(series)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sampler_keeps_a_series_with_its_peak() {
        let pid = std::process::id();
        let sampler = RssSampler::start(pid, Duration::from_millis(5));
        tokio::time::sleep(Duration::from_millis(30)).await;
        let series = sampler.finish(pid).await.unwrap();
        assert!(series.samples.len() >= 3, "{series:?}");
        assert!(series.samples.windows(2).all(|pair| pair[0].0 <= pair[1].0), "{series:?}");
        assert!(series.peak() >= series.mean() && series.mean() > 1024 * 1024, "{series:?}");
    }
}
