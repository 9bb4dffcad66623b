//! The Rust client's and the `embedwire` CLI's integration tests against real servers,
//! in one test binary (each `tests/*.rs` file used to be its own executable). The
//! helpers are `tests/common`.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod embed;
mod reference;
mod rerank;
mod resilience;
mod search;
mod security;
