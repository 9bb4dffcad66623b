//! The `--store weaviate` suites, one binary for the cluster kind: the test cluster
//! itself, the shared-store contract and the faults. Each starts real 3-node Weaviate
//! clusters (`common::weaviate`), so `.config/nextest.toml` runs this binary one test at
//! a time.
//!
//! Under nextest every test is its own process and starts its own cluster. Under
//! `cargo test --test weaviate` the tests of the binary share one cluster
//! (`WeaviateCluster::shared`) and the faults kill its nodes: run it there with
//! `--test-threads=1`.

#[path = "../common/mod.rs"]
mod common;

mod make_cluster;
mod weaviate_cluster;
mod weaviate_faults;
mod weaviate_store;
