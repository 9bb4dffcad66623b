//! The routes of shared/http-api.md with their exact shapes and defaults, the
//! extensions, /embed, and the error answers, against a real server process.

use crate::common;

use common::{
    error_message, f32s, floats, get, http, ingest_and_wait, post, post_with_headers, pseudo_server, start_server,
};
use embedwire_proto::v1::EmbedRequest;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use serde_json::{Value, json};

fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value.as_object().expect("object").keys().cloned().collect();
    keys.sort();
    keys
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

async fn embed_json(base: &str, texts: &[&str]) -> Vec<Vec<f32>> {
    let (status, body) = post(&format!("{base}/embed"), &json!({ "texts": texts })).await;
    assert_eq!(status, 200, "{body}");
    body["embeddings"].as_array().expect("embeddings").iter().map(floats).collect()
}

const TEXTS: [&str; 7] = [
    "The cat sat on the warm mat by the fire.",
    "Rust guarantees memory safety without a garbage collector.",
    "gRPC uses HTTP/2 and protocol buffers.",
    "Embeddings map text to vectors of numbers.",
    "A good index answers nearest-neighbour queries fast.",
    "Coffee is brewed from roasted beans.",
    "The weather today is sunny with a light breeze.",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_routes_answer_with_the_contract_shapes() {
    let server = pseudo_server().await;
    let base = server.url.as_str();

    let (status, health) = get(&format!("{base}/healthz")).await;
    assert_eq!(status, 200);
    // The contract's fields, exactly; `store` is an extension old clients ignore.
    let contract = json!({"status": health["status"], "model_loaded": health["model_loaded"], "document_count": health["document_count"]});
    assert_eq!(contract, json!({"status": "ok", "model_loaded": true, "document_count": 0}), "{health}");
    // `document_count_exact` and `store` are extensions old clients ignore.
    assert_eq!(
        keys(&health),
        ["document_count", "document_count_exact", "model_loaded", "status", "store"],
        "{health}"
    );
    assert_eq!(health["document_count_exact"], true, "the embedded store counts exactly: {health}");

    // An empty index answers with an empty list, not an error.
    let (status, empty) = post(&format!("{base}/v1/search"), &json!({"query": "anything"})).await;
    assert_eq!(status, 200);
    assert_eq!(empty["results"], json!([]));
    assert!(empty["took_ms"].is_f64());

    // Ingest: id given, missing, or null; metadata given or missing.
    let documents: Vec<Value> = TEXTS
        .iter()
        .enumerate()
        .map(|(i, text)| match i {
            0 => json!({"id": "doc-0", "text": text, "metadata": {"topic": "pets", "lang": "en"}}),
            1 => json!({"text": text, "metadata": {"topic": "code"}}),
            2 => json!({"id": null, "text": text}),
            _ => json!({"id": format!("doc-{i}"), "text": text, "metadata": {"topic": if i % 2 == 0 { "even" } else { "odd" }}}),
        })
        .collect();
    let (status, job) = post(&format!("{base}/v1/ingest"), &json!({"documents": documents})).await;
    assert_eq!(status, 200, "{job}");
    for key in ["job_id", "status", "total_documents", "processed_documents", "started_at", "finished_at"] {
        assert!(job.get(key).is_some(), "ingest answer lacks {key}: {job}");
    }
    assert!(job["job_id"].as_str().is_some_and(|id| id.len() == 36), "job_id is a UUID: {job}");
    assert!(["pending", "running", "completed"].contains(&job["status"].as_str().unwrap()), "{job}");
    assert_eq!(job["total_documents"], 7);
    assert!(job["processed_documents"].is_u64());
    assert!(job["started_at"].as_f64().unwrap() > 1.7e9, "started_at is Unix seconds: {job}");
    assert!(job["finished_at"].is_null() || job["finished_at"].is_f64());
    assert!(job.get("error").is_none(), "no error key on a healthy job: {job}");
    let ids: Vec<String> =
        job["document_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    assert_eq!(ids[0], "doc-0");
    assert_eq!(ids[1].len(), 36, "the server assigns a UUID to a document without id");
    assert_eq!(ids[2].len(), 36, "... and to one with a null id");

    let (status, empty_ingest) = post(&format!("{base}/v1/ingest"), &json!({"documents": []})).await;
    assert_eq!(status, 400, "{empty_ingest}");
    assert_eq!(empty_ingest["error"]["field"], "documents");
    let job_url = format!("{base}/v1/jobs/{}", job["job_id"].as_str().unwrap());
    let finished = loop {
        let (status, current) = get(&job_url).await;
        assert_eq!(status, 200);
        if current["status"] == "completed" {
            break current;
        }
        assert_ne!(current["status"], "failed", "{current}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(finished["processed_documents"], 7);
    assert!(finished["finished_at"].as_f64().unwrap() >= finished["started_at"].as_f64().unwrap());
    assert_eq!(
        keys(&finished),
        keys(
            &json!({"job_id":0,"status":0,"total_documents":0,"processed_documents":0,"started_at":0,"finished_at":0,"failed_documents":0})
        )
    );

    let (status, health) = get(&format!("{base}/healthz")).await;
    assert_eq!(status, 200);
    assert_eq!(health["document_count"], 7);

    // top_k defaults to 5; results are sorted; scores are the cosine of the vectors.
    let query = "a pet resting near the fireplace";
    let (status, found) = post(&format!("{base}/v1/search"), &json!({"query": query})).await;
    assert_eq!(status, 200, "{found}");
    let results = found["results"].as_array().unwrap();
    assert_eq!(results.len(), 5, "default top_k is 5");
    let vectors = embed_json(base, &[query]).await;
    let text_vectors = embed_json(base, &TEXTS).await;
    let mut previous = f64::INFINITY;
    for result in results {
        assert_eq!(keys(result), vec!["id", "metadata", "score", "text"], "{result}");
        let score = result["score"].as_f64().unwrap();
        assert!(score <= previous, "sorted by score, highest first");
        previous = score;
        let index = TEXTS.iter().position(|t| *t == result["text"].as_str().unwrap()).expect("text is a document's");
        let cosine = dot(&vectors[0], &text_vectors[index]);
        assert!((cosine - score as f32).abs() < 1e-5, "score {score} is the cosine {cosine}");
        assert!(result["metadata"].is_object());
        if result["id"] == "doc-0" {
            assert_eq!(result["metadata"], json!({"topic": "pets", "lang": "en"}));
        }
    }
    let best = TEXTS
        .iter()
        .enumerate()
        .max_by(|a, b| dot(&vectors[0], &text_vectors[a.0]).total_cmp(&dot(&vectors[0], &text_vectors[b.0])))
        .unwrap();
    assert_eq!(results[0]["text"], *best.1, "the best match comes first");

    let (_, two) = post(&format!("{base}/v1/search"), &json!({"query": query, "top_k": 2})).await;
    assert_eq!(two["results"].as_array().unwrap().len(), 2);
    let (_, null_top_k) = post(&format!("{base}/v1/search"), &json!({"query": query, "top_k": null})).await;
    assert_eq!(null_top_k["results"].as_array().unwrap().len(), 5);

    // Extensions: filter, score_threshold, citations.
    let filter =
        json!({"must": [{"key": "topic", "any_of": ["even", "pets"]}], "must_not": [{"key": "lang", "equals": "en"}]});
    let (status, filtered) =
        post(&format!("{base}/v1/search"), &json!({"query": query, "top_k": 10, "filter": filter, "citations": true}))
            .await;
    assert_eq!(status, 200, "{filtered}");
    let filtered = filtered["results"].as_array().unwrap();
    assert_eq!(filtered.len(), 2, "doc-4 and doc-6 are even; doc-0 is excluded by must_not: {filtered:?}");
    for result in filtered {
        assert_eq!(result["metadata"]["topic"], "even");
        let citation = &result["citation"];
        assert_eq!(citation["chunk_index"], 0);
        assert_eq!(citation["start_char"], 0);
        assert_eq!(citation["end_char"].as_u64().unwrap() as usize, result["text"].as_str().unwrap().chars().count());
    }
    let threshold = results[1]["score"].as_f64().unwrap() as f32 - 1e-6;
    let (_, above) =
        post(&format!("{base}/v1/search"), &json!({"query": query, "top_k": 7, "score_threshold": threshold})).await;
    assert_eq!(above["results"].as_array().unwrap().len(), 2);

    let (status, missing) = get(&format!("{base}/v1/jobs/00000000-0000-0000-0000-000000000000")).await;
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["code"], "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_route_matches_grpc_in_json_and_binary() {
    let server = pseudo_server().await;
    let base = server.url.as_str();
    let texts = ["first text", "second, longer text about embeddings", "third"];
    let json_rows = embed_json(base, &texts).await;
    assert_eq!(json_rows.len(), 3);
    for row in &json_rows {
        assert_eq!(row.len(), 384);
        assert!((dot(row, row).sqrt() - 1.0).abs() < 1e-5, "L2-normalized");
    }

    let mut grpc = EmbedServiceClient::new(server.process.connect().await.unwrap());
    let reply = grpc
        .embed(EmbedRequest { inputs: texts.iter().map(|t| t.to_string()).collect(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let grpc_values = f32s(&reply.embeddings);
    assert_eq!(json_rows.concat(), grpc_values, "JSON floats round-trip to the gRPC bytes exactly, in input order");

    let response = http()
        .post(format!("{base}/embed"))
        .header("accept", "application/octet-stream")
        .json(&json!({"texts": texts}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/octet-stream");
    assert_eq!(response.headers()["x-embedding-count"], "3");
    assert_eq!(response.headers()["x-embedding-dimensions"], "384");
    let bytes = response.bytes().await.unwrap();
    assert_eq!(bytes.as_ref(), reply.embeddings.as_ref(), "octet-stream carries the gRPC bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_route_floats_base64_dimensions_and_errors() {
    use base64::Engine;
    let server = pseudo_server().await;
    let url = format!("{}/v1/embeddings", server.url);
    let (status, floats_body) =
        post(&url, &json!({"input": ["alpha", "beta"], "model": "text-embedding-3-small"})).await;
    assert_eq!(status, 200, "{floats_body}");
    assert_eq!(floats_body["object"], "list");
    assert!(floats_body["model"].as_str().unwrap().starts_with("pseudo"), "reports the model used");
    assert!(floats_body["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(floats_body["usage"]["prompt_tokens"], floats_body["usage"]["total_tokens"]);
    let data = floats_body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["object"], "embedding");
    assert_eq!(data[1]["index"], 1);

    let (status, b64_body) = post(&url, &json!({"input": ["alpha", "beta"], "encoding_format": "base64"})).await;
    assert_eq!(status, 200);
    for (float_item, b64_item) in data.iter().zip(b64_body["data"].as_array().unwrap()) {
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64_item["embedding"].as_str().unwrap()).unwrap();
        assert_eq!(f32s(&bytes), floats(&float_item["embedding"]), "base64 and float carry the same vector");
    }

    let (_, single) = post(&url, &json!({"input": "alpha"})).await;
    assert_eq!(single["data"][0]["embedding"], data[0]["embedding"], "a string input is one input");

    let (status, short) = post(&url, &json!({"input": "alpha", "dimensions": 64})).await;
    assert_eq!(status, 200, "{short}");
    let short = floats(&short["data"][0]["embedding"]);
    let full = floats(&data[0]["embedding"]);
    assert_eq!(short.len(), 64);
    let norm = full[..64].iter().map(|v| v * v).sum::<f32>().sqrt();
    for (s, f) in short.iter().zip(&full[..64]) {
        assert!((s - f / norm).abs() < 1e-6, "dimensions truncates, then renormalizes");
    }

    let cases = [
        (json!({"model": "m"}), "input"),
        (json!({"input": [1, 2, 3]}), "input"),
        (json!({"input": ["ok", 5]}), "input[1]"),
        (json!({"input": "x", "encoding_format": "int8"}), "encoding_format"),
        (json!({"input": ""}), "input[0]"),
    ];
    for (body, param) in cases {
        let (status, error) = post(&url, &body).await;
        assert_eq!(status, 400, "{body} -> {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error", "OpenAI error shape: {error}");
        assert_eq!(error["error"]["param"], param, "{body} -> {error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(param), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_400_naming_the_field_and_413_over_the_limit() {
    let server = start_server(&["--backend", "pseudo", "--max-request-bytes", "65536"]).await;
    let base = server.url.as_str();
    let client = http();
    let raw = |route: &str, body: &'static str| {
        let request = client.post(format!("{base}{route}")).header("content-type", "application/json").body(body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };

    let (status, body) = raw("/v1/search", r#"{"query": "x""#).await;
    assert_eq!(status, 400);
    assert!(error_message(&body).contains("not valid JSON"), "{body}");

    let cases: [(&str, Value, &str); 17] = [
        ("/v1/search", json!({"query": "x", "mode": "fuzzy"}), "mode"),
        ("/v1/search", json!({"query": "x", "group_by": "page"}), "group_by"),
        ("/v1/search", json!({"query": "x", "group_by": "document", "group_size": 0}), "group_size"),
        ("/v1/search", json!({"query": "x", "group_size": 2}), "group_size"),
        ("/v1/search", json!({"query": "x", "mode": "hybrid", "fusion": "max"}), "fusion"),
        ("/v1/search", json!({"query": "x", "mode": "hybrid", "alpha": 1.5}), "alpha"),
        ("/v1/search", json!({"query": "x", "mode": "hybrid", "alpha": "half"}), "alpha"),
        ("/v1/search", json!({"query": "x", "mode": "keyword", "alpha": -0.5}), "alpha"),
        ("/v1/search", json!({"top_k": 3}), "query"),
        ("/v1/search", json!({"query": 7}), "query"),
        ("/v1/search", json!({"query": "x", "top_k": "five"}), "top_k"),
        ("/v1/search", json!({"query": "x", "top_k": 0}), "top_k"),
        ("/v1/search", json!({"query": ""}), "query"),
        ("/v1/ingest", json!({"documents": [{"text": "ok"}, {"id": "b"}]}), "documents[1].text"),
        ("/v1/ingest", json!({"documents": [{"text": "ok", "metadata": {"n": 3}}]}), "documents[0].metadata.n"),
        ("/v1/ingest", json!({"documents": [{"text": "   "}]}), "documents[0].text"),
        ("/embed", json!({"texts": "not a list"}), "texts"),
    ];
    for (route, body, field) in cases {
        let (status, answer) = post(&format!("{base}{route}"), &body).await;
        assert_eq!(status, 400, "{route} {body} -> {answer}");
        assert_eq!(answer["error"]["code"], "INVALID_ARGUMENT", "{answer}");
        assert_eq!(answer["error"]["field"], field, "{route} {body} -> {answer}");
        assert!(error_message(&answer).starts_with(field), "{answer}");
    }

    let big = "word ".repeat(20_000);
    let (status, answer) = post(&format!("{base}/embed"), &json!({"texts": [big]})).await;
    assert_eq!(status, 413, "{answer}");
    assert!(error_message(&answer).contains("limit"), "{answer}");

    let (status, answer) = get(&format!("{base}/v2/nothing")).await;
    assert_eq!(status, 404);
    assert_eq!(answer["error"]["code"], "NOT_FOUND");

    // A gRPC call to a method nobody serves still looks like gRPC.
    let response = client
        .post(format!("{base}/embedwire.v1.Nope/Call"))
        .header("content-type", "application/grpc")
        .body(vec![0u8, 0, 0, 0, 0])
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["grpc-status"], "12", "UNIMPLEMENTED");
}

/// The value of the series `line_prefix` in a Prometheus page (0 when absent).
fn metric(page: &str, line_prefix: &str) -> f64 {
    page.lines().find(|l| l.starts_with(line_prefix)).map_or(0.0, |l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_metrics_and_openapi() {
    let server = pseudo_server().await;
    let base = server.url.as_str();
    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!((status, ready), (200, json!({"ready": true})));

    let page = || async { http().get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap() };
    let search_ok = r#"embedwire_http_requests_total{route="/v1/search",method="POST",status="200"}"#;
    let before = page().await;
    for _ in 0..3 {
        post(&format!("{base}/v1/search"), &json!({"query": "q"})).await;
    }
    post(&format!("{base}/v1/search"), &json!({"query": ""})).await;
    ingest_and_wait(base, json!([{"text": "one"}, {"text": "two"}])).await;
    let after = page().await;
    assert_eq!(metric(&after, search_ok) - metric(&before, search_ok), 3.0, "{after}");
    let search_bad = r#"embedwire_http_requests_total{route="/v1/search",method="POST",status="400"}"#;
    assert_eq!(metric(&after, search_bad) - metric(&before, search_bad), 1.0);
    assert!(metric(&after, "embedwire_embed_requests_total") > metric(&before, "embedwire_embed_requests_total"));
    assert_eq!(metric(&after, "embedwire_index_documents "), 2.0);
    assert!(metric(&after, r#"embedwire_http_request_duration_seconds_count{route="/v1/search"}"#) >= 4.0);

    // The served OpenAPI document is the one kept in the repo.
    let served = http().get(format!("{base}/openapi.json")).send().await.unwrap().text().await.unwrap();
    let kept = std::fs::read_to_string(common::workspace().join("gateway-http/openapi.json")).unwrap();
    assert_eq!(
        served, kept,
        "gateway-http/openapi.json is stale: run `EMBEDWIRE_UPDATE_OPENAPI=1 cargo test --release -p embedwire-gateway-http --test it openapi`"
    );
    let document: Value = serde_json::from_str(&served).unwrap();
    for path in
        ["/v1/ingest", "/v1/jobs/{job_id}", "/v1/search", "/v1/embeddings", "/embed", "/healthz", "/readyz", "/metrics"]
    {
        assert!(document["paths"].get(path).is_some(), "OpenAPI documents {path}");
    }

    let page = http().get(format!("{base}/")).send().await.unwrap();
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(page.text().await.unwrap().contains("id=\"search-form\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_answers_name_the_servers_index() {
    let server = pseudo_server().await;
    let base = server.url.as_str();
    let (status, health) = get(&format!("{base}/healthz")).await;
    assert_eq!(status, 200);
    let store = &health["store"];
    assert_eq!(store["kind"], "embedded", "{health}");
    assert_eq!(store["shared"], false, "{health}");
    assert_eq!(store["healthy"], true, "{health}");
    assert_eq!(store["nodes"], json!([]), "{health}");
    let index = store["index_id"].as_str().expect("index_id").to_string();
    assert!(!index.is_empty(), "{health}");
    assert!(health.get("upstreams").is_none(), "one server, no upstream list: {health}");

    let (status, headers, job) =
        post_with_headers(&format!("{base}/v1/ingest"), &json!({"documents": [{"id": "d", "text": "hello"}]})).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(
        (headers["x-embedwire-index"].to_str().unwrap(), headers["x-embedwire-upstream"].to_str().unwrap()),
        (index.as_str(), "in-process")
    );
    let job_url = format!("{base}/v1/jobs/{}", job["job_id"].as_str().unwrap());
    let headers = http().get(&job_url).send().await.unwrap().headers().clone();
    assert_eq!(headers["x-embedwire-index"], index.as_str());
    assert_eq!(headers["x-embedwire-upstream"], "in-process");
    let (status, headers, found) = post_with_headers(&format!("{base}/v1/search"), &json!({"query": "hello"})).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(headers["x-embedwire-index"], index.as_str());
    assert_eq!(headers["x-embedwire-upstream"], "in-process");

    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!((status, ready), (200, json!({"ready": true})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overload_refusal_is_a_429_that_says_when_to_retry() {
    // Room for two 32-text calls at a time and the real model (a call takes 100+
    // ms): a burst of 16 at once, on the embedwire and the OpenAI route, is refused
    // in part.
    let server =
        start_server(&["--backend", "onnx", "--max-in-flight-inputs", "64", "--max-inputs-per-request", "64"]).await;
    let texts: Vec<String> = (0..32).map(|i| format!("burst text number {i}")).collect();
    let client = http();
    let requests = (0..16).map(|i| {
        let (route, body) = if i % 2 == 0 {
            ("embed", json!({ "texts": texts }))
        } else {
            ("v1/embeddings", json!({ "input": texts, "model": "all-MiniLM-L6-v2" }))
        };
        client.post(format!("{}/{route}", server.url)).json(&body).send()
    });
    let answers = futures::future::join_all(requests).await;
    let mut refused = 0;
    for answer in answers {
        let answer = answer.expect("request sent");
        let status = answer.status().as_u16();
        if status == 200 {
            continue;
        }
        assert_eq!(status, 429, "only overload refusals in a burst of valid calls");
        refused += 1;
        let header = |name: &str| -> u64 {
            let value = answer.headers().get(name).unwrap_or_else(|| panic!("a 429 carries {name}"));
            value.to_str().unwrap().parse().unwrap_or_else(|_| panic!("{name}: {value:?} is whole units"))
        };
        let (seconds, millis) = (header("retry-after"), header("retry-after-ms"));
        assert!(millis >= 1 && millis <= 10_000, "a hint of {millis} ms");
        assert_eq!(seconds, millis.div_ceil(1000).max(1), "Retry-After is the hint in whole seconds, rounded up");
    }
    assert!(refused > 0, "16 x 32 texts at once over a bound of 64 inputs are refused in part");
    server.process.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_modes_keyword_and_hybrid_with_each_sides_score() {
    let server = pseudo_server().await;
    let base = server.url.as_str();
    let documents = json!([
        {"id": "part", "text": "Order gasket XJ-4471-B for the intake flange."},
        {"id": "pump", "text": "The pump moves water with an impeller."},
        {"id": "valve", "text": "A check valve closes when the flow reverses."},
    ]);
    assert_eq!(ingest_and_wait(base, documents).await["status"], "completed");
    let search = async |body: Value| {
        let (status, answer) = post(&format!("{base}/v1/search"), &body).await;
        assert_eq!(status, 200, "{body} -> {answer}");
        answer["results"].as_array().unwrap().clone()
    };

    // Without the new fields: the answer's shape as before (no per-side scores).
    for hit in search(json!({"query": "XJ-4471-B", "top_k": 3})).await {
        assert_eq!(keys(&hit), ["id", "metadata", "score", "text"], "{hit}");
    }
    let keyword = search(json!({"query": "XJ-4471-B", "top_k": 3, "mode": "keyword"})).await;
    assert_eq!(keyword.len(), 1, "only one document holds the part number: {keyword:?}");
    assert_eq!(keyword[0]["id"], "part");
    assert_eq!(keyword[0]["score"], keyword[0]["keyword_score"]);
    assert!(keyword[0].get("vector_score").is_none(), "{}", keyword[0]);
    for fusion in ["rrf", "relative_score"] {
        let body = json!({"query": "XJ-4471-B", "top_k": 3, "mode": "hybrid", "alpha": 0.3, "fusion": fusion});
        let hybrid = search(body).await;
        assert_eq!(hybrid.len(), 3, "{fusion}: the vector side finds every document");
        assert_eq!(hybrid[0]["id"], "part", "{fusion}: {hybrid:?}");
        assert!(hybrid[0]["keyword_score"].is_number() && hybrid[0]["vector_score"].is_number(), "{}", hybrid[0]);
        assert!(hybrid[1..].iter().all(|h| h.get("keyword_score").is_none() && h["vector_score"].is_number()));
    }
    let vector = search(json!({"query": "XJ-4471-B", "top_k": 3, "mode": "vector"})).await;
    assert!(vector.iter().all(|h| h["vector_score"] == h["score"] && h.get("keyword_score").is_none()));
    // Only stop words: no keyword hit, never an error.
    assert!(search(json!({"query": "the and of", "mode": "keyword"})).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_grouped_by_document_with_highlights() {
    let server = start_server(&["--backend", "pseudo", "--chunk-tokens", "16", "--chunk-overlap-tokens", "4"]).await;
    let base = server.url.as_str();
    // "manual" has three paragraphs on the pump; with 16-token chunks it has several.
    let manual = "The pump needs priming before its first start. Prime the pump through the top port. \
                  A pump that runs dry overheats its seal. Pumps are checked every spring.";
    let documents = json!([
        {"id": "manual", "text": manual},
        {"id": "note", "text": "A note: the garden pump is small."},
        {"id": "other", "text": "Nothing about it here at all."},
    ]);
    assert_eq!(ingest_and_wait(base, documents).await["status"], "completed");
    let search = async |body: Value| {
        let (status, answer) = post(&format!("{base}/v1/search"), &body).await;
        assert_eq!(status, 200, "{body} -> {answer}");
        answer["results"].as_array().unwrap().clone()
    };
    let chunks = search(json!({"query": "pumps", "top_k": 10, "mode": "keyword"})).await;
    assert!(chunks.iter().filter(|h| h["id"] == "manual").count() > 1, "several chunks of the manual: {chunks:?}");

    let grouped = search(json!({"query": "pumps", "top_k": 2, "mode": "keyword", "group_by": "document"})).await;
    let ids: Vec<&str> = grouped.iter().map(|h| h["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{grouped:?}");
    assert_ne!(ids[0], ids[1], "one result per document: {grouped:?}");
    let two = json!({"query": "pumps", "top_k": 1, "mode": "hybrid", "group_by": "document", "group_size": 2,
                     "highlight": true, "citations": true});
    let two = search(two).await;
    assert_eq!(two.len(), 2, "{two:?}");
    assert!(two.iter().all(|h| h["id"] == two[0]["id"]), "the best document's two best chunks: {two:?}");
    for hit in &two {
        let start = hit["citation"]["start_char"].as_u64().unwrap();
        let text: Vec<char> = hit["text"].as_str().unwrap().chars().collect();
        let marks = hit["highlights"].as_array().unwrap();
        assert!(!marks.is_empty(), "{hit}");
        for mark in marks {
            let (from, to) = (mark["start_char"].as_u64().unwrap() - start, mark["end_char"].as_u64().unwrap() - start);
            let word: String = text[from as usize..to as usize].iter().collect();
            assert!(word.eq_ignore_ascii_case("pump") || word.eq_ignore_ascii_case("pumps"), "{word:?} in {hit}");
        }
    }
    // Without highlight, no highlights field: the answer's shape as before.
    assert!(grouped.iter().all(|h| h.get("highlights").is_none()));
}
