//! The `--store postgres` suites (module `postgres` of the server's `it` test binary): the
//! test cluster itself (primary and streaming replica), the shared-store contract and
//! the faults. Each starts real PostgreSQL servers (`common::postgres`);
//! `.config/nextest.toml` runs the fault tests one at a time.

mod postgres_cluster;
mod postgres_faults;
mod postgres_store;
