//! The `--store weaviate` suites (module `weaviate` of the server's `it` test binary): the
//! test cluster itself, the shared-store contract and the faults. Each starts real
//! 3-node Weaviate clusters (`common::weaviate`); `.config/nextest.toml` runs the fault
//! tests one at a time.

mod make_cluster;
mod weaviate_cluster;
mod weaviate_faults;
mod weaviate_store;
