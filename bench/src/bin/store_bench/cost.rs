//! What a measured phase cost in CPU, per process group: the embedwire server of the
//! store measured, that store's Weaviate nodes, the other stores' processes (idle,
//! but alive: they compete for the same two cores), the bench's own clients, and the
//! machine as a whole, whose busy time beyond all of these is the load other jobs
//! put on the machine meanwhile.

use std::time::{Duration, Instant};

use embedwire_bench::cpu::{cpu_time, cpu_time_of, machine_busy_time};

/// The processes a phase is charged to.
#[derive(Debug, Clone)]
pub struct Watched {
    /// The embedwire server of the store measured.
    pub server: u32,
    /// Its store's processes: the Weaviate nodes (none for the embedded store).
    pub store: Vec<u32>,
    /// Every other server and node the bench started.
    pub others: Vec<u32>,
}

/// CPU readings at the start of a phase.
pub struct Meter {
    watched: Watched,
    started: Instant,
    at_start: Cost,
}

/// CPU time used during one phase (or several, added up), and its wall time.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cost {
    pub wall: Duration,
    /// The embedwire server measured.
    pub server: Duration,
    /// Its Weaviate nodes, summed.
    pub store: Duration,
    /// The other stores' servers and nodes.
    pub others: Duration,
    /// The bench process (its clients).
    pub bench: Duration,
    /// The whole machine, every process and the kernel.
    pub machine: Duration,
}

impl Meter {
    pub fn start(watched: Watched) -> anyhow::Result<Self> {
        let at_start = read(&watched)?;
        Ok(Meter { watched, started: Instant::now(), at_start })
    }

    pub fn finish(self) -> anyhow::Result<Cost> {
        let now = read(&self.watched)?;
        let used = |f: fn(&Cost) -> Duration| f(&now).saturating_sub(f(&self.at_start));
        Ok(Cost {
            wall: self.started.elapsed(),
            server: used(|c| c.server),
            store: used(|c| c.store),
            others: used(|c| c.others),
            bench: used(|c| c.bench),
            machine: used(|c| c.machine),
        })
    }
}

/// Cumulative CPU times so far (`wall` unused).
fn read(watched: &Watched) -> anyhow::Result<Cost> {
    Ok(Cost {
        wall: Duration::ZERO,
        server: cpu_time(watched.server)?,
        store: cpu_time_of(&watched.store)?,
        others: cpu_time_of(&watched.others)?,
        bench: cpu_time(std::process::id())?,
        machine: machine_busy_time()?,
    })
}

impl Cost {
    /// Several phases as one.
    pub fn sum(parts: &[Cost]) -> Cost {
        parts.iter().fold(Cost::default(), |total, part| Cost {
            wall: total.wall + part.wall,
            server: total.server + part.server,
            store: total.store + part.store,
            others: total.others + part.others,
            bench: total.bench + part.bench,
            machine: total.machine + part.machine,
        })
    }

    /// Busy time of the machine that none of the bench's processes account for: other
    /// jobs on the machine (and the kernel's own work).
    pub fn outside(&self) -> Duration {
        self.machine.saturating_sub(self.server + self.store + self.others + self.bench)
    }

    /// `time` as cores kept busy over the wall time.
    pub fn cores(&self, time: Duration) -> f64 {
        time.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }
}

/// CPU milliseconds per unit of work (a search, a chunk).
pub fn ms_per(time: Duration, units: u64) -> f64 {
    time.as_secs_f64() * 1e3 / units.max(1) as f64
}

impl std::fmt::Display for Cost {
    /// `server 1.62 cores, weaviate 0.21, other stores 0.02, bench 0.05, outside 0.03`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "server {:.2} cores, weaviate {:.2}, other stores {:.2}, bench {:.2}, outside the bench {:.2}",
            self.cores(self.server),
            self.cores(self.store),
            self.cores(self.others),
            self.cores(self.bench),
            self.cores(self.outside())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_phases_and_finds_the_load_outside() {
        let s = Duration::from_secs;
        let phase = Cost { wall: s(10), server: s(12), store: s(3), others: s(1), bench: s(1), machine: s(19) };
        let both = Cost::sum(&[phase, phase]);
        assert_eq!((both.wall, both.server, both.machine), (s(20), s(24), s(38)));
        assert_eq!(both.outside(), s(4));
        assert!((both.cores(both.server) - 1.2).abs() < 1e-9);
        assert!((ms_per(s(3), 1000) - 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_phase_is_charged_to_its_processes() {
        let own = std::process::id();
        let meter = Meter::start(Watched { server: own, store: vec![own], others: Vec::new() }).unwrap();
        let started = Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let cost = meter.finish().unwrap();
        assert!(cost.server > Duration::ZERO && cost.store > Duration::ZERO, "{cost:?}");
        assert!(cost.wall >= Duration::from_millis(50));
    }
}
