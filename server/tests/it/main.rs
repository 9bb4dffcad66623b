//! The server's integration tests against the real model and the real binary, in one
//! test binary: each `tests/*.rs` file used to be its own executable that linked the
//! whole server (matklad, "Delete Cargo Integration Tests"). One module per area; the
//! helpers are `tests/common`, shared with the cluster suites. The suites that start an
//! external cluster are one binary of their own: `tests/clusters`.
//!
//! `make test` runs them with cargo-nextest (one process per test, groups in
//! `.config/nextest.toml`); `cargo test --release -p embedwire-server --test it` works too.

#[path = "../common/mod.rs"]
mod common;

mod access;
mod bad_input;
mod crash;
mod custom_model;
mod embed_rpc;
mod external_clients;
mod keyword_index;
mod lifecycle;
mod metrics;
mod precision;
mod reference;
mod rerank;
mod rerank_reference;
mod rerank_rpc;
mod rerank_search;
mod search;
mod stream;
mod tls;
