//! The rerank routes against real servers: `/rerank` (text-embeddings-inference's
//! shape), `/v1/rerank` (Cohere v1 / Jina) and `/v2/rerank` (Cohere v2).
//!
//! With the default model and no cross-encoder the scorer is the bi-encoder, so every
//! score must be the cosine of the `/embed` vectors of the query and the text. Then:
//! `top_n`, texts and documents echoed, truncation on and off and its direction,
//! `max_tokens_per_doc`, every error per route with its status and field (in process
//! and through the standalone gateway), the gateway spreading rerank calls over two
//! servers, 429 from an overloaded upstream, and the answers the official Cohere SDK
//! parses and a TEI-style request gets, compared field by field with gRPC's Rerank.

use crate::common;

use common::{Gateway, error_message, floats, http, post, post_with_headers, start_server, venv_python, workspace};
use embedwire_proto::v1::rerank_service_client::RerankServiceClient;
use embedwire_proto::v1::{RerankRequest, RerankResponse};
use serde_json::{Value, json};

const QUERY: &str = "Which animal purrs when it is happy?";
const TEXTS: [&str; 5] = [
    "The ocean covers most of the surface of the Earth.",
    "Cats are small furry pets that purr and chase mice.",
    "Rust is a systems programming language focused on safety.",
    "Espresso is coffee brewed by forcing hot water through ground beans.",
    "Dogs bark at strangers and wag their tails.",
];
/// Index of the text that answers [`QUERY`].
const CATS: u64 = 1;
/// `--max-rerank-texts` of the servers that check the 413.
const MAX_TEXTS: usize = 8;

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value.as_object().expect("object").keys().map(String::as_str).collect();
    keys.sort();
    keys
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The bi-encoder's expected score of each of `texts`: the cosine of the `/embed`
/// vectors (L2-normalized, so the dot product).
async fn cosines(base: &str, query: &str, texts: &[&str]) -> Vec<f32> {
    let inputs: Vec<&str> = std::iter::once(query).chain(texts.iter().copied()).collect();
    let (status, body) = post(&format!("{base}/embed"), &json!({ "texts": inputs })).await;
    assert_eq!(status, 200, "{body}");
    let vectors: Vec<Vec<f32>> = body["embeddings"].as_array().unwrap().iter().map(floats).collect();
    vectors[1..].iter().map(|v| dot(&vectors[0], v)).collect()
}

fn score_of(value: &Value, key: &str) -> f32 {
    value[key].as_f64().unwrap_or_else(|| panic!("no {key} in {value}")) as f32
}

fn index_of(value: &Value) -> usize {
    value["index"].as_u64().unwrap_or_else(|| panic!("no index in {value}")) as usize
}

/// Checks that `items` are best first, each scored (under `key`) as `expected[index]`
/// within 1e-5, with every index once; returns the indices in order.
fn check_ranking(items: &Value, key: &str, expected: &[f32]) -> Vec<usize> {
    let items = items.as_array().unwrap_or_else(|| panic!("not an array: {items}"));
    for item in items {
        let (index, score) = (index_of(item), score_of(item, key));
        assert!((score - expected[index]).abs() < 1e-5, "text {index}: {score} vs cosine {}", expected[index]);
    }
    let scores: Vec<f32> = items.iter().map(|item| score_of(item, key)).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
    let order: Vec<usize> = items.iter().map(index_of).collect();
    let mut sorted = order.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), order.len(), "each index once: {order:?}");
    order
}

async fn grpc_rerank(server: &common::Server, request: RerankRequest) -> RerankResponse {
    let mut client = RerankServiceClient::new(server.process.connect().await.unwrap());
    client.rerank(request).await.expect("gRPC Rerank").into_inner()
}

/// POSTs `body` to `url` and checks the error: `status`, the gRPC code name, and the
/// field named in `field` and at the start of the message. Returns the message.
async fn expect_error(url: &str, body: &Value, status: u16, code: &str, field: &str) -> String {
    let (got, answer) = post(url, body).await;
    assert_eq!(got, status, "{url} {body}: {answer}");
    assert_eq!(answer["error"]["code"], code, "{url} {body}: {answer}");
    assert_eq!(answer["error"]["field"], field, "{url} {body}: {answer}");
    let message = error_message(&answer);
    assert!(message.starts_with(field), "the message names {field}: {message}");
    message
}

/// A text of about 2000 words that starts with the answer to [`QUERY`]: cut from the
/// right it keeps the cats, cut from the left only the ocean.
fn long_text() -> String {
    format!(
        "Cats purr when they are happy. {}",
        "The ocean covers most of the planet and its tides follow the moon. ".repeat(150)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tei_route_scores_are_the_cosine_of_the_embed_vectors_best_first() {
    let server = start_server(&[]).await; // the default model, no cross-encoder
    let base = server.url.as_str();
    let url = format!("{base}/rerank");
    let expected = cosines(base, QUERY, &TEXTS).await;

    let (status, headers, ranks) = post_with_headers(&url, &json!({"query": QUERY, "texts": TEXTS})).await;
    assert_eq!(status, 200, "{ranks}");
    let scorer = headers["x-embedwire-scorer"].to_str().unwrap();
    assert!(scorer.starts_with("bi-encoder:"), "no cross-encoder: the embedding model scores: {scorer}");
    let order = check_ranking(&ranks, "score", &expected);
    assert_eq!(order.len(), TEXTS.len(), "every text without top_n");
    assert_eq!(order[0] as u64, CATS, "{ranks}");
    for rank in ranks.as_array().unwrap() {
        assert_eq!(keys(rank), ["index", "score"], "no text unless asked: {rank}");
    }
    let tokens: u64 = headers["x-compute-tokens"].to_str().unwrap().parse().unwrap();
    assert!(tokens > TEXTS.len() as u64, "TEI's cost header counts the tokens read: {tokens}");
    assert!(headers.contains_key("x-embedwire-total-ms"), "the server's timing: {headers:?}");

    // return_text echoes each text; raw_scores is accepted (a bi-encoder's score is
    // the cosine either way).
    let body = json!({"query": QUERY, "texts": TEXTS, "return_text": true, "raw_scores": true});
    let (status, with_text) = post(&url, &body).await;
    assert_eq!(status, 200, "{with_text}");
    assert_eq!(check_ranking(&with_text, "score", &expected), order);
    for rank in with_text.as_array().unwrap() {
        assert_eq!(rank["text"], TEXTS[index_of(rank)], "{rank}");
    }

    // Truncation: on by default, from the right unless asked; off, an over-long text
    // is a 400 naming it.
    let long = long_text();
    let texts = [TEXTS[2], long.as_str()];
    let score_of_long = |answer: &Value| {
        let rank = answer.as_array().unwrap().iter().find(|r| index_of(r) == 1).expect("the long text is ranked");
        score_of(rank, "score")
    };
    let (status, right) = post(&url, &json!({"query": QUERY, "texts": texts})).await;
    assert_eq!(status, 200, "truncated by default: {right}");
    let mut scores = Vec::new();
    for direction in ["right", "Right", "left", "Left"] {
        let body = json!({"query": QUERY, "texts": texts, "truncate": true, "truncation_direction": direction});
        let (status, answer) = post(&url, &body).await;
        assert_eq!(status, 200, "{direction}: {answer}");
        scores.push(score_of_long(&answer));
    }
    assert_eq!(scores[0], score_of_long(&right), "right is the default");
    assert_eq!((scores[0], scores[2]), (scores[1], scores[3]), "TEI's capitalized spellings mean the same");
    assert!(
        scores[0] > scores[2] + 0.05,
        "cut from the right the long text keeps the cats ({}), from the left only the ocean ({})",
        scores[0],
        scores[2]
    );
    let message = expect_error(
        &url,
        &json!({"query": QUERY, "texts": texts, "truncate": false}),
        400,
        "INVALID_ARGUMENT",
        "texts[1]",
    )
    .await;
    assert!(message.contains("truncate"), "the message says how to fix it: {message}");

    // Field by field against gRPC's Rerank with the same request.
    let grpc = grpc_rerank(
        &server,
        RerankRequest {
            query: QUERY.into(),
            texts: TEXTS.iter().map(|t| t.to_string()).collect(),
            return_text: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(scorer, grpc.scorer);
    let from_http = with_text.as_array().unwrap();
    assert_eq!(from_http.len(), grpc.ranks.len());
    for (http, grpc) in from_http.iter().zip(&grpc.ranks) {
        assert_eq!(index_of(http), grpc.index as usize);
        assert_eq!(score_of(http, "score"), grpc.score, "the same f32");
        assert_eq!(http["text"].as_str(), grpc.text.as_deref());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cohere_routes_rank_like_tei_with_top_n_documents_and_max_tokens_per_doc() {
    let server = start_server(&[]).await;
    let base = server.url.as_str();
    let expected = cosines(base, QUERY, &TEXTS).await;
    let (_, tei) = post(&format!("{base}/rerank"), &json!({"query": QUERY, "texts": TEXTS})).await;
    let tei_order: Vec<usize> = tei.as_array().unwrap().iter().map(index_of).collect();
    let grpc = grpc_rerank(
        &server,
        RerankRequest {
            query: QUERY.into(),
            texts: TEXTS.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        },
    )
    .await;
    let tokens = grpc.usage.as_ref().unwrap().total_tokens;
    assert!(tokens > 0);

    // v1, as Cohere's and Jina's clients send it: any model name; strings.
    let v1 = format!("{base}/v1/rerank");
    let mut ids = Vec::new();
    for model in ["rerank-v3.5", "jina-reranker-v2-base-multilingual"] {
        let (status, headers, answer) =
            post_with_headers(&v1, &json!({"model": model, "query": QUERY, "documents": TEXTS})).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(keys(&answer), ["id", "meta", "model", "results", "usage"], "{answer}");
        assert_eq!(answer["model"], grpc.model.as_str(), "the model actually used, not {model}");
        assert!(headers["x-embedwire-scorer"].to_str().unwrap().starts_with("bi-encoder:"));
        assert_eq!(check_ranking(&answer["results"], "relevance_score", &expected), tei_order);
        for result in answer["results"].as_array().unwrap() {
            assert_eq!(keys(result), ["index", "relevance_score"], "no document unless asked: {result}");
        }
        assert_eq!(answer["usage"], json!({"total_tokens": tokens}));
        assert_eq!(
            answer["meta"],
            json!({"api_version": {"version": "1"}, "tokens": {"input_tokens": tokens, "output_tokens": 0}})
        );
        ids.push(answer["id"].as_str().unwrap().to_string());
    }
    assert_ne!(ids[0], ids[1], "each answer has its own id");

    // v1 with {text} objects, top_n and return_documents.
    let documents: Vec<Value> = TEXTS.iter().map(|t| json!({"text": t})).collect();
    let body = json!({"query": QUERY, "documents": documents, "top_n": 2, "return_documents": true});
    let (status, answer) = post(&v1, &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(check_ranking(&answer["results"], "relevance_score", &expected), tei_order[..2]);
    for result in answer["results"].as_array().unwrap() {
        assert_eq!(result["document"], json!({"text": TEXTS[index_of(result)]}), "{result}");
    }
    assert_eq!(answer["usage"]["total_tokens"], tokens, "top_n keeps results, every document is still read");
    let body = json!({"query": QUERY, "documents": TEXTS, "top_n": 50});
    let (status, answer) = post(&v1, &body).await;
    assert_eq!((status, answer["results"].as_array().unwrap().len()), (200, TEXTS.len()), "top_n past the count: all");

    // v2: Cohere's shape, top_n, and max_tokens_per_doc cutting each document.
    let v2 = format!("{base}/v2/rerank");
    let (status, answer) =
        post(&v2, &json!({"model": "rerank-v3.5", "query": QUERY, "documents": TEXTS, "top_n": 3})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(keys(&answer), ["id", "meta", "results"], "{answer}");
    assert_eq!(check_ranking(&answer["results"], "relevance_score", &expected), tei_order[..3]);
    for result in answer["results"].as_array().unwrap() {
        assert_eq!(keys(result), ["index", "relevance_score"], "{result}");
    }
    assert_eq!(
        answer["meta"],
        json!({"api_version": {"version": "2"}, "tokens": {"input_tokens": tokens, "output_tokens": 0}})
    );
    let late = ["The weather today is sunny and warm by the sea. Cats purr when they are happy.", TEXTS[2]];
    let late_score = |answer: &Value| {
        let result = answer["results"].as_array().unwrap().iter().find(|r| index_of(r) == 0).unwrap().clone();
        score_of(&result, "relevance_score")
    };
    let (status, whole) = post(&v2, &json!({"model": "m", "query": QUERY, "documents": late})).await;
    assert_eq!(status, 200, "{whole}");
    let (status, cut) =
        post(&v2, &json!({"model": "m", "query": QUERY, "documents": late, "max_tokens_per_doc": 4})).await;
    assert_eq!(status, 200, "{cut}");
    assert!(
        late_score(&whole) > late_score(&cut) + 0.05,
        "cut to 4 tokens the document loses its cats: {} vs {}",
        late_score(&whole),
        late_score(&cut)
    );
    assert!((late_score(&whole) - cosines(base, QUERY, &late[..1]).await[0]).abs() < 1e-5);

    // The Cohere routes cut over-long documents (no truncate field, the default on).
    let long = long_text();
    let (status, answer) = post(&v1, &json!({"query": QUERY, "documents": [long]})).await;
    assert_eq!(status, 200, "{answer}");
}

/// Every error of every rerank route at `base` (a server started with
/// `--max-rerank-texts` [`MAX_TEXTS`], or a gateway in front of one).
async fn assert_rerank_errors(base: &str) {
    let routes = [
        ("/rerank", "texts", json!({})),
        ("/v1/rerank", "documents", json!({})),
        ("/v2/rerank", "documents", json!({"model": "m"})),
    ];
    for (route, list, extra) in routes {
        let url = format!("{base}{route}");
        let body = |query: Value, texts: Value| {
            let mut body = extra.clone();
            body["query"] = query;
            body[list] = texts;
            body
        };
        let invalid = "INVALID_ARGUMENT";
        expect_error(&url, &body(json!(QUERY), json!([])), 400, invalid, list).await;
        expect_error(&url, &body(json!(QUERY), json!(["a", ""])), 400, invalid, &format!("{list}[1]")).await;
        expect_error(&url, &body(json!(""), json!(["a"])), 400, invalid, "query").await;
        let too_many: Vec<String> = (0..=MAX_TEXTS).map(|i| format!("text {i}")).collect();
        let message = expect_error(&url, &body(json!(QUERY), json!(too_many)), 413, "OUT_OF_RANGE", list).await;
        assert!(message.contains(&MAX_TEXTS.to_string()), "the message names the limit: {message}");
        // What the JSON extractor catches, before the server.
        let mut missing = body(json!(QUERY), json!(["a"]));
        missing.as_object_mut().unwrap().remove("query");
        expect_error(&url, &missing, 400, invalid, "query").await;
        expect_error(&url, &body(json!(QUERY), json!("a")), 400, invalid, list).await;
        expect_error(&url, &body(json!(QUERY), json!(["a", 7])), 400, invalid, &format!("{list}[1]")).await;
        expect_error(&url, &body(json!(7), json!(["a"])), 400, invalid, "query").await;
        let response = http().post(&url).body("nope").send().await.unwrap();
        assert_eq!(response.status().as_u16(), 400, "{url}: broken JSON");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["field"], "body", "{answer}");
        assert!(error_message(&answer).contains("not valid JSON"), "{answer}");
    }
    let tei = format!("{base}/rerank");
    let body = json!({"query": QUERY, "texts": ["a"], "truncation_direction": "up"});
    let message = expect_error(&tei, &body, 400, "INVALID_ARGUMENT", "truncation_direction").await;
    assert!(message.contains("right") && message.contains("left"), "the message lists the choices: {message}");
    expect_error(
        &tei,
        &json!({"query": QUERY, "texts": ["a"], "return_text": "yes"}),
        400,
        "INVALID_ARGUMENT",
        "return_text",
    )
    .await;
    for route in ["/v1/rerank", "/v2/rerank"] {
        let url = format!("{base}{route}");
        let body = json!({"model": "m", "query": QUERY, "documents": ["a"], "top_n": 0});
        expect_error(&url, &body, 400, "INVALID_ARGUMENT", "top_n").await;
        let body = json!({"model": "m", "query": QUERY, "documents": ["a", {"title": "no text"}]});
        expect_error(&url, &body, 400, "INVALID_ARGUMENT", "documents[1].text").await;
    }
    let body = json!({"model": "m", "query": QUERY, "documents": ["a"], "max_tokens_per_doc": 0});
    expect_error(&format!("{base}/v2/rerank"), &body, 400, "INVALID_ARGUMENT", "max_tokens_per_doc").await;
}

/// `embedwire_rerank_requests_total` on a server's `/metrics`.
async fn rerank_requests(server: &common::Server) -> u64 {
    let text = http().get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    let line = text
        .lines()
        .find(|line| line.starts_with("embedwire_rerank_requests_total "))
        .unwrap_or_else(|| panic!("no embedwire_rerank_requests_total in /metrics:\n{text}"));
    line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_per_route_in_process_and_through_a_gateway_that_spreads_rerank_over_two_servers() {
    let limit = MAX_TEXTS.to_string();
    let flags = ["--backend", "pseudo", "--max-rerank-texts", limit.as_str()];
    let first = start_server(&flags).await;
    let second = start_server(&flags).await;
    let gateway = Gateway::start(&[&first.url, &second.url]).await;

    assert_rerank_errors(&first.url).await;
    assert_rerank_errors(&gateway.url).await;

    // The gateway answers like a server, and its calls reach both servers.
    let routes = [
        ("/rerank", json!({"query": QUERY, "texts": TEXTS, "return_text": true})),
        ("/v1/rerank", json!({"query": QUERY, "documents": TEXTS, "top_n": 3, "return_documents": true})),
        ("/v2/rerank", json!({"model": "m", "query": QUERY, "documents": TEXTS, "top_n": 2})),
    ];
    let mut direct = Vec::new();
    for (route, body) in &routes {
        let (status, answer) = post(&format!("{}{route}", first.url), body).await;
        assert_eq!(status, 200, "{answer}");
        direct.push(answer);
    }
    let before = (rerank_requests(&first).await, rerank_requests(&second).await);
    let calls = 9;
    for call in 0..calls {
        let (route, body) = &routes[call % routes.len()];
        let (status, headers, answer) = post_with_headers(&format!("{}{route}", gateway.url), body).await;
        assert_eq!(status, 200, "{answer}");
        assert!(headers.contains_key("x-embedwire-scorer"), "{headers:?}");
        let expected = &direct[call % routes.len()];
        let results = |answer: &Value| if answer.is_array() { answer.clone() } else { answer["results"].clone() };
        assert_eq!(results(&answer), results(expected), "{route} through the gateway");
    }
    let after = (rerank_requests(&first).await, rerank_requests(&second).await);
    let (on_first, on_second) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(on_first + on_second, calls as u64, "every call reached one server");
    assert!(on_first > 0 && on_second > 0, "rerank is balanced: {on_first} on the first, {on_second} on the second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_upstream_is_429_on_every_rerank_route() {
    // The server refuses a key past its rate with RESOURCE_EXHAUSTED, as it refuses
    // work past its capacity; the gateway's routes must map it to 429.
    const KEY: &str = "rerank-429-upstream-key-0123456789";
    let flags = ["--backend", "pseudo", "--api-keys", KEY, "--rate-limit-rps", "0.01", "--rate-limit-burst", "2"];
    let server = start_server(&flags).await;
    let gateway = Gateway::start_with(&[&server.url], &["--upstream-api-key", KEY]).await;
    let body = json!({"model": "m", "query": QUERY, "texts": TEXTS, "documents": TEXTS});
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let (status, answer) = post(&format!("{}/v1/rerank", gateway.url), &body).await;
        statuses.push(status);
        if status == 429 {
            assert_eq!(answer["error"]["code"], "RESOURCE_EXHAUSTED", "{answer}");
            break;
        }
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!(statuses.last(), Some(&429), "a burst of 2 is spent within 6 calls: {statuses:?}");
    for route in ["/rerank", "/v2/rerank"] {
        let (status, answer) = post(&format!("{}{route}", gateway.url), &body).await;
        assert_eq!(status, 429, "{route}: {answer}");
        assert_eq!(answer["error"]["code"], "RESOURCE_EXHAUSTED", "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cohere_sdk_and_a_tei_request_get_grpcs_ranking_field_by_field() {
    let server = start_server(&[]).await;
    let documents = TEXTS.map(str::to_string).to_vec();
    let grpc = grpc_rerank(
        &server,
        RerankRequest { query: QUERY.into(), texts: documents.clone(), return_text: true, ..Default::default() },
    )
    .await;
    let tokens = grpc.usage.as_ref().unwrap().total_tokens;

    let output = tokio::process::Command::new(venv_python())
        .arg(workspace().join("gateway-http/it/tests/cohere_sdk_rerank.py"))
        .arg(&server.url)
        .arg(QUERY)
        .args(TEXTS)
        .output()
        .await
        .expect("python runs");
    assert!(
        output.status.success(),
        "SDK script failed (scripts/setup-python-dev.sh installs cohere): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sdk: Value = serde_json::from_slice(&output.stdout).unwrap();

    // What the SDK parsed equals gRPC's ranks: index, f32 score, text.
    let compare = |name: &str, take: usize, documents_back: bool| {
        let parsed = &sdk[name];
        let results = parsed["results"].as_array().unwrap_or_else(|| panic!("{name}: {parsed}"));
        assert_eq!(results.len(), take, "{name}: {parsed}");
        for (result, rank) in results.iter().zip(&grpc.ranks) {
            assert_eq!(index_of(result), rank.index as usize, "{name}");
            assert_eq!(score_of(result, "relevance_score"), rank.score, "{name}: the same f32");
            if documents_back {
                assert_eq!(result["document"]["text"].as_str(), rank.text.as_deref(), "{name}");
            } else {
                assert!(result.get("document").is_none_or(Value::is_null), "{name}: {result}");
            }
        }
        let id = parsed["id"].as_str().unwrap_or_else(|| panic!("{name}: no id"));
        assert_eq!(id.len(), 36, "{name}: {id}");
        assert_eq!(parsed["meta"]["input_tokens"].as_f64(), Some(f64::from(tokens)), "{name}: {parsed}");
        assert_eq!(parsed["meta"]["output_tokens"].as_f64(), Some(0.0), "{name}: {parsed}");
        parsed["meta"]["api_version"].as_str().unwrap().to_string()
    };
    assert_eq!(compare("v1_with_documents", 2, true), "1");
    assert_eq!(compare("v1_plain", TEXTS.len(), false), "1");
    assert_eq!(compare("v2_all", TEXTS.len(), false), "2");
    assert_eq!(compare("v2_top", 1, false), "2");
    assert_eq!(sdk["v1_with_documents"]["model"], grpc.model.as_str(), "{sdk}");
    assert_eq!(sdk["v1_with_documents"]["usage"], json!({"total_tokens": tokens}), "{sdk}");
    for name in ["v1_error", "v2_error"] {
        let error = &sdk[name];
        assert_eq!(error["status"], 400, "{name}: the SDK raised BadRequestError: {sdk}");
        assert_eq!(error["body"]["error"]["field"], "documents[1]", "{name}: {error}");
    }

    // A TEI-style request, every optional field spelled as TEI's clients send them.
    let body = json!({"query": QUERY, "texts": TEXTS, "raw_scores": false, "return_text": true,
        "truncate": true, "truncation_direction": "Right"});
    let response = http().post(format!("{}/rerank", server.url)).json(&body).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(response.headers()["x-embedwire-scorer"].to_str().unwrap(), grpc.scorer);
    let ranks: Value = response.json().await.unwrap();
    let ranks = ranks.as_array().expect("TEI answers a bare array");
    assert_eq!(ranks.len(), grpc.ranks.len());
    for (rank, expected) in ranks.iter().zip(&grpc.ranks) {
        assert_eq!(keys(rank), ["index", "score", "text"], "{rank}");
        assert_eq!(index_of(rank), expected.index as usize);
        assert_eq!(score_of(rank, "score"), expected.score);
        assert_eq!(rank["text"].as_str(), expected.text.as_deref());
    }
}
