//! The search page in a real headless Chromium, driven over the WebDriver protocol
//! (Debian's chromium + chromedriver, installed by scripts/setup-tools.sh): a person's
//! steps, typing a query and pressing Search, then the ranked results read back from
//! the page and compared with the /v1/search answer.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{http, ingest_and_wait, post, start_server};
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
    let session = driver.new_session().await;
    let s = format!("/session/{session}");
    driver.call(reqwest::Method::POST, &format!("{s}/url"), json!({"url": format!("{}/", server.url)})).await;
    let find = |selector: &'static str| {
        let driver = &driver;
        let s = s.clone();
        async move {
            let found = driver
                .call(
                    reqwest::Method::POST,
                    &format!("{s}/element"),
                    json!({"using": "css selector", "value": selector}),
                )
                .await;
            found[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {selector}: {found}")).to_string()
        }
    };
    let query = "which animal purrs?";
    let input = find("#query").await;
    driver.call(reqwest::Method::POST, &format!("{s}/element/{input}/value"), json!({"text": query})).await;
    let top_k = find("#top-k").await;
    driver.call(reqwest::Method::POST, &format!("{s}/element/{top_k}/clear"), json!({})).await;
    driver.call(reqwest::Method::POST, &format!("{s}/element/{top_k}/value"), json!({"text": "3"})).await;
    let button = find("#search-button").await;
    driver.call(reqwest::Method::POST, &format!("{s}/element/{button}/click"), json!({})).await;

    let read_results = "const status = document.getElementById('status'); \
        if (status.dataset.done !== 'true') return null; \
        return {status: status.textContent, results: Array.from(document.querySelectorAll('#results li.result')).map(li => ({ \
            score: li.querySelector('.score').textContent, id: li.querySelector('.doc-id').textContent, \
            text: li.querySelector('.text').textContent, metadata: li.querySelector('.metadata').textContent}))};";
    let deadline = Instant::now() + Duration::from_secs(20);
    let shown = loop {
        let value = driver
            .call(reqwest::Method::POST, &format!("{s}/execute/sync"), json!({"script": read_results, "args": []}))
            .await;
        if !value.is_null() {
            break value;
        }
        assert!(Instant::now() < deadline, "the page never showed results");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    driver.call(reqwest::Method::DELETE, &s, Value::Null).await;

    let shown_results = shown["results"].as_array().unwrap();
    assert!(shown["status"].as_str().unwrap().starts_with("3 results"), "{shown}");
    assert_eq!(shown_results.len(), 3, "{shown}");
    assert_eq!(shown_results[0]["id"], "cats", "the page ranks the cat document first: {shown}");
    assert_eq!(shown_results[0]["metadata"], "topic: animals");

    let (_, api) = post(&format!("{}/v1/search", server.url), &json!({"query": query, "top_k": 3})).await;
    for (on_page, from_api) in shown_results.iter().zip(api["results"].as_array().unwrap()) {
        assert_eq!(on_page["id"], from_api["id"]);
        assert_eq!(on_page["text"], from_api["text"]);
        let score: f64 = on_page["score"].as_str().unwrap().parse().unwrap();
        assert!((score - from_api["score"].as_f64().unwrap()).abs() < 1e-4, "{on_page} vs {from_api}");
    }
}
