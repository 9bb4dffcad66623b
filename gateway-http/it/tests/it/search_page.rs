//! The search page in a real headless Chromium, driven over the WebDriver protocol
//! (Debian's chromium + chromedriver, installed by scripts/setup-tools.sh): a person's
//! steps, typing a query and pressing Search, then the ranked results read back from
//! the page and compared with the /v1/search answer; on a server with a cross-encoder,
//! the rerank checkbox's three states and each hit's rerank score beside its vector
//! score; the mode switch, with a hybrid hit's vector and keyword scores; the
//! collection switch.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{http, ingest_and_wait, ingest_at_and_wait, post, start_server, venv_python, workspace};
use serde_json::{Value, json};

/// WebDriver's key for element references.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

struct Driver {
    child: tokio::process::Child,
    url: String,
    profile: std::path::PathBuf,
}

impl Driver {
    async fn start() -> Driver {
        // chromedriver takes a port, not a listener: find a free one.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver (run scripts/setup-tools.sh)");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while http().get(format!("{url}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = std::env::temp_dir().join(format!("embedwire-chromium-{}-{port}", std::process::id()));
        Driver { child, url, profile }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let request = http().request(method, format!("{}{path}", self.url));
        let request = if body.is_null() { request } else { request.json(&body) };
        let response = request.send().await.expect("webdriver call");
        let status = response.status();
        let answer: Value = response.json().await.expect("webdriver JSON");
        assert!(status.is_success(), "webdriver {path}: {answer}");
        answer["value"].clone()
    }

    async fn new_session(&self) -> String {
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push(format!("--user-data-dir={}", self.profile.display()));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
        }}});
        let session = self.call(reqwest::Method::POST, "/session", capabilities).await;
        session["sessionId"].as_str().expect("session id").to_string()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// One browser session on the search page.
struct Page<'a> {
    driver: &'a Driver,
    /// `/session/{id}`.
    session: String,
}

/// Reads the page once the status line says the search is done: the status and, per
/// result, the shown score, the vector score beside it (reranked hits), the id, the
/// text and the metadata.
const READ_RESULTS: &str = "const status = document.getElementById('status'); \
    if (status.dataset.done !== 'true') return null; \
    const text = (li, selector) => { const node = li.querySelector(selector); return node ? node.textContent : null; }; \
    return {status: status.textContent, results: Array.from(document.querySelectorAll('#results li.result')).map(li => ({ \
        score: text(li, '.score'), vector_score: text(li, '.vector-score'), \
        keyword_score: text(li, '.keyword-score'), id: text(li, '.doc-id'), \
        text: text(li, '.text'), metadata: text(li, '.metadata')}))};";

impl<'a> Page<'a> {
    async fn open(driver: &'a Driver, url: &str) -> Page<'a> {
        let session = format!("/session/{}", driver.new_session().await);
        driver.call(reqwest::Method::POST, &format!("{session}/url"), json!({"url": url})).await;
        Page { driver, session }
    }

    async fn find(&self, selector: &str) -> String {
        let found = self
            .driver
            .call(
                reqwest::Method::POST,
                &format!("{}/element", self.session),
                json!({"using": "css selector", "value": selector}),
            )
            .await;
        found[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {selector}: {found}")).to_string()
    }

    async fn on_element(&self, selector: &str, action: &str, body: Value) {
        let element = self.find(selector).await;
        self.driver.call(reqwest::Method::POST, &format!("{}/element/{element}/{action}", self.session), body).await;
    }

    async fn script(&self, script: &str) -> Value {
        let path = format!("{}/execute/sync", self.session);
        self.driver.call(reqwest::Method::POST, &path, json!({"script": script, "args": []})).await
    }

    /// Presses Search and waits for the page to show the answer.
    async fn search(&self) -> Value {
        self.on_element("#search-button", "click", json!({})).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let value = self.script(READ_RESULTS).await;
            if !value.is_null() {
                return value;
            }
            assert!(Instant::now() < deadline, "the page never showed results");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn close(self) {
        self.driver.call(reqwest::Method::DELETE, &self.session, Value::Null).await;
    }
}

fn shown_score(value: &Value) -> f64 {
    value.as_str().unwrap_or_else(|| panic!("no score shown: {value}")).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_searches_from_the_page() {
    let server = start_server(&[]).await; // the real model: the ranking must make sense
    let documents = json!([
        {"id": "cats", "text": "Cats are small furry pets that purr and chase mice.", "metadata": {"topic": "animals"}},
        {"id": "rust", "text": "Rust is a systems programming language focused on safety.", "metadata": {"topic": "code"}},
        {"id": "coffee", "text": "Espresso is coffee brewed by forcing hot water through ground beans.", "metadata": {"topic": "food"}},
        {"id": "sea", "text": "The ocean covers most of the surface of the Earth.", "metadata": {"topic": "nature"}},
    ]);
    let job = ingest_and_wait(&server.url, documents).await;
    assert_eq!(job["status"], "completed");

    let driver = Driver::start().await;
    let page = Page::open(&driver, &format!("{}/", server.url)).await;
    let query = "which animal purrs?";
    page.on_element("#query", "value", json!({"text": query})).await;
    page.on_element("#top-k", "clear", json!({})).await;
    page.on_element("#top-k", "value", json!({"text": "3"})).await;
    let shown = page.search().await;
    // Hybrid: an exact rare word ("Espresso") and a paraphrase, both sides' scores shown.
    page.on_element("#mode option[value=hybrid]", "click", json!({})).await;
    page.on_element("#query", "clear", json!({})).await;
    let hybrid_query = "Espresso drinks";
    page.on_element("#query", "value", json!({"text": hybrid_query})).await;
    let hybrid = page.search().await;
    page.close().await;

    let request = json!({"query": hybrid_query, "top_k": 3, "mode": "hybrid"});
    let (_, api) = post(&format!("{}/v1/search", server.url), &request).await;
    let (on_page, from_api) = (&hybrid["results"][0], &api["results"][0]);
    assert_eq!((&on_page["id"], &from_api["id"]), (&json!("coffee"), &json!("coffee")), "{hybrid} {api}");
    assert!((shown_score(&on_page["score"]) - from_api["score"].as_f64().unwrap()).abs() < 1e-4, "{on_page}");
    assert!((shown_score(&on_page["vector_score"]) - from_api["vector_score"].as_f64().unwrap()).abs() < 1e-4);
    assert!((shown_score(&on_page["keyword_score"]) - from_api["keyword_score"].as_f64().unwrap()).abs() < 1e-4);

    let shown_results = shown["results"].as_array().unwrap();
    assert_eq!(shown["status"].as_str().unwrap().split(" results").next(), Some("3"), "{shown}");
    assert!(!shown["status"].as_str().unwrap().contains("reranked"), "no cross-encoder, no rerank: {shown}");
    assert_eq!(shown_results.len(), 3, "{shown}");
    assert_eq!(shown_results[0]["id"], "cats", "the page ranks the cat document first: {shown}");
    assert_eq!(shown_results[0]["metadata"], "topic: animals");

    let (_, api) = post(&format!("{}/v1/search", server.url), &json!({"query": query, "top_k": 3})).await;
    for (on_page, from_api) in shown_results.iter().zip(api["results"].as_array().unwrap()) {
        assert_eq!(on_page["id"], from_api["id"]);
        assert_eq!(on_page["text"], from_api["text"]);
        assert!(
            (shown_score(&on_page["score"]) - from_api["score"].as_f64().unwrap()).abs() < 1e-4,
            "{on_page} vs {from_api}"
        );
        assert!(on_page["vector_score"].is_null(), "a hit that was not reranked has one score: {on_page}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reranked_hits_show_the_rerank_score_beside_the_vector_score() {
    // A tiny random cross-encoder (scripts/model/make_tiny_cross_encoder.py) on the
    // pseudo backend: the scores mean nothing, but they differ from the vector scores
    // and reorder the hits, which is what the page must show.
    let model = std::env::temp_dir().join(format!("embedwire-page-cross-encoder-{}", std::process::id()));
    let output = tokio::process::Command::new(venv_python())
        .arg(workspace().join("scripts/model/make_tiny_cross_encoder.py"))
        .arg(&model)
        .output()
        .await
        .expect("python runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let server = start_server(&[
        "--backend",
        "pseudo",
        "--rerank-model-dir",
        model.to_str().unwrap(),
        "--rerank-candidates",
        "8",
    ])
    .await;
    let documents: Vec<Value> = [
        "Paris is the capital and most populous city of France.",
        "Berlin is the capital of Germany.",
        "How do I reset my password?",
        "A man is eating food.",
        "The quick brown fox jumps over the lazy dog.",
        "Rust guarantees memory safety without a garbage collector.",
    ]
    .iter()
    .enumerate()
    .map(|(i, text)| json!({"id": format!("p{i}"), "text": text}))
    .collect();
    let job = ingest_and_wait(&server.url, Value::Array(documents)).await;
    assert_eq!(job["status"], "completed");

    let driver = Driver::start().await;
    let page = Page::open(&driver, &format!("{}/", server.url)).await;
    let query = "What is the capital of France?";
    page.on_element("#query", "value", json!({"text": query})).await;
    page.on_element("#top-k", "clear", json!({})).await;
    page.on_element("#top-k", "value", json!({"text": "4"})).await;
    let checkbox = "const box = document.getElementById('rerank'); return {indeterminate: box.indeterminate, checked: box.checked};";
    assert_eq!(page.script(checkbox).await, json!({"indeterminate": true, "checked": false}), "the server decides");
    let by_default = page.search().await;
    page.on_element("#rerank", "click", json!({})).await;
    assert_eq!(page.script(checkbox).await, json!({"indeterminate": false, "checked": true}));
    let ticked = page.search().await;
    page.on_element("#rerank", "click", json!({})).await;
    assert_eq!(page.script(checkbox).await, json!({"indeterminate": false, "checked": false}));
    let cleared = page.search().await;
    page.close().await;
    let _ = std::fs::remove_dir_all(&model);

    let search = |rerank: Option<bool>| {
        let mut body = json!({"query": query, "top_k": 4});
        if let Some(rerank) = rerank {
            body["rerank"] = json!(rerank);
        }
        let url = format!("{}/v1/search", server.url);
        async move {
            let (status, answer) = post(&url, &body).await;
            assert_eq!(status, 200, "{answer}");
            answer
        }
    };
    for (shown, rerank, reranked) in
        [(&by_default, None, true), (&ticked, Some(true), true), (&cleared, Some(false), false)]
    {
        let api = search(rerank).await;
        let from_api = api["results"].as_array().unwrap();
        let on_page = shown["results"].as_array().unwrap();
        assert_eq!(on_page.len(), 4, "{shown}");
        assert_eq!(on_page.len(), from_api.len());
        assert_eq!(shown["status"].as_str().unwrap().ends_with(", reranked"), reranked, "rerank {rerank:?}: {shown}");
        for (hit, expected) in on_page.iter().zip(from_api) {
            assert_eq!(hit["id"], expected["id"], "rerank {rerank:?}: the page keeps the API's order");
            let score = shown_score(&hit["score"]);
            assert!((score - expected["score"].as_f64().unwrap()).abs() < 1e-4, "{hit} vs {expected}");
            if reranked {
                let rerank_score = expected["rerank_score"].as_f64().expect("a reranked hit has its rerank score");
                let vector_score = expected["vector_score"].as_f64().expect("and its vector score");
                assert!((score - rerank_score).abs() < 1e-4, "the page shows the rerank score: {hit} vs {expected}");
                assert!((shown_score(&hit["vector_score"]) - vector_score).abs() < 1e-4, "{hit} vs {expected}");
            } else {
                assert!(expected.get("rerank_score").is_none() && expected.get("vector_score").is_none(), "{expected}");
                assert!(hit["vector_score"].is_null(), "{hit}");
            }
        }
    }
    // The rerank scores are not the vector scores (or the page could show either).
    let hits = search(Some(true)).await;
    assert!(
        hits["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|hit| (hit["rerank_score"].as_f64().unwrap() - hit["vector_score"].as_f64().unwrap()).abs() > 1e-3),
        "{hits}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_entry_per_document_with_its_title_highlights_and_more_passages_by_keyboard() {
    // Small chunks, so that the manual has several passages about the pump.
    let server = start_server(&["--backend", "pseudo", "--chunk-tokens", "16", "--chunk-overlap-tokens", "4"]).await;
    let manual = "Pump manual for the garden station. \
                  The pump needs priming before its first start. Prime the pump through the top port. \
                  A pump that runs dry overheats its seal. Pumps are checked every spring.";
    let documents = json!([
        {"id": "manual", "text": manual},
        {"id": "note", "text": "Short note. The garden hose is green and long; a pump is kept elsewhere."},
        {"id": "other", "text": "Nothing about it here at all."},
    ]);
    assert_eq!(ingest_and_wait(&server.url, documents).await["status"], "completed");

    let driver = Driver::start().await;
    let page = Page::open(&driver, &format!("{}/", server.url)).await;
    page.on_element("#mode option[value=keyword]", "click", json!({})).await;
    // Keyboard only: type the query and press Enter in the field.
    page.on_element("#query", "value", json!({"text": "pumps\u{E007}"})).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let read = "const status = document.getElementById('status'); if (status.dataset.done !== 'true') return null; \
        return {status: status.textContent, results: Array.from(document.querySelectorAll('#results li.result')).map(li => ({ \
          id: li.dataset.id, title: li.querySelector('.title').textContent, \
          marks: Array.from(li.querySelectorAll(':scope > .text mark')).map(m => m.textContent), \
          more: li.querySelector('details.more summary') ? li.querySelector('details.more summary').textContent : null, \
          hidden_passages: li.querySelectorAll('details.more .passage').length}))};";
    let shown = loop {
        let value = page.script(read).await;
        if !value.is_null() {
            break value;
        }
        assert!(Instant::now() < deadline, "the page never showed results");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let results = shown["results"].as_array().unwrap();
    let ids: Vec<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["manual", "note"], "one entry per document, the manual first: {shown}");
    assert!(shown["status"].as_str().unwrap().starts_with("2 results"), "{shown}");
    assert_eq!(results[0]["title"], "Pump manual for the garden station.", "its first sentence: {shown}");
    assert_eq!(results[1]["title"], "Short note.");
    for result in results {
        let marks = result["marks"].as_array().unwrap();
        assert!(!marks.is_empty(), "the matched words are marked: {result}");
        assert!(
            marks.iter().all(|m| ["pump", "pumps"].contains(&m.as_str().unwrap().to_lowercase().as_str())),
            "{result}"
        );
    }
    // The manual's other passages wait behind "2 more passages", which opens from the
    // keyboard (Enter on the focused summary).
    assert_eq!(results[0]["more"], "2 more passages", "{shown}");
    assert_eq!(results[0]["hidden_passages"], 2);
    assert!(results[1]["more"].is_null(), "one passage, nothing more: {shown}");
    let open = "return document.querySelector('li.result details.more').open;";
    assert_eq!(page.script(open).await, json!(false));
    page.on_element("li.result details.more summary", "value", json!({"text": "\u{E007}"})).await;
    assert_eq!(page.script(open).await, json!(true), "Enter on the summary opens the passages");
    page.close().await;
}

/// The page lists the named collections and searches the one picked (here through
/// `?collection=`), citing its documents: nothing of the default collection shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_searches_the_collection_picked() {
    let server = start_server(&[]).await;
    let base = server.url.clone();
    let outside = json!([{"id": "default-cat", "text": "Cats purr when they are content."}]);
    assert_eq!(ingest_and_wait(&base, outside).await["status"], "completed");
    let (status, created) = post(&format!("{base}/v1/collections"), &json!({"name": "pets"})).await;
    assert_eq!(status, 200, "{created}");
    let inside = json!([{"id": "pets-cat", "text": "A kitten purrs on the sofa."}]);
    assert_eq!(ingest_at_and_wait(&format!("{base}/v1/collections/pets"), inside).await["status"], "completed");

    let driver = Driver::start().await;
    let page = Page::open(&driver, &format!("{base}/?collection=pets")).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while page.script("return document.getElementById('collection').dataset.loaded || null;").await.is_null() {
        assert!(Instant::now() < deadline, "the collections never loaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let options = page.script("return [...document.querySelectorAll('#collection option')].map(o => o.value);").await;
    assert_eq!(options, json!(["default", "pets"]));
    page.on_element("#query", "value", json!({"text": "a purring cat"})).await;
    let shown = page.search().await;
    page.close().await;
    let ids: Vec<&str> = shown["results"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["pets-cat"], "{shown}");
}
