//! Resident memory of the server process, read from /proc (Linux only, as the
//! deployment targets are).

use std::time::Duration;

use anyhow::Context;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The process's resident set size (VmRSS) in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|number| number.trim().parse::<u64>().ok())
        .with_context(|| format!("no VmRSS line in {path}"))?;
    Ok(kib * 1024)
}

/// Bytes to MiB, for printing and CSV.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Samples a process's RSS in the background and keeps the largest value seen.
pub struct PeakRssSampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<u64>>,
}

impl PeakRssSampler {
    /// Starts sampling `pid` every `interval`.
    pub fn start(pid: u32, interval: Duration) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut peak = rss_bytes(pid)?;
            let mut ticks = tokio::time::interval(interval);
            loop {
                tokio::select! {
                    _ = &mut stopped => return Ok(peak),
                    _ = ticks.tick() => peak = peak.max(rss_bytes(pid)?),
                }
            }
        });
        PeakRssSampler { stop, task }
    }

    /// Stops sampling and returns the peak, including one last sample taken now.
    pub async fn finish(self, pid: u32) -> anyhow::Result<u64> {
        let _ = self.stop.send(());
        let peak = self.task.await.context("RSS sampler task")??;
        Ok(peak.max(rss_bytes(pid)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_rss() {
        let rss = rss_bytes(std::process::id()).unwrap();
        assert!(rss > 1024 * 1024, "{rss} bytes");
    }
}
