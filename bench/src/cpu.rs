//! CPU time of a process, and of each of its threads, read from /proc, to show where
//! the cores went during a run: the server's share against the benchmark's own
//! clients on the same machine, and inside the server which threads used it (what
//! `top -H -p PID` shows, summed over the run instead of sampled).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;

/// Length of a /proc clock tick: USER_HZ, 100 on every Linux architecture in use.
const TICK: Duration = Duration::from_millis(10);

/// User plus system CPU time the process has used so far, all threads included.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = read_stat(&format!("/proc/{pid}/stat"))?;
    Ok(stat.user + stat.system)
}

/// User plus system CPU time of several processes together (the nodes of a
/// cluster), each with all its threads.
pub fn cpu_time_of(pids: &[u32]) -> anyhow::Result<Duration> {
    pids.iter().map(|&pid| cpu_time(pid)).sum()
}

/// CPU time the whole machine has been busy so far, every core, process and the
/// kernel (the first line of /proc/stat, all but idle and iowait): against the
/// processes a bench knows of, it shows the load that others put on the machine.
pub fn machine_busy_time() -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    parse_machine_busy(&stat).context("parsing the cpu line of /proc/stat")
}

/// user + nice + system + irq + softirq + steal of the `cpu` line (guest time is
/// already part of user).
fn parse_machine_busy(stat: &str) -> Option<Duration> {
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).map(|field| field.parse().ok()).collect::<Option<_>>()?;
    let busy: u64 = [0, 1, 2, 5, 6, 7].iter().map(|&i| ticks.get(i).copied().unwrap_or(0)).sum();
    Some(Duration::from_millis(busy * TICK.as_millis() as u64))
}

/// System (kernel) CPU time the process has used so far: page faults, system
/// calls. A large share points at memory being mapped and zeroed over and over.
pub fn system_time(pid: u32) -> anyhow::Result<Duration> {
    Ok(read_stat(&format!("/proc/{pid}/stat"))?.system)
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
    server: Duration,
    server_system: Duration,
    bench: Duration,
}

/// Where the CPU went during a run.
#[derive(Debug, Clone, Default)]
pub struct CpuUse {
    /// The run's wall time, which the shares below are of.
    pub wall: Duration,
    /// The server process, all threads, as cores kept busy.
    pub server_cores: f64,
    /// The part of `server_cores` spent in the kernel.
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
            server: cpu_time(server_pid)?,
            server_system: system_time(server_pid)?,
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
        Ok(CpuUse {
            wall,
            server_cores: cores(self.server, cpu_time(self.server_pid)?, wall),
            server_system_cores: cores(self.server_system, system_time(self.server_pid)?, wall),
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
        let mut server_threads: Vec<ThreadCpu> = threads.into_values().collect();
        server_threads.sort_by(|a, b| b.cores.total_cmp(&a.cores).then_with(|| a.tid.cmp(&b.tid)));
        CpuUse {
            wall,
            server_cores: weighted(&|part| part.server_cores),
            server_system_cores: weighted(&|part| part.server_system_cores),
            bench_cores: weighted(&|part| part.bench_cores),
            server_threads,
        }
    }
}

impl std::fmt::Display for CpuUse {
    /// `server 1.85 cores, 0.10 in the kernel (embedwire-model/812 0.95, ...), bench
    /// 0.10 cores`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "server {:.2} cores, {:.2} in the kernel ({}), bench {:.2} cores",
            self.server_cores,
            self.server_system_cores,
            format_threads(&self.server_threads, 4),
            self.bench_cores
        )
    }
}

/// Every thread of a process at one moment: thread id to (name, CPU time so far).
#[derive(Debug, Clone, Default)]
pub struct ThreadTimes(HashMap<u32, (String, Duration)>);

impl ThreadTimes {
    /// Reads /proc/PID/task/*/stat. A thread that ends while being read is skipped.
    pub fn read(pid: u32) -> anyhow::Result<Self> {
        let dir = format!("/proc/{pid}/task");
        let mut threads = HashMap::new();
        for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
            let entry = entry?;
            let Some(tid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
            if let Ok(stat) = read_stat(&format!("{dir}/{tid}/stat")) {
                threads.insert(tid, (stat.name, stat.user + stat.system));
            }
        }
        Ok(ThreadTimes(threads))
    }

    /// CPU used by each thread from `self` to `later`, as cores over `wall`,
    /// busiest first; threads that used none are left out. Threads started in
    /// between count from zero; threads gone by `later` are left out (their last
    /// share is unknown).
    pub fn busiest_since(&self, later: &ThreadTimes, wall: Duration) -> Vec<ThreadCpu> {
        let mut busiest: Vec<ThreadCpu> = later
            .0
            .iter()
            .filter_map(|(tid, (name, after))| {
                let before = self.0.get(tid).map_or(Duration::ZERO, |(_, time)| *time);
                let used = after.saturating_sub(before);
                (used > Duration::ZERO).then(|| ThreadCpu {
                    tid: *tid,
                    name: name.clone(),
                    cores: used.as_secs_f64() / wall.as_secs_f64(),
                })
            })
            .collect();
        busiest.sort_by(|a, b| b.cores.total_cmp(&a.cores).then_with(|| a.tid.cmp(&b.tid)));
        busiest
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

/// Formats threads as `name/tid 0.91, other/tid 0.10, 3 more 0.02`: the busiest
/// `limit` ones, then the rest summed.
pub fn format_threads(threads: &[ThreadCpu], limit: usize) -> String {
    let mut shown: Vec<String> =
        threads.iter().take(limit).map(|t| format!("{}/{} {:.2}", t.name, t.tid, t.cores)).collect();
    let rest = &threads[limit.min(threads.len())..];
    if !rest.is_empty() {
        shown.push(format!("{} more {:.2}", rest.len(), rest.iter().map(|t| t.cores).sum::<f64>()));
    }
    shown.join(", ")
}

/// The name and user plus system CPU time in a /proc stat file.
/// The fields of a /proc stat file that the bench reads.
#[derive(Debug, Clone, PartialEq)]
struct Stat {
    name: String,
    user: Duration,
    system: Duration,
}

fn read_stat(path: &str) -> anyhow::Result<Stat> {
    let stat = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    parse_stat(&stat).with_context(|| format!("parsing {path}"))
}

fn parse_stat(stat: &str) -> Option<Stat> {
    // The command name (field 2) is in parentheses and may hold spaces and
    // parentheses; it ends at the last ')'. utime and stime are fields 14 and 15.
    let (head, after_name) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |index: usize| -> Option<u32> { fields.get(index - 3)?.parse().ok() };
    Some(Stat { name, user: TICK * ticks(14)?, system: TICK * ticks(15)? })
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
    fn own_cpu_time_grows() {
        let before = cpu_time(std::process::id()).unwrap();
        spin(Duration::from_millis(50));
        assert!(cpu_time(std::process::id()).unwrap() > before);
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
    fn machine_busy_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 5 50 9000 40 3 2 1 0 0\ncpu0 50 2 25 4500 20 1 1 0 0 0\nintr 1\n";
        assert_eq!(parse_machine_busy(stat), Some(TICK * 161));
        assert!(machine_busy_time().unwrap() > Duration::ZERO);
    }

    #[test]
    fn parses_a_name_with_spaces_and_parentheses() {
        let stat = "42 (tokio (w) 1) S 1 42 42 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 3 0";
        let parsed = Stat {
            name: "tokio (w) 1".to_string(),
            user: Duration::from_millis(1500),
            system: Duration::from_millis(250),
        };
        assert_eq!(parse_stat(stat), Some(parsed));
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
