//! index-bench: measures the vector index of the search feature on synthetic
//! embeddings and prints each figure against its target:
//!
//! 1. exact search: p50/p95 of the search step alone (one query at a time, k = 10),
//!    with the scan on one thread and split over two, and queries/s with two
//!    searchers sharing the index behind an `RwLock` as the server does;
//! 2. HNSW: parallel build time, then recall@10 against exact search, p50/p95 and
//!    queries/s for each `ef_search`.
//!
//! The vectors are clustered like real embeddings (seeded, see
//! `embedwire_server::index::synthetic`). Figures are noisy on a shared 2-core
//! machine: repeat runs and compare ratios. A MISS is a result, not a failure; the
//! exit status is non-zero only when the bench could not run.
//!
//! # Layout
//! - [`config`]: the flags, and the amounts of work of a full or `--quick` run.
//! - [`data`]: the stored vectors and the queries.
//! - [`measure`]: timing one query at a time and with concurrent searchers.
//! - [`report`]: targets, the final table and the CSV file.

mod config;
mod data;
mod measure;
mod report;

use std::time::Instant;

use clap::Parser;
use embedwire_server::index::{ChunkId, IndexKind, IndexParams, VectorIndex};

use crate::config::{BenchConfig, Plan};
use crate::data::Dataset;
use crate::measure::{Latency, recall_at, throughput};
use crate::report::{ExactRun, HnswRun, HnswSetting, SizeResults};

/// Hits asked of every search.
const K: usize = 10;

fn main() -> anyhow::Result<()> {
    let config = BenchConfig::parse();
    let plan = config.plan();
    println!(
        "index-bench: dim {}, {} clusters, spread {}, noise rank {}, sizes {:?}, {} queries, k {K}{}",
        plan.dim,
        plan.clusters,
        plan.spread,
        plan.noise_rank,
        plan.sizes,
        plan.queries,
        if config.quick { " (quick)" } else { "" }
    );
    let mut results = Vec::new();
    for &size in &plan.sizes {
        let started = Instant::now();
        let data = Dataset::generate(&plan, size);
        println!("size {size}: {} vectors generated in {:.1} s", size, started.elapsed().as_secs_f64());
        results.push(run_size(&plan, &data)?);
    }
    println!();
    print!("{}", report::table(&results));
    let path = report::write_csv(&config.results_dir, &plan, &results)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Every measurement at one collection size.
fn run_size(plan: &Plan, data: &Dataset) -> anyhow::Result<SizeResults> {
    let mut exact = Vec::new();
    let mut truth: Vec<Vec<ChunkId>> = Vec::new();
    for scan_threads in [1, 2] {
        let params = IndexParams { scan_threads, ..IndexParams::default() };
        let started = Instant::now();
        let index = load(IndexKind::Exact, data, params)?;
        let build = started.elapsed();
        let (latency, hits) = Latency::one_at_a_time(&index, &data.queries, K)?;
        let qps = throughput(index, &data.queries, K, plan.searchers, plan.concurrent_run)?;
        println!(
            "size {}: exact, {scan_threads} scan thread(s): built in {:.2} s, p50 {:.2} ms, {qps:.0} q/s with {} searchers",
            data.size,
            build.as_secs_f64(),
            latency.p50_ms(),
            plan.searchers
        );
        truth = hits;
        exact.push(ExactRun { scan_threads, build, latency, qps });
    }

    let mut hnsw = None;
    if plan.hnsw {
        let params = IndexParams {
            m: plan.hnsw_m,
            ef_construction: plan.hnsw_ef_construction,
            ef_search: plan.hnsw_ef_search[0],
            ..IndexParams::default()
        };
        let started = Instant::now();
        let mut index = load(IndexKind::Hnsw, data, params)?;
        let build = started.elapsed();
        println!(
            "size {}: hnsw built in {:.1} s (m {}, ef_construction {})",
            data.size,
            build.as_secs_f64(),
            params.m,
            params.ef_construction
        );
        let mut settings = Vec::new();
        for &ef_search in &plan.hnsw_ef_search {
            index.set_ef_search(ef_search);
            let (latency, hits) = Latency::one_at_a_time(&index, &data.queries, K)?;
            let recall = recall_at(K, &truth, &hits);
            println!(
                "size {}: hnsw ef_search {ef_search}: recall@{K} {recall:.4}, p50 {:.2} ms",
                data.size,
                latency.p50_ms()
            );
            settings.push(HnswSetting { ef_search, latency, recall, qps: None });
        }
        // Throughput at the first (the configured) ef_search; the run consumes the index.
        index.set_ef_search(plan.hnsw_ef_search[0]);
        settings[0].qps = Some(throughput(index, &data.queries, K, plan.searchers, plan.concurrent_run)?);
        hnsw = Some(HnswRun { m: params.m, ef_construction: params.ef_construction, build, settings });
    }
    Ok(SizeResults { size: data.size, exact, hnsw })
}

/// A new index holding every stored vector, loaded as the server loads at start.
fn load(kind: IndexKind, data: &Dataset, params: IndexParams) -> anyhow::Result<VectorIndex> {
    let mut index = VectorIndex::new(kind, data.dim, params)?;
    index.extend(&data.batch())?;
    Ok(index)
}
