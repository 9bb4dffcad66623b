//! Bounded fuzzing, run by the tests (`PROPTEST_CASES=100000` for a longer run):
//! - the JSON body parser on arbitrary text and arbitrary JSON trees never panics, and
//!   every refusal names a field;
//! - a live server fed arbitrary bytes as gRPC messages (random, and mutations of valid
//!   requests) and arbitrary JSON on every HTTP route never answers 5xx and stays
//!   healthy and correct afterwards.

use crate::common;

use embedwire_gateway_http::json::parse;
use embedwire_gateway_http::routes::{embed::EmbedBody, openai::EmbeddingsBody, v1::IngestBody, v1::SearchBody};
use embedwire_proto::v1::{EmbedRequest, SearchQuery, SearchRequest, search_query};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use prost::Message;
use serde_json::Value;

fn cases(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// Arbitrary JSON trees, with the routes' own field names mixed in so that the fuzzer
/// reaches past the first missing field.
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("documents".to_string()),
        Just("text".to_string()),
        Just("texts".to_string()),
        Just("id".to_string()),
        Just("metadata".to_string()),
        Just("query".to_string()),
        Just("top_k".to_string()),
        Just("filter".to_string()),
        Just("must".to_string()),
        Just("input".to_string()),
        Just("dimensions".to_string()),
        Just("encoding_format".to_string()),
        "[a-z_]{1,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn check_parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) {
    if let Err(error) = parse::<T>(bytes) {
        assert!(error.field.as_deref().is_some_and(|f| !f.is_empty()), "a refusal names a field: {error:?}");
        assert!(!error.message.is_empty());
    }
}

#[test]
fn json_bodies_never_panic_and_refusals_name_a_field() {
    let mut runner = TestRunner::new(cases(512));
    runner
        .run(
            &prop_oneof![
                json_value().prop_map(|v| v.to_string().into_bytes()),
                prop::collection::vec(any::<u8>(), 0..200)
            ],
            |bytes| {
                check_parse::<IngestBody>(&bytes);
                check_parse::<SearchBody>(&bytes);
                check_parse::<EmbedBody>(&bytes);
                check_parse::<EmbeddingsBody>(&bytes);
                Ok(())
            },
        )
        .unwrap();
}

/// A gRPC frame (uncompressed) around `payload`.
fn frame(payload: &[u8]) -> Vec<u8> {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    framed.extend_from_slice(payload);
    framed
}

const METHODS: [&str; 8] = [
    "/embedwire.v1.EmbedService/Embed",
    "/embedwire.v1.EmbedService/Tokenize",
    "/embedwire.v1.SearchService/Search",
    "/embedwire.v1.SearchService/Ingest",
    "/embedwire.v1.SearchService/GetJob",
    "/embedwire.v1.SearchService/GetDocuments",
    "/embedwire.v1.SearchService/DeleteDocuments",
    "/embedwire.v1.SearchService/SearchStream",
];

const ROUTES: [&str; 5] = ["/v1/ingest", "/v1/search", "/embed", "/v1/embeddings", "/v1/jobs/x"];

/// Valid requests whose bytes the fuzzer mutates.
fn seeds() -> Vec<Vec<u8>> {
    let embed =
        EmbedRequest { inputs: vec!["hello world".into(), "two".into()], dimensions: Some(8), ..Default::default() };
    let search = SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Text("hello".into())) }],
        top_k: Some(3),
        ..Default::default()
    };
    vec![embed.encode_to_vec(), search.encode_to_vec()]
}

#[derive(Debug, Clone)]
enum Case {
    Grpc { method: usize, payload: Vec<u8> },
    Http { route: usize, body: Vec<u8> },
}

fn case() -> impl Strategy<Value = Case> {
    let seeds = seeds();
    let mutated = (0..seeds.len(), prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)).prop_map(
        move |(seed, flips)| {
            let mut bytes = seeds[seed].clone();
            for (index, value) in flips {
                let at = index.index(bytes.len());
                bytes[at] = value;
            }
            bytes
        },
    );
    prop_oneof![
        (0..METHODS.len(), prop::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(method, payload)| Case::Grpc { method, payload }),
        (0..METHODS.len(), mutated).prop_map(|(method, payload)| Case::Grpc { method, payload }),
        (0..ROUTES.len(), json_value().prop_map(|v| v.to_string().into_bytes()))
            .prop_map(|(route, body)| Case::Http { route, body }),
    ]
}

#[test]
fn a_live_server_survives_arbitrary_grpc_messages_and_json() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(common::pseudo_server());
    let base = server.url.clone();
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let h1 = common::http();
    let mut runner = TestRunner::new(cases(384));
    runner
        .run(&case(), |case| {
            let status = runtime.block_on(async {
                match &case {
                    Case::Grpc { method, payload } => h2
                        .post(format!("{base}{}", METHODS[*method]))
                        .header("content-type", "application/grpc")
                        .header("te", "trailers")
                        .body(frame(payload))
                        .send()
                        .await
                        .map(|r| r.status().as_u16()),
                    Case::Http { route, body } => {
                        let method = if ROUTES[*route].starts_with("/v1/jobs") {
                            reqwest::Method::GET
                        } else {
                            reqwest::Method::POST
                        };
                        h1.request(method, format!("{base}{}", ROUTES[*route]))
                            .body(body.clone())
                            .send()
                            .await
                            .map(|r| r.status().as_u16())
                    }
                }
            });
            let status = status.map_err(|e| TestCaseError::fail(format!("{case:?}: no answer: {e}")))?;
            prop_assert!(status < 500, "{case:?} answered {status}");
            Ok(())
        })
        .unwrap();

    // Still healthy, and still right.
    runtime.block_on(async {
        let (status, health) = common::get(&format!("{base}/healthz")).await;
        assert_eq!(status, 200, "{health}");
        let (status, body) =
            common::post(&format!("{base}/embed"), &serde_json::json!({"texts": ["after fuzzing"]})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["embeddings"][0].as_array().unwrap().len(), 384);
    });
    drop(server);
}
