//! The server's integration tests against the real model and the real binary, in one
//! test binary: each `tests/*.rs` file used to be its own executable that linked the
//! whole server (matklad, "Delete Cargo Integration Tests"). One module per area; the
//! helpers are `tests/common`. The cluster suites are modules of it too: `weaviate`
//! (3-node Weaviate clusters, `tests/weaviate/`) and `postgres` (a PostgreSQL primary and
//! a streaming replica, `tests/postgres/`). They were a binary of their own, which
//! compiled `tests/common` and the clients a second time (70 s on 2 cores); under
//! nextest every test is its own process and starts its own cluster, and
//! `.config/nextest.toml` runs the fault tests one at a time, in one lane.
//!
//! `make test` runs them with cargo-nextest (one process per test, groups in
//! `.config/nextest.toml`). Under plain `cargo test` the cluster tests of a kind share one
//! cluster (`WeaviateCluster::shared`, `PostgresCluster::shared`) and the fault tests kill
//! its nodes: run the rest with `cargo test --release -p embedwire-server-it --test it --
//! --skip weaviate:: --skip postgres::`, and one kind at a time with `... --test it
//! weaviate:: -- --test-threads=1`.

#[path = "../common/mod.rs"]
mod common;

mod access;
mod bad_input;
mod collections;
mod crash;
mod custom_model;
mod embed_rpc;
mod external_clients;
mod hnsw;
mod keyword_index;
mod lifecycle;
mod metrics;
#[path = "../postgres/mod.rs"]
mod postgres;
mod precision;
mod reference;
mod rerank;
mod rerank_reference;
mod rerank_rpc;
mod rerank_search;
mod search;
mod stream;
mod tls;
#[path = "../weaviate/mod.rs"]
mod weaviate;
