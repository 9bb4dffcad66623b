//! A process's resident memory, from /proc: once, or sampled over a run (its peak, and the series for an RSS plot).

use std::time::{Duration, Instant};

use anyhow::Context;
use procfs::process::Process;
use tokio::{sync::oneshot, task::JoinHandle};

/// The process's resident set size (VmRSS) in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = Process::new(pid as i32)?.status().with_context(|| format!("reading /proc/{pid}/status"))?;
    Ok(status.vmrss.with_context(|| format!("no VmRSS in /proc/{pid}/status"))? * 1024)
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// (time since sampling started, bytes); its peak and mean are 0 when there is no sample.
#[derive(Debug, Clone, Default)]
pub struct RssSeries {
    pub samples: Vec<(Duration, u64)>,
}

impl RssSeries {
    pub fn peak(&self) -> u64 {
        self.samples.iter().map(|(_, bytes)| *bytes).max().unwrap_or(0)
    }

    pub fn mean(&self) -> u64 {
        let total: u64 = self.samples.iter().map(|(_, bytes)| *bytes).sum();
        total.checked_div(self.samples.len() as u64).unwrap_or(0)
    }
}

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
