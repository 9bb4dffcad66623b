//! CPU use over the soak, second by second: the server's, the bench's own and the
//! whole machine's (from /proc/stat). On a shared machine a window where other work
//! took the cores looks like a server that slowed down by itself; these figures
//! tell the two apart.

use std::time::{Duration, Instant};

use anyhow::Context;
use embedwire_bench::cpu::cpu_time;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Length of a /proc clock tick (USER_HZ), in milliseconds.
const TICK_MS: u64 = 10;

/// CPU time used so far, read at one moment.
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    /// From the start of sampling.
    pub at: Duration,
    pub server: Duration,
    pub bench: Duration,
    /// Every core's non-idle time, all processes together.
    pub machine: Duration,
}

/// Busy cores between two samples: (server, bench, everything else).
pub fn cores_between(first: &CpuSample, last: &CpuSample) -> (f64, f64, f64) {
    let wall = last.at.saturating_sub(first.at).as_secs_f64().max(1e-9);
    let used = |pick: fn(&CpuSample) -> Duration| pick(last).saturating_sub(pick(first)).as_secs_f64() / wall;
    let (server, bench, machine) = (used(|s| s.server), used(|s| s.bench), used(|s| s.machine));
    (server, bench, (machine - server - bench).max(0.0))
}

/// Samples in the background until finished.
pub struct CpuSampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<Vec<CpuSample>>>,
}

impl CpuSampler {
    /// Samples server `pid`, this process and the machine every `interval`, the
    /// first sample at once.
    pub fn start(pid: u32, interval: Duration) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut samples = Vec::new();
            let mut ticks = tokio::time::interval(interval);
            loop {
                tokio::select! {
                    _ = &mut stopped => return Ok(samples),
                    _ = ticks.tick() => samples.push(CpuSample {
                        at: started.elapsed(),
                        server: cpu_time(pid)?,
                        bench: cpu_time(std::process::id())?,
                        machine: machine_busy()?,
                    }),
                }
            }
        });
        CpuSampler { stop, task }
    }

    /// Stops sampling and returns the samples.
    pub async fn finish(self) -> anyhow::Result<Vec<CpuSample>> {
        let _ = self.stop.send(());
        self.task.await.context("CPU sampler task")?
    }
}

/// Non-idle CPU time of all cores so far: the first line of /proc/stat, every
/// field but idle and iowait (and the guest fields, already counted in user).
fn machine_busy() -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    busy_of_stat_line(stat.lines().next().unwrap_or_default()).context("no cpu line in /proc/stat")
}

fn busy_of_stat_line(line: &str) -> Option<Duration> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields.map(|field| field.parse().ok()).collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    let busy: u64 = ticks.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, t)| t).sum();
    Some(Duration::from_millis(busy * TICK_MS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_leaves_out_idle_iowait_and_guest() {
        let line = "cpu  100 10 20 5000 7 1 2 3 50 60";
        assert_eq!(busy_of_stat_line(line), Some(Duration::from_millis(1360)));
        assert_eq!(busy_of_stat_line("cpu0 1 2 3 4"), None);
    }

    #[test]
    fn cores_between_two_samples() {
        let sample = |at, server, bench, machine| CpuSample {
            at: Duration::from_secs(at),
            server: Duration::from_millis(server),
            bench: Duration::from_millis(bench),
            machine: Duration::from_millis(machine),
        };
        let (server, bench, others) = cores_between(&sample(0, 0, 0, 0), &sample(2, 1000, 200, 3400));
        assert!((server - 0.5).abs() < 1e-9 && (bench - 0.1).abs() < 1e-9 && (others - 1.1).abs() < 1e-9);
    }
}
