//! embedwire-bench: the benchmark harness of embedwire. The binary (`src/main.rs`) has one subcommand per scenario
//! (`src/scenarios/`); this library is the engine they share. Each scenario measures the real server binary (and, where
//! a target needs it, the same model in-process) and prints its figures against targets that are ratios measured in the
//! same run, because the machines are small and shared. `bench/README.md` says how to add a scenario.
//!
//! # Layout
//! - [`options`]: the options of every scenario, and what they resolve to.
//! - [`report`]: figures against their targets and tables, printed and written as CSV, JSON and markdown.
//! - [`server_binary`], [`child_process`], [`server_process`], [`http_process`], [`store_cluster`]: start and stop what
//!   is measured (the server, an HTTP gateway, a Weaviate or PostgreSQL cluster), cold starts timed the same way.
//! - [`closed_loop`], [`open_loop`], [`load`]: the load engines (next call on an
//!   answer, or on a schedule) and the one-text Embed and Search clients on them.
//! - [`http_client`], [`wire_count`]: HTTP/1.1 connections, bytes counted on the wire.
//! - [`in_process`]: the in-process ceiling of any model the server batches.
//! - [`latency`], [`memory`], [`cpu`], [`server_metrics`]: percentiles, RSS, CPU by
//!   process and thread, the server's /metrics.
//! - [`corpus`], [`sentences`], [`ingest`]: inputs, and ingest to completion.

pub mod beir;
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
pub mod wire_count;
