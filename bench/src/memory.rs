//! A process's resident memory, from /proc: once, or sampled over a run (its peak, and the series for an RSS plot).

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context;
use procfs::process::Process;
use tokio::{sync::oneshot, task::JoinHandle};

/// The process's resident set size (VmRSS) in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = Process::new(pid as i32)?.status().with_context(|| format!("reading /proc/{pid}/status"))?;
    Ok(status.vmrss.with_context(|| format!("no VmRSS in /proc/{pid}/status"))? * 1024)
}

/// The process's private resident memory (RssAnon) in bytes: its RSS without mapped files and shared memory (a
/// PostgreSQL backend's RSS counts the shared buffers it touched; this does not).
pub fn private_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = Process::new(pid as i32)?.status().with_context(|| format!("reading /proc/{pid}/status"))?;
    Ok(status.rssanon.with_context(|| format!("no RssAnon in /proc/{pid}/status"))? * 1024)
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `pids` and their children: a PostgreSQL postmaster's backends do the work. (A child that has ended took its CPU
/// time with it; backends live as long as the server's pooled connections.) RSS summed this way counts shared buffers
/// once per process that touched them: an upper bound.
pub fn with_children(pids: &[u32]) -> Vec<u32> {
    let children = procfs::process::all_processes().into_iter().flatten().flatten().filter_map(|process| {
        let stat = process.stat().ok()?;
        pids.contains(&(stat.ppid as u32)).then_some(stat.pid as u32)
    });
    pids.iter().copied().chain(children).collect()
}

/// The bytes of the files under `dir` (the nodes' data); files gone while read (a compaction) are left out.
pub fn dir_bytes(dir: &Path) -> u64 {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    let bytes = |entry: std::fs::DirEntry| match entry.file_type() {
        Ok(kind) if kind.is_dir() => dir_bytes(&entry.path()),
        Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |m| m.len()),
        _ => 0,
    };
    entries.map(bytes).sum()
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
