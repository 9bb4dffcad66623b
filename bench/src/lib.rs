//! embedwire-bench: benchmark programs for embedwire, and the helpers they share.
//! Each program measures the real server binary (and, for embed-bench, the model
//! in-process), prints a table of figures against targets, and writes CSV under
//! `bench/results/`. Targets are ratios measured in the same run, because the
//! machines they run on are small and shared.
//!
//! The programs are `src/bin/embed_bench` (embedding throughput, latency, memory,
//! cold start), `src/bin/search_bench` (ingest and search against Embed, on a real
//! text corpus), `src/bin/index_bench` (the vector index alone), `src/bin/ghz_suite`
//! (ghz runs of the checked-in configs under `bench/ghz/`), `src/bin/wire_bench`
//! (the same embeddings as gRPC bytes and dtypes against HTTP JSON, base64 and
//! octet-stream) and `src/bin/gateway_bench` (the /v1 HTTP contract under the
//! existing gateways' load pattern: embedwire against the Python baseline of
//! `bench/baseline/`, and HTTP search against gRPC Search) and `src/bin/store_bench`
//! (ingest and search on the embedded store against Weaviate clusters of 1 and 3
//! nodes, with the CPU each search and chunk costs in embedwire and in Weaviate) and
//! `src/bin/rerank_bench` (Rerank pairs/s and latency at concurrency 1..32, with the
//! cross-encoder against its in-process ceiling, and with the bi-encoder fallback).
//! `bench/run.sh` runs them all and `bench/report.py` turns their output into
//! `bench/results/REPORT.md`.
//!
//! # Layout
//! - [`server_binary`]: finds (or builds) the server binary to measure.
//! - [`server_process`]: one server process: its flags, spawn on 127.0.0.1:0 with a
//!   fresh data directory, address, health, stop.
//! - [`http_process`]: any HTTP gateway process (embedwire or the baseline), ready
//!   when /healthz says so; its cold start.
//! - [`http_client`]: one HTTP/1.1 keep-alive connection of a load worker.
//! - [`wire_count`]: TCP streams that count the bytes crossing them.
//! - [`load`]: closed-loop clients sending one text per Embed or Search call, and
//!   their latencies.
//! - [`closed_loop`]: closed-loop workers for any call, every call timed, errors
//!   counted.
//! - [`corpus`]: the real text corpus (Python docstrings found on this machine).
//! - [`ingest`]: documents through gRPC Ingest, followed to COMPLETED.
//! - [`memory`]: a process's RSS, once or sampled over a run.
//! - [`in_process`]: the in-process ceiling of any model the server batches: batches
//!   of several sizes run directly, no server in between.
//! - [`server_metrics`]: the server's /metrics counters, read before and after a run.
//! - [`latency`]: mean and percentiles.
//! - [`cpu`]: CPU time of a process and of each of its threads, from /proc.
//! - [`targets`]: figures against targets: the printed table and the summary CSV.
//! - [`weaviate_cluster`]: a Weaviate cluster of N nodes on loopback, started and
//!   stopped with `scripts/cluster.sh`; its addresses and node pids.

pub mod closed_loop;
pub mod corpus;
pub mod cpu;
pub mod http_client;
pub mod http_process;
pub mod in_process;
pub mod ingest;
pub mod latency;
pub mod load;
pub mod memory;
pub mod open_loop;
pub mod options;
pub mod report;
pub mod sentences;
pub mod server_binary;
pub mod server_metrics;
pub mod server_process;
pub mod targets;
pub mod weaviate_cluster;
pub mod wire_count;
