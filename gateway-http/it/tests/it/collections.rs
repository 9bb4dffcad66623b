//! Collections through the standalone gateway: the gateway checks its own scoped keys
//! (what a client reaches is decided there), names the collection to the server it
//! forwards to (one upstream key, an admin key there), and nothing of one collection
//! shows through another.

use crate::common;

use std::time::{Duration, Instant};

use common::{Gateway, http};
use reqwest::Method;
use serde_json::{Value, json};

const UPSTREAM_ADMIN: &str = "upstream-admin-key-0123456789";
const ADMIN: &str = "gateway-admin-key-0123456789";
const READ_A: &str = "gateway-read-a-key-0123456789";
const WRITE_A: &str = "gateway-write-a-key-0123456789";

/// One request through the gateway with `key`: its status and JSON body (null if none).
async fn call(method: Method, url: String, key: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = http().request(method, url).bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Ingests one document into collection `name` with `key` and waits for its job.
async fn ingest(base: &str, name: &str, key: &str, id: &str, text: &str) {
    let at = format!("{base}/v1/collections/{name}");
    let documents = json!({"documents": [{"id": id, "text": text}]});
    let (status, job) = call(Method::POST, format!("{at}/ingest"), key, Some(documents)).await;
    assert_eq!(status, 200, "{job}");
    let job_id = job["job_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, job) = call(Method::GET, format!("{at}/jobs/{job_id}"), key, None).await;
        assert_eq!(status, 200, "{job}");
        if job["status"] == "completed" {
            return;
        }
        assert!(Instant::now() < deadline && job["status"] != "failed", "{job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_forwards_collections_and_scopes_its_own_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (server_keys, gateway_keys) = (dir.path().join("server-keys"), dir.path().join("gateway-keys"));
    std::fs::write(&server_keys, format!("{UPSTREAM_ADMIN} admin\n")).unwrap();
    let scoped = format!("{ADMIN} admin\n{READ_A} read-only collections=a\n{WRITE_A} read-write collections=a\n");
    std::fs::write(&gateway_keys, scoped).unwrap();
    let server = common::start_server(&["--backend", "pseudo", "--api-keys-file", server_keys.to_str().unwrap()]).await;
    let gateway_flags = ["--api-keys-file", gateway_keys.to_str().unwrap(), "--upstream-api-key", UPSTREAM_ADMIN];
    let gateway = Gateway::start_with(&[&server.url], &gateway_flags).await;
    let base = gateway.url.as_str();
    let collections = format!("{base}/v1/collections");

    // Only the gateway's admin key manages collections.
    let (status, refused) = call(Method::POST, collections.clone(), WRITE_A, Some(json!({"name": "c"}))).await;
    assert_eq!(status, 403, "{refused}");
    for name in ["a", "b"] {
        let (status, made) = call(Method::POST, collections.clone(), ADMIN, Some(json!({"name": name}))).await;
        assert_eq!((status, made["name"].as_str()), (200, Some(name)), "{made}");
    }

    // The same document id in both, different texts; each key writes where it may.
    ingest(base, "a", WRITE_A, "same", "alpha apples in the orchard").await;
    ingest(base, "b", ADMIN, "same", "beta bananas on the boat").await;
    let (status, refused) =
        call(Method::POST, format!("{collections}/b/ingest"), WRITE_A, Some(json!({"documents": [{"text": "x"}]})))
            .await;
    assert_eq!(status, 403, "a key scoped to a writes nothing into b: {refused}");
    let (status, refused) =
        call(Method::POST, format!("{collections}/a/ingest"), READ_A, Some(json!({"documents": [{"text": "x"}]})))
            .await;
    assert_eq!(status, 403, "a read-only key writes nothing: {refused}");

    // Reads: each collection answers with its own document; out of scope is refused.
    let search = json!({"query": "apples", "top_k": 5});
    let (status, found) = call(Method::POST, format!("{collections}/a/search"), READ_A, Some(search.clone())).await;
    assert_eq!(status, 200, "{found}");
    let texts: Vec<&str> = found["results"].as_array().unwrap().iter().map(|h| h["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["alpha apples in the orchard"], "{found}");
    let (status, refused) = call(Method::POST, format!("{collections}/b/search"), READ_A, Some(search.clone())).await;
    assert_eq!(status, 403, "{refused}");
    let (status, document) = call(Method::GET, format!("{collections}/b/documents/same"), ADMIN, None).await;
    assert_eq!((status, document["text"].as_str()), (200, Some("beta bananas on the boat")), "{document}");
    let (status, refused) = call(Method::GET, format!("{collections}/b/documents/same"), READ_A, None).await;
    assert_eq!(status, 403, "{refused}");

    // Listings show a key only what it reaches.
    let names = |listing: &Value| -> Vec<String> {
        listing["collections"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
    };
    let (status, listing) = call(Method::GET, collections.clone(), READ_A, None).await;
    assert_eq!((status, names(&listing)), (200, vec!["a".to_string()]), "{listing}");
    let (_, listing) = call(Method::GET, collections.clone(), ADMIN, None).await;
    assert_eq!(names(&listing), ["a", "b"], "{listing}");

    // Deleting b leaves a as it was.
    let (status, deleted) = call(Method::DELETE, format!("{collections}/b"), ADMIN, None).await;
    assert_eq!((status, deleted["deleted_documents"].as_u64()), (200, Some(1)), "{deleted}");
    let (status, gone) = call(Method::POST, format!("{collections}/b/search"), ADMIN, Some(search.clone())).await;
    assert_eq!(status, 404, "{gone}");
    let (status, document) = call(Method::GET, format!("{collections}/a/documents/same"), READ_A, None).await;
    assert_eq!((status, document["text"].as_str()), (200, Some("alpha apples in the orchard")), "{document}");
}
