//! The `--store postgres` suites, one binary for the cluster kind: the test cluster
//! itself (primary and streaming replica), the shared-store contract and the faults.
//! Each starts real PostgreSQL servers (`common::postgres`), so `.config/nextest.toml`
//! runs this binary one test at a time.
//!
//! Under nextest every test is its own process and starts its own cluster. Under
//! `cargo test --test postgres` the tests of the binary share one cluster
//! (`PostgresCluster::shared`) and the faults stop its servers: run it there with
//! `--test-threads=1`.

#[path = "../common/mod.rs"]
mod common;

mod postgres_cluster;
mod postgres_faults;
mod postgres_store;
