//! embedwire-bench: benchmark programs for embedwire, and the helpers they share.
//! Each program measures the real server binary (and, for embed-bench, the model
//! in-process), prints a table of figures against targets, and writes CSV under
//! `bench/results/`. Targets are ratios measured in the same run, because the
//! machines they run on are small and shared.
//!
//! The programs are `src/bin/embed_bench` (embedding throughput, latency, memory,
//! cold start), `src/bin/search_bench` (ingest and search against Embed, on a real
//! text corpus) and `src/bin/index_bench` (the vector index alone).
//!
//! # Layout
//! - [`server_binary`]: finds (or builds) the server binary to measure.
//! - [`server_process`]: one server process: its flags, spawn on 127.0.0.1:0 with a
//!   fresh data directory, address, health, stop.
//! - [`load`]: closed-loop clients sending one text per Embed or Search call, and
//!   their latencies.
//! - [`latency`]: mean and percentiles.
//! - [`cpu`]: CPU time of a process and of each of its threads, from /proc.
//! - [`targets`]: figures against targets: the printed table and the summary CSV.

pub mod cpu;
pub mod latency;
pub mod load;
pub mod server_binary;
pub mod server_process;
pub mod targets;
