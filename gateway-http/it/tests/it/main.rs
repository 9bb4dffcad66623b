//! The gateway's integration tests, in one test binary (each `tests/*.rs` file used to
//! be its own executable): the HTTP contract, the OpenAI SDK, the OpenAPI document, the
//! rerank routes, the search page in Chromium, the split deployment, collections through the gateway and bounded fuzzing.
//! The helpers are `tests/common`.

#[path = "../common/mod.rs"]
mod common;

mod collections;
mod fuzz;
mod http_contract;
mod openai_sdk;
mod openapi;
mod rerank_http;
mod search_page;
mod split_deployment;
