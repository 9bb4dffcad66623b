//! gRPC service implementations: thin handlers that convert with `wire` and call the
//! engine.
//!
//! # Layout
//! - [`embed`]: `embedwire.v1.EmbedService` (Embed, EmbedStream, Tokenize, Info).
//! - [`search`]: `embedwire.v1.SearchService` (ingest, jobs, documents, search).

pub mod embed;
pub mod search;
