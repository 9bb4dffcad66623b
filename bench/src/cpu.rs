//! CPU time of a process and of each of its threads, from /proc: where the cores went during a run, the server against
//! the bench's own clients, and inside the server by thread (what `top -H -p PID` shows, summed over the run).

use std::{collections::HashMap, time::Duration, time::Instant};

use anyhow::Context;
use procfs::{CurrentSI, KernelStats, process::Process};

/// /proc's clock ticks (USER_HZ) as time.
fn ticks(count: u64) -> Duration {
    Duration::from_nanos(count * 1_000_000_000 / procfs::ticks_per_second())
}

/// User plus system, and system, CPU time the process has used so far.
fn times(pid: u32) -> anyhow::Result<[Duration; 2]> {
    let stat = Process::new(pid as i32)?.stat().with_context(|| format!("reading /proc/{pid}/stat"))?;
    Ok([ticks(stat.utime + stat.stime), ticks(stat.stime)])
}

/// User plus system CPU time the process has used so far, all threads included.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    times(pid).map(|[total, _]| total)
}

/// CPU time of several processes together (the nodes of a cluster).
pub fn cpu_time_of(pids: &[u32]) -> anyhow::Result<Duration> {
    pids.iter().map(|&pid| cpu_time(pid)).sum()
}

/// CPU time the whole machine has been busy so far (/proc/stat's user + nice + system + irq + softirq + steal; guest
/// time is already part of user): against the processes a bench knows of, the load others put on the machine.
pub fn machine_busy_time() -> anyhow::Result<Duration> {
    let cpu = KernelStats::current().context("reading /proc/stat")?.total;
    let optional: u64 = [cpu.irq, cpu.softirq, cpu.steal].iter().map(|time| time.unwrap_or(0)).sum();
    Ok(ticks(cpu.user + cpu.nice + cpu.system + optional))
}

/// CPU time used between two readings, as a number of cores kept busy.
pub fn cores(cpu_before: Duration, cpu_after: Duration, wall: Duration) -> f64 {
    cpu_after.saturating_sub(cpu_before).as_secs_f64() / wall.as_secs_f64()
}

/// CPU readings at the start of a measured run: the server, its threads, the bench.
pub struct CpuWindow {
    server_pid: u32,
    started: Instant,
    server_threads: HashMap<u32, (String, Duration)>,
    server: [Duration; 2],
    bench: Duration,
}

/// Where the CPU went during a run.
#[derive(Debug, Clone, Default)]
pub struct CpuUse {
    /// The run's wall time, which the shares below are of.
    pub wall: Duration,
    /// The server process, all threads, as cores kept busy.
    pub server_cores: f64,
    /// The part of `server_cores` spent in the kernel: a large share points at memory mapped and zeroed over and over.
    pub server_system_cores: f64,
    /// The bench process (its clients), as cores kept busy.
    pub bench_cores: f64,
    /// The server's threads, busiest first.
    pub server_threads: Vec<ThreadCpu>,
}

impl CpuWindow {
    pub fn start(server_pid: u32) -> anyhow::Result<Self> {
        Ok(CpuWindow {
            server_pid,
            started: Instant::now(),
            server_threads: thread_times(server_pid)?,
            server: times(server_pid)?,
            bench: cpu_time(std::process::id())?,
        })
    }

    /// Runs `work` and returns its output with what was used while it ran.
    pub async fn around<T>(pid: u32, work: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<(T, CpuUse)> {
        let window = CpuWindow::start(pid)?;
        let output = work.await?;
        Ok((output, window.finish()?))
    }

    /// Reads again and returns what was used since [`CpuWindow::start`].
    pub fn finish(self) -> anyhow::Result<CpuUse> {
        let wall = self.started.elapsed();
        // Threads that used no CPU, or are gone by now (their last share is unknown), are left out.
        let threads = thread_times(self.server_pid)?.into_iter().filter_map(|(tid, (name, after))| {
            let used = after.saturating_sub(self.server_threads.get(&tid).map_or(Duration::ZERO, |(_, time)| *time));
            (used > Duration::ZERO).then(|| ThreadCpu { tid, name, cores: used.as_secs_f64() / wall.as_secs_f64() })
        });
        let [server, server_system] = times(self.server_pid)?;
        Ok(CpuUse {
            wall,
            server_cores: cores(self.server[0], server, wall),
            server_system_cores: cores(self.server[1], server_system, wall),
            bench_cores: cores(self.bench, cpu_time(std::process::id())?, wall),
            server_threads: busiest_first(threads),
        })
    }
}

impl CpuUse {
    /// Several runs as one: each share weighted by its run's wall time.
    pub fn combine(parts: &[CpuUse]) -> CpuUse {
        let wall: Duration = parts.iter().map(|part| part.wall).sum();
        let seconds = wall.as_secs_f64().max(1e-9);
        let weighted = |share: &dyn Fn(&CpuUse) -> f64| {
            parts.iter().map(|part| share(part) * part.wall.as_secs_f64()).sum::<f64>() / seconds
        };
        let mut threads: HashMap<u32, ThreadCpu> = HashMap::new();
        for part in parts {
            for thread in &part.server_threads {
                let known = threads.entry(thread.tid).or_insert_with(|| ThreadCpu { cores: 0.0, ..thread.clone() });
                known.cores += thread.cores * part.wall.as_secs_f64() / seconds;
            }
        }
        CpuUse {
            wall,
            server_cores: weighted(&|part| part.server_cores),
            server_system_cores: weighted(&|part| part.server_system_cores),
            bench_cores: weighted(&|part| part.bench_cores),
            server_threads: busiest_first(threads.into_values()),
        }
    }
}

impl std::fmt::Display for CpuUse {
    /// `server 1.85 cores, 0.10 in the kernel (embedwire-model/812 0.95, other/813 0.40, 3 more 0.02), bench 0.10
    /// cores`: the busiest four threads, then the rest.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (busiest, rest) = self.server_threads.split_at(self.server_threads.len().min(4));
        let mut threads: Vec<String> = busiest.iter().map(|t| format!("{}/{} {:.2}", t.name, t.tid, t.cores)).collect();
        if !rest.is_empty() {
            threads.push(format!("{} more {:.2}", rest.len(), rest.iter().map(|t| t.cores).sum::<f64>()));
        }
        let (server, kernel, bench, threads) =
            (self.server_cores, self.server_system_cores, self.bench_cores, threads.join(", "));
        write!(f, "server {server:.2} cores, {kernel:.2} in the kernel ({threads}), bench {bench:.2} cores")
    }
}

/// Every thread of a process: thread id to (name, CPU time so far). A thread that ends while being read is skipped.
fn thread_times(pid: u32) -> anyhow::Result<HashMap<u32, (String, Duration)>> {
    let tasks = Process::new(pid as i32)?.tasks().with_context(|| format!("reading /proc/{pid}/task"))?;
    let threads = tasks.flatten().filter_map(|task| {
        let stat = task.stat().ok()?;
        Some((task.tid as u32, (stat.comm, ticks(stat.utime + stat.stime))))
    });
    Ok(threads.collect())
}

/// The CPU one thread used during a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadCpu {
    pub tid: u32,
    /// The thread's name (Linux keeps 15 bytes); one a library starts (ONNX Runtime's pool) has its starter's name.
    pub name: String,
    /// CPU time as cores kept busy over the run.
    pub cores: f64,
}

/// The threads sorted busiest first (ties by thread id, so the order is stable).
fn busiest_first(threads: impl Iterator<Item = ThreadCpu>) -> Vec<ThreadCpu> {
    let mut threads: Vec<ThreadCpu> = threads.collect();
    threads.sort_by(|a, b| b.cores.total_cmp(&a.cores).then_with(|| a.tid.cmp(&b.tid)));
    threads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_shares_are_weighted_by_wall_time() {
        let thread = |tid, cores| ThreadCpu { tid, name: "t".into(), cores };
        let part = |secs, server_cores, bench_cores, server_threads| CpuUse {
            wall: Duration::from_secs(secs),
            server_cores,
            server_system_cores: 0.0,
            bench_cores,
            server_threads,
        };
        let a = part(1, 2.0, 0.0, vec![thread(1, 1.0), thread(2, 1.0)]);
        let both = CpuUse::combine(&[a, part(3, 1.0, 0.4, vec![thread(1, 1.0)])]);
        assert_eq!(both.wall, Duration::from_secs(4));
        assert!((both.server_cores - 1.25).abs() < 1e-9 && (both.bench_cores - 0.3).abs() < 1e-9);
        assert_eq!(both.server_threads, [thread(1, 1.0), thread(2, 0.25)]);
    }
}
