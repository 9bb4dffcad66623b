//! Timing searches: one query at a time for latency, and concurrent searchers sharing
//! the index behind an `RwLock` (read lock per search, as in the server) for
//! throughput.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use embedwire_bench::latency::{LatencySummary, ms};
use embedwire_server::index::{ChunkId, VectorIndex};

/// Untimed searches first, so page faults and cold caches of the first queries do
/// not count.
const WARMUP_QUERIES: usize = 5;

/// Percentiles of the search step alone, in one thread.
#[derive(Debug, Clone)]
pub struct Latency(LatencySummary);

impl Latency {
    /// Runs every query once, timing each `search` call; returns the timings and the
    /// hit ids of each query.
    pub fn one_at_a_time(
        index: &VectorIndex,
        queries: &[Vec<f32>],
        k: usize,
    ) -> anyhow::Result<(Latency, Vec<Vec<ChunkId>>)> {
        for query in queries.iter().take(WARMUP_QUERIES) {
            index.search(query, k, None, None)?;
        }
        let mut samples = Vec::with_capacity(queries.len());
        let mut hits = Vec::with_capacity(queries.len());
        for query in queries {
            let started = Instant::now();
            let found = index.search(query, k, None, None)?;
            samples.push(started.elapsed());
            hits.push(found.into_iter().map(|(id, _)| id).collect());
        }
        Ok((Latency(LatencySummary::from_samples(samples)), hits))
    }

    pub fn p50_ms(&self) -> f64 {
        ms(self.0.p50)
    }

    pub fn p95_ms(&self) -> f64 {
        ms(self.0.p95)
    }
}

/// Queries per second of `searchers` threads searching for `run`, each cycling
/// through the queries from its own offset.
pub fn throughput(
    index: VectorIndex,
    queries: &[Vec<f32>],
    k: usize,
    searchers: usize,
    run: Duration,
) -> anyhow::Result<f64> {
    let index = Arc::new(RwLock::new(index));
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let started = Instant::now();
    thread::scope(|scope| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..searchers)
            .map(|searcher| {
                let (index, stop, done) = (&index, &stop, &done);
                scope.spawn(move || -> anyhow::Result<()> {
                    let offset = searcher * queries.len() / searchers;
                    for query in queries.iter().cycle().skip(offset) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        index.read().expect("no writer panics").search(query, k, None, None)?;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            worker.join().expect("searcher panicked")?;
        }
        Ok(())
    })?;
    Ok(done.into_inner() as f64 / started.elapsed().as_secs_f64())
}

/// The share of the true top `k` (from exact search) that `found` contains.
pub fn recall_at(k: usize, truth: &[Vec<ChunkId>], found: &[Vec<ChunkId>]) -> f64 {
    let hits: usize = truth
        .iter()
        .zip(found)
        .map(|(truth, found)| found.iter().take(k).filter(|id| truth[..truth.len().min(k)].contains(id)).count())
        .sum();
    let expected: usize = truth.iter().map(|t| t.len().min(k)).sum();
    if expected == 0 { 1.0 } else { hits as f64 / expected as f64 }
}
