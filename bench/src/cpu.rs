//! CPU time of a process, and of each of its threads, read from /proc (with procfs),
//! to show where the cores went during a run: the server's share against the
//! benchmark's own clients on the same machine, and inside the server which threads
//! used it (what `top -H -p PID` shows, summed over the run instead of sampled).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use procfs::process::Process;
use procfs::{CurrentSI, KernelStats};

/// /proc's clock ticks (USER_HZ) as time.
fn ticks(count: u64) -> Duration {
    Duration::from_nanos(count * 1_000_000_000 / procfs::ticks_per_second())
}

/// User plus system, and system, CPU time the process has used so far, all threads
/// included.
fn times(pid: u32) -> anyhow::Result<[Duration; 2]> {
    let stat = Process::new(pid as i32)?.stat().with_context(|| format!("reading /proc/{pid}/stat"))?;
    Ok([ticks(stat.utime + stat.stime), ticks(stat.stime)])
}

/// User plus system CPU time the process has used so far, all threads included.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    times(pid).map(|[total, _]| total)
}

/// User plus system CPU time of several processes together (the nodes of a
/// cluster), each with all its threads.
pub fn cpu_time_of(pids: &[u32]) -> anyhow::Result<Duration> {
    pids.iter().map(|&pid| cpu_time(pid)).sum()
}

/// CPU time the whole machine has been busy so far, every core, process and the
/// kernel (/proc/stat's user + nice + system + irq + softirq + steal; guest time is
/// already part of user): against the processes a bench knows of, it shows the load
/// that others put on the machine.
pub fn machine_busy_time() -> anyhow::Result<Duration> {
    let cpu = KernelStats::current().context("reading /proc/stat")?.total;
    let optional: u64 = [cpu.irq, cpu.softirq, cpu.steal].iter().map(|time| time.unwrap_or(0)).sum();
    Ok(ticks(cpu.user + cpu.nice + cpu.system + optional))
}

/// CPU time used between two readings, as a number of cores kept busy.
pub fn cores(cpu_before: Duration, cpu_after: Duration, wall: Duration) -> f64 {
    cpu_after.saturating_sub(cpu_before).as_secs_f64() / wall.as_secs_f64()
}

/// CPU readings at the start of a measured run: the server's threads and the bench
/// process, so that the run's share of each can be told apart.
pub struct CpuWindow {
    server_pid: u32,
    started: Instant,
    server_threads: ThreadTimes,
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
    /// The part of `server_cores` spent in the kernel: page faults, system calls. A
    /// large share points at memory being mapped and zeroed over and over.
    pub server_system_cores: f64,
    /// The bench process (its clients), as cores kept busy.
    pub bench_cores: f64,
    /// The server's threads, busiest first.
    pub server_threads: Vec<ThreadCpu>,
}

impl CpuWindow {
    /// Takes the readings at the start of a run.
    pub fn start(server_pid: u32) -> anyhow::Result<Self> {
        Ok(CpuWindow {
            server_pid,
            started: Instant::now(),
            server_threads: ThreadTimes::read(server_pid)?,
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
        let server_threads = self.server_threads.busiest_since(&ThreadTimes::read(self.server_pid)?, wall);
        let [server, server_system] = times(self.server_pid)?;
        Ok(CpuUse {
            wall,
            server_cores: cores(self.server[0], server, wall),
            server_system_cores: cores(self.server[1], server_system, wall),
            bench_cores: cores(self.bench, cpu_time(std::process::id())?, wall),
            server_threads,
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
                let used = thread.cores * part.wall.as_secs_f64() / seconds;
                threads
                    .entry(thread.tid)
                    .and_modify(|known| known.cores += used)
                    .or_insert_with(|| ThreadCpu { cores: used, ..thread.clone() });
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
    /// `server 1.85 cores, 0.10 in the kernel (embedwire-model/812 0.95, other/813
    /// 0.40, 3 more 0.02), bench 0.10 cores`: the busiest four threads, then the rest.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (busiest, rest) = self.server_threads.split_at(self.server_threads.len().min(4));
        let mut threads: Vec<String> = busiest.iter().map(|t| format!("{}/{} {:.2}", t.name, t.tid, t.cores)).collect();
        if !rest.is_empty() {
            threads.push(format!("{} more {:.2}", rest.len(), rest.iter().map(|t| t.cores).sum::<f64>()));
        }
        let (server, kernel, bench) = (self.server_cores, self.server_system_cores, self.bench_cores);
        write!(
            f,
            "server {server:.2} cores, {kernel:.2} in the kernel ({}), bench {bench:.2} cores",
            threads.join(", ")
        )
    }
}

/// Every thread of a process at one moment: thread id to (name, CPU time so far).
#[derive(Debug, Clone, Default)]
pub struct ThreadTimes(HashMap<u32, (String, Duration)>);

impl ThreadTimes {
    /// Reads /proc/PID/task/*/stat. A thread that ends while being read is skipped.
    pub fn read(pid: u32) -> anyhow::Result<Self> {
        let tasks = Process::new(pid as i32)?.tasks().with_context(|| format!("reading /proc/{pid}/task"))?;
        let threads = tasks.flatten().filter_map(|task| {
            let stat = task.stat().ok()?;
            Some((task.tid as u32, (stat.comm, ticks(stat.utime + stat.stime))))
        });
        Ok(ThreadTimes(threads.collect()))
    }

    /// CPU used by each thread from `self` to `later`, as cores over `wall`,
    /// busiest first; threads that used none are left out. Threads started in
    /// between count from zero; threads gone by `later` are left out (their last
    /// share is unknown).
    pub fn busiest_since(&self, later: &ThreadTimes, wall: Duration) -> Vec<ThreadCpu> {
        busiest_first(later.0.iter().filter_map(|(tid, (name, after))| {
            let before = self.0.get(tid).map_or(Duration::ZERO, |(_, time)| *time);
            let used = after.saturating_sub(before);
            let cores = used.as_secs_f64() / wall.as_secs_f64();
            (used > Duration::ZERO).then(|| ThreadCpu { tid: *tid, name: name.clone(), cores })
        }))
    }
}

/// The CPU one thread used during a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadCpu {
    pub tid: u32,
    /// The thread's name (Linux keeps 15 bytes). A thread started by a library
    /// (ONNX Runtime's pool) inherits the name of the thread that started it.
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

    fn spin(time: Duration) {
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < time {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn own_and_machine_cpu_time_grow() {
        let before = (cpu_time(std::process::id()).unwrap(), machine_busy_time().unwrap());
        spin(Duration::from_millis(50));
        assert!(cpu_time(std::process::id()).unwrap() > before.0);
        assert!(machine_busy_time().unwrap() > before.1);
    }

    #[test]
    fn combined_shares_are_weighted_by_wall_time() {
        let thread = |tid, cores| ThreadCpu { tid, name: "t".into(), cores };
        let a = CpuUse {
            wall: Duration::from_secs(1),
            server_cores: 2.0,
            server_system_cores: 0.5,
            bench_cores: 0.0,
            server_threads: vec![thread(1, 1.0), thread(2, 1.0)],
        };
        let b = CpuUse {
            wall: Duration::from_secs(3),
            server_cores: 1.0,
            server_system_cores: 0.1,
            bench_cores: 0.4,
            server_threads: vec![thread(1, 1.0)],
        };
        let both = CpuUse::combine(&[a, b]);
        assert_eq!(both.wall, Duration::from_secs(4));
        assert!((both.server_cores - 1.25).abs() < 1e-9 && (both.bench_cores - 0.3).abs() < 1e-9);
        assert!((both.server_system_cores - 0.2).abs() < 1e-9);
        assert_eq!(both.server_threads, [thread(1, 1.0), thread(2, 0.25)]);
    }

    #[test]
    fn a_busy_named_thread_shows_up() {
        let pid = std::process::id();
        let before = ThreadTimes::read(pid).unwrap();
        let started = std::time::Instant::now();
        let (spun_tx, spun_rx) = std::sync::mpsc::channel();
        let (read_tx, read_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::Builder::new()
            .name("bench-spinner".into())
            .spawn(move || {
                spin(Duration::from_millis(60));
                spun_tx.send(()).unwrap();
                // Stays alive until read, so its time is not lost with it.
                let _ = read_rx.recv();
            })
            .unwrap();
        spun_rx.recv().unwrap();
        let after = ThreadTimes::read(pid).unwrap();
        read_tx.send(()).unwrap();
        worker.join().unwrap();
        let threads = before.busiest_since(&after, started.elapsed());
        let spinner = threads.iter().find(|t| t.name == "bench-spinner").expect("the spinner thread");
        assert!(spinner.cores > 0.0, "{threads:?}");
    }
}
