//! The figures: one line per store (throughput, latency, CPU per unit of work), the
//! targets table, and two CSV files: `store_bench.csv` (every figure, with PASS/MISS
//! where it has a target) and `store_bench_stores.csv` (one row per store, what the
//! capacity model is computed from).
//!
//! Both targets are ratios to the embedded store measured in the same run on the
//! same corpus and queries, so a busy machine moves both sides together.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use embedwire_bench::ingest::IngestRun;
use embedwire_bench::latency::ms;
use embedwire_bench::load::LoadResult;
use embedwire_bench::memory::mib;
use embedwire_bench::targets::{self, Bound, Row};

use crate::cost::{Cost, ms_per};

/// Ingest documents/s on the largest Weaviate cluster at least this fraction of the
/// embedded store's.
const MIN_INGEST_RATIO: f64 = 0.8;
/// Searches/s at concurrency 16 on the largest Weaviate cluster at least this
/// fraction of the embedded store's.
const MIN_SEARCH_RATIO: f64 = 0.7;

/// How the run was set up, recorded next to its figures.
#[derive(Debug, Clone)]
pub struct RunSetup {
    pub quick: bool,
    pub documents: usize,
    pub queries: usize,
    pub slices: usize,
    pub rounds: usize,
    pub ingest_batch: usize,
    pub clients: usize,
    pub top_k: u32,
    pub intra_op_threads: usize,
    /// Extra server flags.
    pub server_args: Vec<String>,
    /// The machine's load averages at the end of the run.
    pub load_average: String,
}

/// A Weaviate collection's layout and consistency, as the server runs it.
#[derive(Debug, Clone)]
pub struct Layout {
    pub nodes: usize,
    pub shards: usize,
    pub replication_factor: usize,
    pub write: String,
    pub read: String,
}

/// What one store did.
#[derive(Debug, Clone)]
pub struct StoreResult {
    /// `embedded`, `weaviate 1 node`, `weaviate 3 nodes`.
    pub label: String,
    /// None for the embedded store.
    pub layout: Option<Layout>,
    pub ingest: IngestRun,
    pub ingest_cost: Cost,
    /// What the index held after the ingest, as the server counts it.
    pub documents: u64,
    pub chunks: u64,
    /// RSS of the server plus its nodes after the ingest.
    pub rss_after_ingest: u64,
    /// The Weaviate nodes' data on disk after the ingest (None for embedded).
    pub data_bytes: Option<u64>,
    pub search: LoadResult,
    pub search_cost: Cost,
}

/// The whole run.
#[derive(Debug, Clone)]
pub struct Results {
    pub setup: RunSetup,
    /// The embedded store first, then the clusters by size.
    pub stores: Vec<StoreResult>,
}

impl StoreResult {
    /// Embedwire server CPU-ms per chunk ingested.
    pub fn server_ms_per_chunk(&self) -> f64 {
        ms_per(self.ingest_cost.server, self.chunks)
    }

    /// Weaviate CPU-ms (all nodes) per chunk ingested.
    pub fn store_ms_per_chunk(&self) -> f64 {
        ms_per(self.ingest_cost.store, self.chunks)
    }

    /// Embedwire server CPU-ms per search.
    pub fn server_ms_per_search(&self) -> f64 {
        ms_per(self.search_cost.server, self.search.calls as u64)
    }

    /// Weaviate CPU-ms (all nodes) per search.
    pub fn store_ms_per_search(&self) -> f64 {
        ms_per(self.search_cost.store, self.search.calls as u64)
    }

    /// This store's ingest rate relative to `base` if both were bound by CPU alone,
    /// the nodes on the same cores as the server: the ratio of their CPU per chunk.
    /// The machine's other load does not move it, unlike the measured rates.
    pub fn cpu_bound_ingest_ratio(&self, base: &StoreResult) -> f64 {
        (base.server_ms_per_chunk() + base.store_ms_per_chunk())
            / (self.server_ms_per_chunk() + self.store_ms_per_chunk()).max(1e-9)
    }

    /// The same for searches.
    pub fn cpu_bound_search_ratio(&self, base: &StoreResult) -> f64 {
        (base.server_ms_per_search() + base.store_ms_per_search())
            / (self.server_ms_per_search() + self.store_ms_per_search()).max(1e-9)
    }
}

impl Results {
    fn embedded(&self) -> &StoreResult {
        &self.stores[0]
    }

    /// The store the targets are judged on: the largest cluster.
    fn judged(&self) -> Option<&StoreResult> {
        self.stores.iter().filter(|s| s.layout.is_some()).max_by_key(|s| s.layout.as_ref().map(|l| l.nodes))
    }
}

/// One line per store, with its ratios to the embedded store.
pub fn stores_table(results: &Results) -> String {
    let base = results.embedded();
    let mut out = format!(
        "{:<17} {:>9} {:>6} {:>10} {:>6} {:>8} {:>8} {:>22} {:>22} {:>14}\n",
        "store",
        "ingest/s",
        "x",
        "search/s",
        "x",
        "p50 ms",
        "p99 ms",
        "CPU-ms/chunk ew + wv",
        "CPU-ms/search ew + wv",
        "outside cores"
    );
    for store in &results.stores {
        let _ = writeln!(
            out,
            "{:<17} {:>9.1} {:>6.2} {:>10.1} {:>6.2} {:>8.1} {:>8.1} {:>22} {:>22} {:>14}",
            store.label,
            store.ingest.rate(),
            store.ingest.rate() / base.ingest.rate(),
            store.search.rate(),
            store.search.rate() / base.search.rate(),
            ms(store.search.latency.p50),
            ms(store.search.latency.p99),
            format!("{:.2} + {:.2}", store.server_ms_per_chunk(), store.store_ms_per_chunk()),
            format!("{:.2} + {:.2}", store.server_ms_per_search(), store.store_ms_per_search()),
            format!(
                "{:.2} / {:.2}",
                store.ingest_cost.cores(store.ingest_cost.outside()),
                store.search_cost.cores(store.search_cost.outside())
            )
        );
    }
    out.push_str(
        "(ew = embedwire server, wv = Weaviate, all nodes; outside cores: the machine's busy time that no process \
         of the bench accounts for, during ingest / search)\n",
    );
    out
}

/// The targets table as printed.
pub fn table(results: &Results) -> String {
    targets::table(&rows(results))
}

/// Every figure, those with a target judged.
pub fn rows(results: &Results) -> Vec<Row> {
    let setup = &results.setup;
    let base = results.embedded();
    let judged = results.judged().map(|s| s.label.clone());
    let mut rows = vec![
        Row::info("corpus documents", setup.documents as f64, "docs", setup.documents.to_string()),
        Row::info("query texts", setup.queries as f64, "queries", setup.queries.to_string()),
    ];
    for store in &results.stores {
        let label = &store.label;
        let ingest = store.ingest.rate();
        let search = store.search.rate();
        rows.push(Row::info(format!("{label}: index chunks"), store.chunks as f64, "chunks", store.chunks.to_string()));
        rows.push(Row::info(
            format!("{label}: ingest ({} docs/call, to COMPLETED)", setup.ingest_batch),
            ingest,
            "docs/s",
            format!("{ingest:.1} docs/s ({:.1} s)", store.ingest.completed.as_secs_f64()),
        ));
        rows.push(Row::info(
            format!("{label}: search c={} (top_k {})", setup.clients, setup.top_k),
            search,
            "searches/s",
            format!("{search:.1}/s ({} calls)", store.search.calls),
        ));
        rows.push(Row::info(
            format!("{label}: search c={} p50 / p99", setup.clients),
            ms(store.search.latency.p99),
            "ms",
            format!("{:.1} / {:.1} ms", ms(store.search.latency.p50), ms(store.search.latency.p99)),
        ));
        for (what, value) in [
            ("CPU per chunk, embedwire", store.server_ms_per_chunk()),
            ("CPU per chunk, weaviate", store.store_ms_per_chunk()),
            ("CPU per search, embedwire", store.server_ms_per_search()),
            ("CPU per search, weaviate", store.store_ms_per_search()),
        ] {
            rows.push(Row::info(format!("{label}: {what}"), value, "CPU-ms", format!("{value:.2} ms")));
        }
        for (phase, cost) in [("ingest", &store.ingest_cost), ("search", &store.search_cost)] {
            let outside = cost.cores(cost.outside());
            rows.push(Row::info(
                format!("{label}: load outside the bench during {phase}"),
                outside,
                "cores",
                format!("{outside:.2} cores (other stores {:.2})", cost.cores(cost.others)),
            ));
        }
        rows.push(Row::info(
            format!("{label}: RSS after ingest (server + nodes)"),
            mib(store.rss_after_ingest),
            "MiB",
            format!("{:.0} MiB", mib(store.rss_after_ingest)),
        ));
        if let Some(bytes) = store.data_bytes {
            rows.push(Row::info(
                format!("{label}: data on disk (all nodes)"),
                mib(bytes),
                "MiB",
                format!("{:.0} MiB", mib(bytes)),
            ));
        }
        if store.layout.is_none() {
            continue;
        }
        let ingest_ratio = ingest / base.ingest.rate();
        let search_ratio = search / base.search.rate();
        let ingest_note = format!(
            "CPU-ms/chunk {:.2} + {:.2} vs {:.2}",
            store.server_ms_per_chunk(),
            store.store_ms_per_chunk(),
            base.server_ms_per_chunk()
        );
        let search_note = format!(
            "CPU-ms/search {:.2} + {:.2} vs {:.2}",
            store.server_ms_per_search(),
            store.store_ms_per_search(),
            base.server_ms_per_search()
        );
        let measured = |ratio: f64| format!("{ratio:.2} x");
        for (what, ratio) in
            [("ingest", store.cpu_bound_ingest_ratio(base)), ("search", store.cpu_bound_search_ratio(base))]
        {
            rows.push(Row::info(
                format!("{label} / embedded: {what} if bound by CPU (ratio of CPU per unit)"),
                ratio,
                "x",
                measured(ratio),
            ));
        }
        if judged.as_ref() == Some(label) {
            rows.push(
                Row::judged(
                    format!("{label} / embedded: ingest docs/s"),
                    ingest_ratio,
                    "x",
                    measured(ingest_ratio),
                    Bound::AtLeast(MIN_INGEST_RATIO),
                    format!(">= {MIN_INGEST_RATIO:.1} x"),
                )
                .with_note(ingest_note),
            );
            rows.push(
                Row::judged(
                    format!("{label} / embedded: search/s c={}", setup.clients),
                    search_ratio,
                    "x",
                    measured(search_ratio),
                    Bound::AtLeast(MIN_SEARCH_RATIO),
                    format!(">= {MIN_SEARCH_RATIO:.1} x"),
                )
                .with_note(search_note),
            );
        } else {
            rows.push(Row::info(
                format!("{label} / embedded: ingest docs/s"),
                ingest_ratio,
                "x",
                measured(ingest_ratio),
            ));
            rows.push(Row::info(
                format!("{label} / embedded: search/s c={}", setup.clients),
                search_ratio,
                "x",
                measured(search_ratio),
            ));
        }
    }
    rows
}

/// One row per store: every figure the capacity model needs.
pub fn stores_csv(results: &Results) -> String {
    let base = results.embedded();
    let mut out = String::from(
        "store,nodes,shards,replication_factor,write_consistency,read_consistency,documents,chunks,ingest_s,\
         ingest_docs_per_s,ingest_ratio,ingest_server_cpu_s,ingest_weaviate_cpu_s,ingest_server_cpu_ms_per_chunk,\
         ingest_weaviate_cpu_ms_per_chunk,ingest_bench_cores,ingest_other_stores_cores,ingest_outside_cores,searches,\
         search_s,search_per_s,search_ratio,search_p50_ms,search_p95_ms,search_p99_ms,search_server_cpu_ms_per_search,\
         search_weaviate_cpu_ms_per_search,search_bench_cores,search_other_stores_cores,search_outside_cores,\
         ingest_cpu_bound_ratio,search_cpu_bound_ratio,rss_after_ingest_mib,weaviate_data_mib\n",
    );
    for s in &results.stores {
        let layout = s.layout.as_ref();
        let (i, q) = (&s.ingest_cost, &s.search_cost);
        let fields: Vec<String> = vec![
            targets::csv_field(&s.label),
            layout.map_or(0, |l| l.nodes).to_string(),
            layout.map_or(String::new(), |l| l.shards.to_string()),
            layout.map_or(String::new(), |l| l.replication_factor.to_string()),
            layout.map_or(String::new(), |l| l.write.clone()),
            layout.map_or(String::new(), |l| l.read.clone()),
            s.documents.to_string(),
            s.chunks.to_string(),
            format!("{:.3}", s.ingest.completed.as_secs_f64()),
            format!("{:.2}", s.ingest.rate()),
            format!("{:.3}", s.ingest.rate() / base.ingest.rate()),
            format!("{:.3}", i.server.as_secs_f64()),
            format!("{:.3}", i.store.as_secs_f64()),
            format!("{:.3}", s.server_ms_per_chunk()),
            format!("{:.3}", s.store_ms_per_chunk()),
            format!("{:.3}", i.cores(i.bench)),
            format!("{:.3}", i.cores(i.others)),
            format!("{:.3}", i.cores(i.outside())),
            s.search.calls.to_string(),
            format!("{:.3}", s.search.elapsed.as_secs_f64()),
            format!("{:.2}", s.search.rate()),
            format!("{:.3}", s.search.rate() / base.search.rate()),
            format!("{:.3}", ms(s.search.latency.p50)),
            format!("{:.3}", ms(s.search.latency.p95)),
            format!("{:.3}", ms(s.search.latency.p99)),
            format!("{:.3}", s.server_ms_per_search()),
            format!("{:.3}", s.store_ms_per_search()),
            format!("{:.3}", q.cores(q.bench)),
            format!("{:.3}", q.cores(q.others)),
            format!("{:.3}", q.cores(q.outside())),
            format!("{:.3}", s.cpu_bound_ingest_ratio(base)),
            format!("{:.3}", s.cpu_bound_search_ratio(base)),
            format!("{:.1}", mib(s.rss_after_ingest)),
            s.data_bytes.map_or(String::new(), |b| format!("{:.1}", mib(b))),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// Rows that only the CSV carries: how the run was set up.
fn setup_rows(setup: &RunSetup) -> Vec<Row> {
    let info = |figure: String, value: f64, unit: &'static str| Row::info(figure, value, unit, String::new());
    let load_1min = setup.load_average.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(f64::NAN);
    vec![
        info("setup quick".into(), f64::from(u8::from(setup.quick)), "bool"),
        info("setup slices".into(), setup.slices as f64, "slices"),
        info("setup rounds".into(), setup.rounds as f64, "rounds"),
        info("setup ingest_batch".into(), setup.ingest_batch as f64, "documents"),
        info("setup clients".into(), setup.clients as f64, "clients"),
        info("setup intra_op_threads".into(), setup.intra_op_threads as f64, "threads"),
        info(format!("setup server_args [{}]", setup.server_args.join(" ")), setup.server_args.len() as f64, "flags"),
        info(format!("setup load average at end [{}]", setup.load_average), load_1min, "1-min load"),
    ]
}

/// Writes `store_bench.csv` and `store_bench_stores.csv` into `dir`.
pub fn write_csv(dir: &Path, results: &Results) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut all = rows(results);
    all.extend(setup_rows(&results.setup));
    let summary = targets::summary_csv(&all);
    let paths = [(dir.join("store_bench.csv"), summary), (dir.join("store_bench_stores.csv"), stores_csv(results))];
    for (path, text) in &paths {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(paths.into_iter().map(|(path, _)| path).collect())
}
