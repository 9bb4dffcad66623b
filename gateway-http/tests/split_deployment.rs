//! The split deployment: embedwire-gateway in front of two embedwire-server
//! processes. Embed traffic reaches both; when one is killed, requests keep
//! succeeding on the other.

mod common;

use common::{Gateway, get, http, post, pseudo_server};
use serde_json::json;

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
    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "still ready with one upstream: {ready}");
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
