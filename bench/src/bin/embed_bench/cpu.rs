//! CPU time of a process, read from /proc, to show where the cores went during a
//! run: the server's share against the benchmark's own clients on the same machine.

use std::time::Duration;

use anyhow::Context;

/// Length of a /proc clock tick: USER_HZ, 100 on every Linux architecture in use.
const TICK: Duration = Duration::from_millis(10);

/// User plus system CPU time the process has used so far, all threads included.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name (field 2) is in parentheses and may hold spaces; count the
    // fields after its closing parenthesis. utime and stime are fields 14 and 15.
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).with_context(|| format!("parsing {path}"))?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |index: usize| -> anyhow::Result<u32> {
        fields.get(index - 3).and_then(|f| f.parse().ok()).with_context(|| format!("field {index} of {path}"))
    };
    Ok(TICK * (ticks(14)? + ticks(15)?))
}

/// CPU time used between two readings, as a number of cores kept busy.
pub fn cores(cpu_before: Duration, cpu_after: Duration, wall: Duration) -> f64 {
    cpu_after.saturating_sub(cpu_before).as_secs_f64() / wall.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_time_grows() {
        let before = cpu_time(std::process::id()).unwrap();
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_time(std::process::id()).unwrap() > before);
    }
}
