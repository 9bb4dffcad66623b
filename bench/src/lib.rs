//! embedwire-bench: the benchmark harness of embedwire. The binary (`src/main.rs`)
//! has one subcommand per scenario (`src/scenarios/`, registered by one line each);
//! this library is the engine they share: common options, starting and stopping what
//! is measured, the load engines, and the result model. Each scenario measures the
//! real server binary (and, where a target needs it, the same model in-process),
//! prints its figures against their targets and writes CSV, JSON and markdown under
//! `bench/results/`. Targets are ratios measured in the same run, because the
//! machines this runs on are small and shared. `bench/run.sh` runs the scenarios of
//! `make bench` and `bench/report.py` turns their files into
//! `bench/results/REPORT.md`; `bench/README.md` explains how to add a scenario.
//!
//! # Layout
//! - [`options`]: the options every scenario flattens in, and what they resolve to.
//! - [`report`]: the result model: figures, tables, environment; CSV, JSON, markdown.
//! - [`targets`]: a figure against its target, the printed table, the summary CSV.
//! - [`server_binary`]: finds (or builds) the server binary to measure.
//! - [`child_process`]: any process a bench starts: spawned, its address read from
//!   its log, ready when a probe says so, its last log lines, stopped by pid; helper
//!   commands run to their end.
//! - [`server_process`]: one server process: its flags, spawn on 127.0.0.1:0 with a
//!   fresh data directory, health, gRPC connections.
//! - [`http_process`]: any HTTP gateway process (embedwire or the baseline), ready
//!   when /healthz says so; its cold start.
//! - [`http_client`]: one HTTP/1.1 keep-alive connection of a load worker.
//! - [`wire_count`]: TCP streams that count the bytes crossing them; a gRPC channel
//!   over them and a codec sending a request encoded once.
//! - [`closed_loop`]: the closed-loop engine: workers for any call, every call
//!   timed, errors counted.
//! - [`load`]: one text per Embed or Search call, in a closed loop (workers of
//!   [`closed_loop`]) or paced; a failed call fails the run.
//! - [`open_loop`]: calls at a fixed rate, latency apart from the generator's lag,
//!   refusals apart from failures.
//! - [`corpus`]: the real text corpus (Python docstrings found on this machine).
//! - [`sentences`]: generated sentences, the same on every machine.
//! - [`ingest`]: documents through gRPC Ingest, followed to COMPLETED.
//! - [`memory`]: a process's RSS, once or sampled over a run.
//! - [`in_process`]: the in-process ceiling of any model the server batches: batches
//!   of several sizes run directly, no server in between.
//! - [`server_metrics`]: the server's /metrics counters, read before and after a run.
//! - [`latency`]: mean and percentiles; the median time of work too short to time once.
//! - [`cpu`]: CPU time of a process and of each of its threads, from /proc.
//! - [`store_cluster`]: a Weaviate cluster of N nodes or a PostgreSQL primary with a
//!   replica on loopback, started and stopped with `scripts/cluster.sh`; its server
//!   flags and pids.

pub mod child_process;
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
pub mod store_cluster;
pub mod targets;
pub mod wire_count;
