//! The suites that start external clusters, in one test binary: `weaviate` (3-node
//! Weaviate clusters, `server/tests/weaviate/`) and `postgres` (a PostgreSQL primary and
//! a streaming replica, `server/tests/postgres/`). They were a binary per cluster kind;
//! each linked the whole server and its own copy of `tests/common` (about 70 s of
//! compiling apiece on 2 cores), and nothing needs them apart: under nextest every test
//! is its own process and starts its own cluster, and `.config/nextest.toml` runs the
//! fault tests of both kinds one at a time, in one lane.
//!
//! Under plain `cargo test` the tests of a kind share one cluster (`WeaviateCluster::shared`,
//! `PostgresCluster::shared`) and the fault tests kill its nodes: run one kind at a time
//! with `cargo test --release -p embedwire-server --test clusters weaviate:: -- --test-threads=1`.

#[path = "../common/mod.rs"]
mod common;

#[path = "../postgres/mod.rs"]
mod postgres;
#[path = "../weaviate/mod.rs"]
mod weaviate;
