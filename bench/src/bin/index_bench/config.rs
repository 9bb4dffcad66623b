//! The flags, and the amounts of work of a full or `--quick` run. Flags left unset
//! get the full or the quick default in [`BenchConfig::plan`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// Measures exact and HNSW vector search on synthetic clustered embeddings.
#[derive(Debug, Parser)]
#[command(name = "index-bench")]
pub struct BenchConfig {
    /// A run of a few seconds at small sizes: for checking the bench, not the index.
    #[arg(long, env = "INDEX_BENCH_QUICK")]
    pub quick: bool,
    /// Collection sizes, comma-separated [default: 100000,1000000; --quick: 5000].
    #[arg(long, env = "INDEX_BENCH_SIZES", value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Queries timed one at a time [default: 200; --quick: 50].
    #[arg(long, env = "INDEX_BENCH_QUERIES")]
    pub queries: Option<usize>,
    /// Vector dimension (384 for the default model).
    #[arg(long, env = "INDEX_BENCH_DIM", default_value_t = 384)]
    pub dim: usize,
    /// Cluster centers the vectors scatter around.
    #[arg(long, env = "INDEX_BENCH_CLUSTERS", default_value_t = 1000)]
    pub clusters: usize,
    /// Norm of the noise added to a center (0.9: cosine ~0.75 to the center).
    #[arg(long, env = "INDEX_BENCH_SPREAD", default_value_t = 0.9)]
    pub spread: f32,
    /// Directions each cluster's noise mostly spans (its intrinsic dimension); 0 for
    /// isotropic noise in all `dim` dimensions, the worst case for HNSW.
    #[arg(long, env = "INDEX_BENCH_NOISE_RANK", default_value_t = 16)]
    pub noise_rank: usize,
    /// Seed of the vectors (the queries use the next seed).
    #[arg(long, env = "INDEX_BENCH_SEED", default_value_t = 42)]
    pub seed: u64,
    /// Skip HNSW (its build dominates the run time at 1M).
    #[arg(long, env = "INDEX_BENCH_NO_HNSW")]
    pub no_hnsw: bool,
    /// HNSW links per node and layer [default: the server's].
    #[arg(long, env = "INDEX_BENCH_HNSW_M")]
    pub hnsw_m: Option<usize>,
    /// HNSW search width while building [default: the server's].
    #[arg(long, env = "INDEX_BENCH_HNSW_EF_CONSTRUCTION")]
    pub hnsw_ef_construction: Option<usize>,
    /// HNSW search widths to measure, comma-separated; the first one also gets the
    /// throughput run [default: the server's, then 64,256,512].
    #[arg(long, env = "INDEX_BENCH_HNSW_EF_SEARCH", value_delimiter = ',')]
    pub hnsw_ef_search: Vec<usize>,
    /// Seconds of each run with concurrent searchers [default: 3; --quick: 0.5].
    #[arg(long, env = "INDEX_BENCH_CONCURRENT_SECS")]
    pub concurrent_secs: Option<f64>,
    /// Searchers sharing the index in the throughput runs.
    #[arg(long, env = "INDEX_BENCH_SEARCHERS", default_value_t = 2)]
    pub searchers: usize,
    /// Where `index_bench.csv` goes.
    #[arg(long, env = "INDEX_BENCH_RESULTS_DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub results_dir: PathBuf,
}

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    pub sizes: Vec<usize>,
    pub queries: usize,
    pub dim: usize,
    pub clusters: usize,
    pub spread: f32,
    pub noise_rank: usize,
    pub seed: u64,
    pub hnsw: bool,
    pub hnsw_m: usize,
    pub hnsw_ef_construction: usize,
    /// Never empty; the first is the one the throughput run uses.
    pub hnsw_ef_search: Vec<usize>,
    pub concurrent_run: Duration,
    pub searchers: usize,
}

impl BenchConfig {
    /// The amounts of work: explicit flags win, then the full or quick defaults.
    pub fn plan(&self) -> Plan {
        let defaults = embedwire_server::index::IndexParams::default();
        let sizes = match (&self.sizes[..], self.quick) {
            ([], true) => vec![5_000],
            ([], false) => vec![100_000, 1_000_000],
            (sizes, _) => sizes.to_vec(),
        };
        let hnsw_ef_search = match &self.hnsw_ef_search[..] {
            [] if self.quick => vec![defaults.ef_search],
            [] => vec![defaults.ef_search, 64, 256, 512],
            given => given.to_vec(),
        };
        Plan {
            quick: self.quick,
            sizes,
            queries: self.queries.unwrap_or(if self.quick { 50 } else { 200 }).max(1),
            dim: self.dim,
            clusters: self.clusters,
            spread: self.spread,
            noise_rank: self.noise_rank,
            seed: self.seed,
            hnsw: !self.no_hnsw,
            hnsw_m: self.hnsw_m.unwrap_or(defaults.m),
            hnsw_ef_construction: self.hnsw_ef_construction.unwrap_or(defaults.ef_construction),
            hnsw_ef_search,
            concurrent_run: Duration::from_secs_f64(self.concurrent_secs.unwrap_or(if self.quick { 0.5 } else { 3.0 })),
            searchers: self.searchers.max(1),
        }
    }
}
