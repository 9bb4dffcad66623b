//! The embedwire wire contract, shared by the server, the HTTP gateway, the clients
//! and the benchmarks.
//!
//! # Layout
//! - [`v1`]: the generated `embedwire.v1` messages, tonic clients and servers.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors that server reflection serves,
//!   so grpcurl needs no `.proto` file.
//! - [`weaviate`]: a tonic client of Weaviate's gRPC API (`weaviate.v1`), generated
//!   from the protos vendored under `proto/weaviate/` at the pinned version.
//! - [`vectors`]: the byte encodings of embedding rows (f32, f16, int8, packed bits)
//!   and their decoding, one implementation for every peer.
//! - [`transport`]: HTTP/2 settings every peer uses (the DATA frame size), and the
//!   retry hint of a refusal (`grpc-retry-pushback-ms`) with its encode/decode helpers.

pub mod transport;
pub mod vectors;

/// The `embedwire.v1` package: messages, `*_client` and `*_server` modules.
pub mod v1 {
    tonic::include_proto!("embedwire.v1");
}

/// Weaviate's `weaviate.v1` package: messages and `weaviate_client`, for `--store weaviate`.
pub mod weaviate {
    #[allow(clippy::all, missing_docs)]
    pub mod v1 {
        tonic::include_proto!("weaviate.v1");
    }
}

/// The file descriptor set of every `embedwire.v1` proto file, for tonic-reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/embedwire_descriptor.bin"));
