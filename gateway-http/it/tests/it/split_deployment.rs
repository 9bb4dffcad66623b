//! The split deployment: embedwire-gateway in front of two embedwire-server
//! processes. Embed traffic reaches both; when one is killed, requests keep
//! succeeding on the other. Each server has its own (embedded) index, so every answer
//! names the index it came from, and losing the index that held the documents shows
//! in /healthz and /readyz, and so does coming back to an index that missed the
//! documents ingested during the failover (a failback), until they are re-ingested.

use crate::common;

use std::time::{Duration, Instant};

use common::{Gateway, RestartableServer, get, http, ingest_and_wait, post, post_with_headers, pseudo_server};
use serde_json::{Value, json};

/// `embedwire_embed_requests_total` of a server.
async fn embed_requests(server_url: &str) -> f64 {
    let page = http().get(format!("{server_url}/metrics")).send().await.unwrap().text().await.unwrap();
    page.lines()
        .find(|l| l.starts_with("embedwire_embed_requests_total "))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_balances_two_servers_and_survives_one_dying() {
    let first = pseudo_server().await;
    let second = pseudo_server().await;
    let gateway = Gateway::start(&[&first.url, &second.url]).await;
    let base = gateway.url.as_str();

    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "{ready}");
    let (status, health) = get(&format!("{base}/healthz")).await;
    assert_eq!((status, health["model_loaded"].clone()), (200, json!(true)));

    for i in 0..20 {
        let (status, body) = post(&format!("{base}/embed"), &json!({"texts": [format!("text {i}")]})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["embeddings"][0].as_array().unwrap().len(), 384);
    }
    let (on_first, on_second) = (embed_requests(&first.url).await, embed_requests(&second.url).await);
    assert_eq!(on_first + on_second, 20.0);
    assert!(on_first >= 5.0 && on_second >= 5.0, "both upstreams get traffic: {on_first} / {on_second}");

    // Ingest and search go to the first upstream while it is up; the job is found.
    let (status, job) = post(&format!("{base}/v1/ingest"), &json!({"documents": [{"id": "d", "text": "hello"}]})).await;
    assert_eq!(status, 200, "{job}");
    let (status, _) = get(&format!("{base}/v1/jobs/{}", job["job_id"].as_str().unwrap())).await;
    assert_eq!(status, 200);
    let (status, missing) = get(&format!("{base}/v1/jobs/unknown-job")).await;
    assert_eq!(status, 404, "{missing}");

    // The standalone gateway reports the same errors as the in-process layer.
    let (status, bad) = post(&format!("{base}/embed"), &json!({"texts": [""]})).await;
    assert_eq!(status, 400);
    assert_eq!(bad["error"]["field"], "texts[0]");

    first.process.stop().await.unwrap();
    for i in 0..20 {
        let (status, body) = post(&format!("{base}/embed"), &json!({"texts": [format!("after {i}")]})).await;
        assert_eq!(status, 200, "request {i} after one upstream died: {body}");
        let (status, body) = post(&format!("{base}/v1/search"), &json!({"query": "hello"})).await;
        assert_eq!(status, 200, "search {i} after one upstream died: {body}");
    }
    assert!(embed_requests(&second.url).await >= on_second + 20.0);
    // Serving, but not ready: the document ingested above is in the lost index.
    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!((status, &ready["degraded"]), (503, &json!(true)), "the index holding \"d\" is gone: {ready}");
    let metrics = http().get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(&format!("embedwire_gateway_upstream_up{{upstream=\"{}\"}} 0", first.url)), "{metrics}");

    second.process.stop().await.unwrap();
    let (status, body) = post(&format!("{base}/embed"), &json!({"texts": ["nobody home"]})).await;
    assert_eq!(status, 503, "no upstream left: {body}");
    let (status, _) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_checks_its_own_keys_and_presents_one_upstream() {
    const UPSTREAM_KEY: &str = "upstream-key-0123456789";
    const CLIENT_KEY: &str = "client-key-0123456789";
    let server = common::start_server(&["--backend", "pseudo", "--api-keys", UPSTREAM_KEY]).await;
    let keyed =
        Gateway::start_with(&[&server.url], &["--api-keys", CLIENT_KEY, "--upstream-api-key", UPSTREAM_KEY]).await;
    let unkeyed = Gateway::start_with(&[&server.url], &["--api-keys", CLIENT_KEY]).await;
    let body = json!({"texts": ["hello"]});
    let send = |url: String, key: Option<&'static str>| {
        let request = http().post(url).json(&body);
        let request = match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        };
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(send(format!("{}/embed", keyed.url), None).await, 401, "the gateway wants its own key");
    assert_eq!(send(format!("{}/embed", keyed.url), Some(CLIENT_KEY)).await, 200);
    assert_eq!(
        send(format!("{}/embed", unkeyed.url), Some(CLIENT_KEY)).await,
        401,
        "the upstream refuses a gateway without its key"
    );
    let (status, _) = get(&format!("{}/healthz", keyed.url)).await;
    assert_eq!(status, 200, "health stays open");
}

/// The top hit's id of searching `text` through `base`, and the index and upstream
/// the answer names.
async fn top_hit(base: &str, text: &str) -> (Option<String>, String, String) {
    let (status, headers, found) = post_with_headers(&format!("{base}/v1/search"), &json!({"query": text})).await;
    assert_eq!(status, 200, "{found}");
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let top = found["results"][0]["id"].as_str().map(str::to_string);
    (top, header("x-embedwire-index"), header("x-embedwire-upstream"))
}

fn document(i: usize) -> Value {
    json!({"id": format!("doc-{i}"), "text": format!("document {i} about subject {} and theme {}", i * 7, i * 13)})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_name_their_index_and_losing_it_is_degraded() {
    let first = pseudo_server().await;
    let second = pseudo_server().await;
    let gateway = Gateway::start(&[&first.url, &second.url]).await;
    let base = gateway.url.as_str();

    let documents: Vec<Value> = (0..200).map(document).collect();
    let job = ingest_and_wait(base, Value::Array(documents)).await;
    assert_eq!((job["status"].as_str(), job["processed_documents"].as_u64()), (Some("completed"), Some(200)));

    let (status, health) = get(&format!("{base}/healthz")).await;
    assert_eq!(status, 200);
    assert_eq!((health["status"].as_str(), health["document_count"].as_u64()), (Some("ok"), Some(200)), "{health}");
    let upstreams = health["upstreams"].as_array().expect("the gateway lists its upstreams");
    assert_eq!(upstreams.len(), 2, "{health}");
    let index_of = |u: &Value| u["index_id"].as_str().unwrap().to_string();
    let (first_index, second_index) = (index_of(&upstreams[0]), index_of(&upstreams[1]));
    assert_ne!(first_index, second_index, "embedded stores: one index per server: {health}");
    for (upstream, url) in upstreams.iter().zip([&first.url, &second.url]) {
        assert_eq!(upstream["address"], url.as_str());
        assert_eq!(upstream["healthy"], true);
        assert_eq!(upstream["store_kind"], "embedded");
        assert_eq!(upstream["shared"], false);
    }
    assert_eq!((upstreams[0]["answering"].clone(), upstreams[1]["answering"].clone()), (json!(true), json!(false)));
    assert_eq!(
        (upstreams[0]["document_count"].clone(), upstreams[1]["document_count"].clone()),
        (json!(200), json!(0))
    );
    assert_eq!(health["store"]["index_id"], first_index.as_str());
    assert_eq!(health["store"]["kind"], "embedded");
    assert_eq!(health["store"]["shared"], false);
    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "{ready}");

    // Every search finds its document, in the first server's index.
    let probes: Vec<usize> = (0..10).map(|i| i * 20 + 3).collect();
    let mut found = 0;
    for &i in &probes {
        let text = document(i)["text"].as_str().unwrap().to_string();
        let (top, index, upstream) = top_hit(base, &text).await;
        found += usize::from(top.as_deref() == Some(format!("doc-{i}").as_str()));
        assert_eq!((index.as_str(), upstream.as_str()), (first_index.as_str(), first.url.as_str()));
    }
    assert_eq!(found, 10, "10/10 found before the failover");

    first.process.stop().await.unwrap(); // SIGKILL

    let (status, health) = get(&format!("{base}/healthz")).await;
    assert_eq!(status, 200, "healthz stays 200: {health}");
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["model_loaded"], true, "{health}");
    assert_eq!(health["document_count"], 0, "{health}");
    let detail = health["detail"].as_str().expect("detail says why");
    assert_eq!(
        detail,
        format!("index {first_index} at {} unreachable; answering from index {second_index}", first.url),
        "{health}"
    );
    assert_eq!(health["store"]["index_id"], second_index.as_str(), "{health}");
    let upstreams = health["upstreams"].as_array().unwrap();
    assert_eq!((upstreams[0]["healthy"].clone(), upstreams[0]["answering"].clone()), (json!(false), json!(false)));
    assert_eq!(upstreams[0]["index_id"], first_index.as_str(), "the lost index keeps its name");
    assert_eq!((upstreams[1]["healthy"].clone(), upstreams[1]["answering"].clone()), (json!(true), json!(true)));

    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!((ready["ready"].clone(), ready["degraded"].clone()), (json!(false), json!(true)), "{ready}");
    assert_eq!(ready["detail"], format!("degraded: {detail}"));

    // The same searches now answer from the second index, which holds nothing.
    let mut found = 0;
    for &i in &probes {
        let text = document(i)["text"].as_str().unwrap().to_string();
        let (top, index, upstream) = top_hit(base, &text).await;
        found += usize::from(top.is_some());
        assert_eq!((index.as_str(), upstream.as_str()), (second_index.as_str(), second.url.as_str()));
    }
    assert_eq!(found, 0, "the second index holds none of the documents");
    let metrics = http().get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("embedwire_gateway_index_degraded 1"), "{metrics}");
}

/// Polls `/healthz` until `wanted` holds (each call probes every upstream); the last
/// answer. Fails after 30 s, showing it.
async fn health_when(base: &str, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, health) = get(&format!("{base}/healthz")).await;
        assert_eq!(status, 200, "{health}");
        if wanted(&health) {
            return health;
        }
        assert!(Instant::now() < deadline, "/healthz: still not {what} after 30 s: {health}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of the metric line starting with `series ` (name and labels).
async fn metric(base: &str, series: &str) -> Option<f64> {
    let page = http().get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    let prefix = format!("{series} ");
    page.lines().find_map(|line| line.strip_prefix(&prefix)).map(|value| value.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_to_an_index_that_missed_documents_is_degraded_until_they_are_reingested() {
    let mut first = RestartableServer::start(&["--backend", "pseudo"]).await;
    let second = pseudo_server().await;
    let gateway = Gateway::start(&[&first.url, &second.url]).await;
    let base = gateway.url.as_str();
    let (first_url, second_url) = (first.url.clone(), second.url.clone());
    let upstream_series = |name: &str, url: &str| format!("{name}{{upstream=\"{url}\"}}");

    let job = ingest_and_wait(base, Value::Array((0..20).map(document).collect())).await;
    assert_eq!((job["status"].as_str(), job["processed_documents"].as_u64()), (Some("completed"), Some(20)));
    let health = health_when(base, "ok with 20 documents in the first index", |h| {
        h["upstreams"][0]["document_count"] == 20 && h["upstreams"][0]["pending_documents"] == 0
    })
    .await;
    assert_eq!(health["status"], "ok", "{health}");
    let first_index = health["upstreams"][0]["index_id"].as_str().unwrap().to_string();
    let second_index = health["upstreams"][1]["index_id"].as_str().unwrap().to_string();
    assert_eq!(health["upstreams"][1]["document_count"], 0, "the second index was never written: {health}");
    assert_eq!(metric(base, "embedwire_gateway_index_divergent").await, Some(0.0));

    // Failover: the first server dies, and 5 more documents go to the second index.
    first.kill().await;
    health_when(base, "aware the first upstream is down", |h| h["upstreams"][0]["healthy"] == false).await;
    let missed: Vec<Value> = (20..25).map(document).collect();
    let job = ingest_and_wait(base, Value::Array(missed.clone())).await;
    assert_eq!((job["status"].as_str(), job["processed_documents"].as_u64()), (Some("completed"), Some(5)));
    let health =
        health_when(base, "with the second index's 5 documents", |h| h["upstreams"][1]["document_count"] == 5).await;
    assert_eq!(health["status"], "degraded", "the index holding 20 documents is unreachable: {health}");
    assert_eq!(health["store"]["index_id"], second_index.as_str(), "answering from the second index: {health}");

    // Failback: the first server is back with its own index, which lacks those 5.
    first.restart().await;
    let health =
        health_when(base, "answering from the first upstream again", |h| h["upstreams"][0]["answering"] == true).await;
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(
        health["detail"].as_str().unwrap_or_default(),
        format!(
            "index {first_index} at {first_url} lacks 5 documents ingested into another index while it did not \
             answer; document counts: {first_url} 20, {second_url} 5; answering from index {first_index}"
        ),
        "{health}"
    );
    let upstreams = health["upstreams"].as_array().unwrap();
    assert_eq!(upstreams[0]["index_id"], first_index.as_str(), "the same index, from its data directory");
    assert_eq!(
        (&upstreams[0]["document_count"], &upstreams[1]["document_count"], &upstreams[0]["missing_documents"]),
        (&json!(20), &json!(5), &json!(5)),
        "{health}"
    );
    assert_eq!((&upstreams[1]["healthy"], &upstreams[1]["answering"]), (&json!(true), &json!(false)), "{health}");
    assert_eq!(health["document_count"], 20, "{health}");
    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!((status, &ready["degraded"]), (503, &json!(true)), "{ready}");
    assert_eq!(metric(base, "embedwire_gateway_index_degraded").await, Some(1.0));
    assert_eq!(metric(base, "embedwire_gateway_index_divergent").await, Some(1.0));
    let documents = "embedwire_gateway_upstream_documents";
    assert_eq!(metric(base, &upstream_series(documents, &first_url)).await, Some(20.0));
    assert_eq!(metric(base, &upstream_series(documents, &second_url)).await, Some(5.0));
    let missing = "embedwire_gateway_upstream_missing_documents";
    assert_eq!(metric(base, &upstream_series(missing, &first_url)).await, Some(5.0));
    assert_eq!(metric(base, &upstream_series(missing, &second_url)).await, Some(0.0));
    // What degraded means: a document ingested during the failover is not found.
    let text = document(22)["text"].as_str().unwrap().to_string();
    let (top, index, upstream) = top_hit(base, &text).await;
    assert_eq!((index.as_str(), upstream.as_str()), (first_index.as_str(), first_url.as_str()));
    assert_ne!(top.as_deref(), Some("doc-22"), "the answering index lacks it");

    // Healing: re-ingest the missed documents through the gateway, into the index
    // answering now.
    let job = ingest_and_wait(base, Value::Array(missed)).await;
    assert_eq!((job["status"].as_str(), job["processed_documents"].as_u64()), (Some("completed"), Some(5)));
    let health = health_when(base, "ok", |h| h["status"] == "ok").await;
    assert_eq!(health.get("detail"), None, "{health}");
    let upstreams = health["upstreams"].as_array().unwrap();
    assert_eq!(
        (&upstreams[0]["document_count"], &upstreams[1]["document_count"], upstreams[0].get("missing_documents")),
        (&json!(25), &json!(5), None),
        "the second index keeps its 5, which the answering one now holds too: {health}"
    );
    assert_eq!(upstreams[0]["answering"], true, "{health}");
    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(metric(base, "embedwire_gateway_index_degraded").await, Some(0.0));
    assert_eq!(metric(base, "embedwire_gateway_index_divergent").await, Some(0.0));
    assert_eq!(metric(base, &upstream_series(missing, &first_url)).await, Some(0.0));
    assert_eq!(metric(base, &upstream_series(documents, &first_url)).await, Some(25.0));
    let (top, _, upstream) = top_hit(base, &text).await;
    assert_eq!((top.as_deref(), upstream.as_str()), (Some("doc-22"), first_url.as_str()));
}
