//! Health transitions, the remote backend (split deployment), overload, cancellation
//! and graceful shutdown.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{
    InProcessServer, ONNX, PSEUDO, READY_TIMEOUT, ServerProcess, embed_request, health_status, rows, wait_serving,
};
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::{EmbedRequest, InfoRequest};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;

/// Polls `condition` until it holds, failing after READY_TIMEOUT.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + READY_TIMEOUT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Texts of about 250 tokens each: slow enough to keep the model busy for a while.
fn long_texts(count: usize) -> Vec<String> {
    common::sentences(count, 240)
}

#[tokio::test(flavor = "multi_thread")]
async fn health_is_not_serving_until_the_upstream_answers() {
    // A port with nothing behind it yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let upstream_address = format!("http://127.0.0.1:{port}");
    let front = InProcessServer::start_unready(&["--backend", "remote", "--upstream", &upstream_address]).await;

    assert_eq!(health_status(&front.address).await, Some(ServingStatus::NotServing));
    let status = front.client().await.embed(embed_request(&["too early"])).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("loading"), "{}", status.message());

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let upstream = InProcessServer::start_on(listener, PSEUDO);
    wait_serving(&front.address).await;
    let via_front = front.client().await.embed(embed_request(&["hello"])).await.unwrap().into_inner();
    let direct = upstream.client().await.embed(embed_request(&["hello"])).await.unwrap().into_inner();
    assert_eq!(rows(&via_front), rows(&direct));
    front.stop().await.unwrap();
    upstream.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn remote_backend_balances_and_routes_around_a_dead_upstream() {
    let first = InProcessServer::start(PSEUDO).await;
    let second = InProcessServer::start(PSEUDO).await;
    let upstreams = format!("{},{}", first.address, second.address);
    let front = InProcessServer::start(&["--backend", "remote", "--upstream", &upstreams]).await;
    let mut client = front.client().await;
    let info = client.info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!((info.backend.as_str(), info.dim), ("remote", 384));

    let texts = common::sentences(3, 6);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let direct = rows(&first.client().await.embed(embed_request(&texts)).await.unwrap().into_inner());
    for _ in 0..10 {
        let via_front = client.embed(embed_request(&texts)).await.unwrap().into_inner();
        assert_eq!(rows(&via_front), direct);
    }
    let served = |server: &InProcessServer| server.engine.stats().requests.load(Ordering::SeqCst);
    assert!(served(&first) >= 5 && served(&second) >= 5, "round robin: {} and {}", served(&first), served(&second));

    first.stop().await.unwrap();
    for _ in 0..10 {
        let via_front = client.embed(embed_request(&texts)).await.expect("the live upstream answers");
        assert_eq!(rows(&via_front.into_inner()), direct);
    }
    front.stop().await.unwrap();
    second.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn remote_backend_returns_the_upstream_models_vectors_and_errors() {
    let upstream = InProcessServer::start(ONNX).await;
    let front = InProcessServer::start(&["--backend", "remote", "--upstream", &upstream.address]).await;
    let request = EmbedRequest { dimensions: Some(128), ..embed_request(&["The cat sits outside", "A man plays"]) };
    let via_front = front.client().await.embed(request.clone()).await.unwrap().into_inner();
    let direct = upstream.client().await.embed(request).await.unwrap().into_inner();
    assert_eq!(via_front.token_counts, direct.token_counts);
    let (a, b) = (rows(&via_front), rows(&direct));
    for (x, y) in a.iter().zip(&b) {
        assert!(common::max_abs_diff(x, y) < 1e-6);
    }
    let too_long = "w ".repeat(300);
    let status = front
        .client()
        .await
        .embed(EmbedRequest { truncate: Some(false), ..embed_request(&[&too_long]) })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("inputs[0]"), "{}", status.message());
    front.stop().await.unwrap();
    upstream.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn overload_is_refused_at_once_with_resource_exhausted() {
    let flags =
        [ONNX, &["--max-in-flight-inputs", "64", "--max-inputs-per-request", "64", "--max-batch-size", "8"]].concat();
    let server = InProcessServer::start(&flags).await;
    let texts = long_texts(64);
    let mut busy_client = server.client().await;
    let busy =
        tokio::spawn(async move { busy_client.embed(EmbedRequest { inputs: texts, ..Default::default() }).await });
    eventually("the big request to be admitted", || server.engine.in_flight_inputs() == 64).await;

    let status = server.client().await.embed(embed_request(&["one more"])).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("overloaded"), "{}", status.message());
    assert!(server.engine.in_flight_inputs() == 64, "the refusal came while the big request still ran");
    assert_eq!(server.engine.stats().rejected_overload.load(Ordering::SeqCst), 1);

    assert_eq!(busy.await.unwrap().expect("admitted work completes").into_inner().count, 64);
    server.client().await.embed(embed_request(&["room again"])).await.expect("capacity is back");
    server.stop().await.unwrap();
}

/// Ingests `count` short documents over HTTP and waits for the job, so searches cost a query embedding.
async fn ingest_over_http(http: &reqwest::Client, base: &str, count: usize) {
    let documents: Vec<_> =
        common::sentences(count, 12).into_iter().map(|text| serde_json::json!({"text": text})).collect();
    let job: serde_json::Value = http
        .post(format!("{base}/v1/ingest"))
        .json(&serde_json::json!({"documents": documents}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = format!("{base}/v1/jobs/{}", job["job_id"].as_str().expect("a job id"));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let job: serde_json::Value = http.get(&url).send().await.unwrap().json().await.unwrap();
        if job["status"] == "completed" {
            return;
        }
        assert!(Instant::now() < deadline && job["status"] != "failed", "{job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn closed_loop_clients_of_64_callers_are_never_refused_at_default_flags() {
    // Default flags: what `make run` serves. 64 callers start at once (the first burst is
    // what the old time-based default refused), each waiting for its answer before the
    // next call: one text per gRPC call, 32 per gRPC call, and HTTP /v1/search, all at once.
    let server = InProcessServer::start(ONNX).await;
    let (base, http) = (server.address.clone(), reqwest::Client::new());
    ingest_over_http(&http, &base, 50).await;
    const CALLERS: usize = 64;
    const CALLS_EACH: usize = 2;
    let texts = common::sentences(CALLERS * CALLS_EACH * 32, 12);
    let mut callers = Vec::new();
    for caller in 0..CALLERS {
        let (mut client, texts) = (server.client().await, texts.clone());
        let (http, base) = (http.clone(), base.clone());
        callers.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            for call in 0..CALLS_EACH {
                let first = (caller * CALLS_EACH + call) * 32;
                let one = client.embed(EmbedRequest { inputs: vec![texts[first].clone()], ..Default::default() });
                if let Err(status) = one.await {
                    failures.push(format!("Embed x1: {status:?}"));
                }
                let many = texts[first..first + 32].to_vec();
                if let Err(status) = client.embed(EmbedRequest { inputs: many, ..Default::default() }).await {
                    failures.push(format!("Embed x32: {status:?}"));
                }
                let query = serde_json::json!({"query": texts[first + 1], "top_k": 5});
                let answer = http.post(format!("{base}/v1/search")).json(&query).send().await.unwrap();
                if !answer.status().is_success() {
                    failures.push(format!("/v1/search: {} {}", answer.status(), answer.text().await.unwrap()));
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for caller in callers {
        failures.extend(caller.await.unwrap());
    }
    assert!(
        failures.is_empty(),
        "{} of {} calls failed, e.g. {:?}",
        failures.len(),
        CALLERS * CALLS_EACH * 3,
        failures.first()
    );
    assert_eq!(server.engine.stats().rejected_overload.load(Ordering::SeqCst), 0);
    server.stop().await.unwrap();
}

/// The most interactive calls in flight at once while it runs.
struct InFlightWatch {
    most: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl InFlightWatch {
    fn start(stats: &Arc<embedwire_server::stats::Stats>) -> Self {
        let (most, done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let task = {
            let (stats, most, done) = (stats.clone(), most.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::SeqCst) {
                    most.fetch_max(stats.interactive_calls.load(Ordering::SeqCst), Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            })
        };
        InFlightWatch { most, done, task }
    }

    async fn most(self) -> u64 {
        self.done.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        self.most.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_loop_burst_past_the_default_bound_is_refused_fast_with_a_retry_hint() {
    // The default bound is 2 x --max-batch-size interactive calls: 16 here. 400 one-text
    // calls sent at once, none waiting for another (an open loop), are real overload.
    let server = InProcessServer::start(&[ONNX, &["--max-batch-size", "8"]].concat()).await;
    let info = server.client().await.info(InfoRequest {}).await.unwrap().into_inner();
    let limits = info.limits.expect("limits");
    assert_eq!(limits.max_interactive_calls, 16, "Info shows the bound in force: {}", limits.admission);
    assert_eq!(limits.max_queue_ms, 0);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server.client().await);
    }
    // Watches the calls in flight while the burst runs: the queue, and so an accepted
    // call's wait, stays bounded by the bound, whatever was offered.
    let stats = server.engine.stats().clone();
    let watch = InFlightWatch::start(&stats);
    let texts = common::sentences(400, 12);
    let calls = texts.into_iter().enumerate().map(|(i, text)| {
        let mut client = clients[i % clients.len()].clone();
        async move { client.embed(EmbedRequest { inputs: vec![text], ..Default::default() }).await }
    });
    let results = futures::future::join_all(calls).await;
    let most_in_flight = watch.most().await;
    let (mut answered, mut refused) = (0, 0);
    for result in results {
        match result {
            Ok(answer) => {
                assert_eq!(answer.into_inner().count, 1);
                answered += 1;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert!(status.message().contains("16 interactive calls"), "{}", status.message());
                let hint = status.metadata().get("grpc-retry-pushback-ms").expect("a retry hint");
                let millis: u64 = hint.to_str().unwrap().parse().unwrap();
                assert!((5..=2000).contains(&millis), "hint {millis} ms");
                refused += 1;
            }
        }
    }
    eprintln!("answered {answered}, refused {refused}, most in flight {}", most_in_flight);
    assert!(refused > 0 && answered >= 16, "answered {answered}, refused {refused}");
    assert!(most_in_flight <= 16, "the bound held");
    assert_eq!(stats.rejected_overload.load(Ordering::SeqCst), refused);
    assert_eq!(stats.interactive_calls.load(Ordering::SeqCst), 0, "every answered call left the count");
    server.client().await.embed(embed_request(&["room again"])).await.expect("the queue drained");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_count_of_interactive_calls_set_by_hand_is_the_bound_in_force() {
    // --max-interactive-calls replaces 2 x --max-batch-size (128 here); a given
    // --max-queue-ms would replace both, so a server told 0 has no bound.
    let server = InProcessServer::start(&[ONNX, &["--max-interactive-calls", "6"]].concat()).await;
    let limits = server.client().await.info(InfoRequest {}).await.unwrap().into_inner().limits.expect("limits");
    assert_eq!((limits.max_interactive_calls, limits.max_queue_ms), (6, 0), "{}", limits.admission);
    let stats = server.engine.stats().clone();
    let watch = InFlightWatch::start(&stats);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server.client().await);
    }
    let calls = common::sentences(200, 12).into_iter().enumerate().map(|(i, text)| {
        let mut client = clients[i % clients.len()].clone();
        async move { client.embed(EmbedRequest { inputs: vec![text], ..Default::default() }).await }
    });
    let results = futures::future::join_all(calls).await;
    let most_in_flight = watch.most().await;
    let refusals: Vec<_> = results.iter().filter_map(|result| result.as_ref().err()).collect();
    assert!(!refusals.is_empty() && refusals.len() < 200, "{} of 200 refused", refusals.len());
    for status in &refusals {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("6 interactive calls"), "{}", status.message());
    }
    assert!(most_in_flight <= 6, "the bound held");
    server.stop().await.unwrap();

    let unbounded =
        InProcessServer::start(&[ONNX, &["--max-interactive-calls", "6", "--max-queue-ms", "0"]].concat()).await;
    let limits = unbounded.client().await.info(InfoRequest {}).await.unwrap().into_inner().limits.expect("limits");
    assert_eq!((limits.max_interactive_calls, limits.max_queue_ms), (0, 0), "{}", limits.admission);
    unbounded.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn small_calls_past_the_queue_bound_are_refused_at_once_and_the_accepted_ones_answered() {
    // The in-flight bound is far away: only the expected wait can refuse. Each call
    // is one long text, a few ms of model work: under the 20 ms bound, so every
    // call is interactive, but 300 at once are far more work than the bound.
    let flags = [ONNX, &["--max-queue-ms", "20", "--max-batch-size", "8", "--max-in-flight-inputs", "4096"]].concat();
    let server = InProcessServer::start(&flags).await;
    // Before any batch the model's speed is unknown and nothing is refused.
    server.client().await.embed(embed_request(&["the model's speed is measured on this one"])).await.unwrap();

    // Connections first, then every call at once: on a fast machine calls that
    // trickle in as connections open would never find 20 ms of work ahead.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server.client().await);
    }
    let calls = long_texts(300).into_iter().enumerate().map(|(i, text)| {
        let mut client = clients[i % clients.len()].clone();
        async move { client.embed(EmbedRequest { inputs: vec![text], ..Default::default() }).await }
    });
    let results = futures::future::join_all(calls).await;
    let (mut answered, mut refused) = (0, 0);
    for result in results {
        match result {
            Ok(answer) => {
                assert_eq!(answer.into_inner().count, 1);
                answered += 1;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert!(
                    status.message().contains("--max-queue-ms"),
                    "the message names the setting: {}",
                    status.message()
                );
                refused += 1;
            }
        }
    }
    eprintln!("answered {answered}, refused {refused}");
    assert!(refused > 0, "300 calls at once are more than 20 ms of work: some must be refused");
    assert!(answered > 0, "the calls within the bound are answered");
    assert_eq!(server.engine.stats().rejected_overload.load(Ordering::SeqCst), refused);
    server.client().await.embed(embed_request(&["room again"])).await.expect("the queue drained");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_call_behind_bulk_calls_is_admitted_and_answered_first_and_bulk_is_never_refused() {
    // The default bound (interactive calls in flight); bulk calls are never counted.
    let server = InProcessServer::start(&[ONNX, &["--max-batch-size", "8"]].concat()).await;
    server.client().await.embed(embed_request(&["the model's speed is measured on this one"])).await.unwrap();

    // 64 texts of ~250 tokens: seconds of work, far more than the bound: bulk lane.
    let spawn_bulk = |mut client: EmbedServiceClient<Channel>| {
        tokio::spawn(async move { client.embed(EmbedRequest { inputs: long_texts(64), ..Default::default() }).await })
    };
    let first_bulk = spawn_bulk(server.client().await);
    eventually("the bulk call to be queued", || server.engine.queue_depth() > 0).await;
    // Another bulk call while the first runs: slowed, not refused.
    let second_bulk = spawn_bulk(server.client().await);

    let started = Instant::now();
    let small = server.client().await.embed(embed_request(&["a quick question"])).await;
    let small_took = started.elapsed();
    assert_eq!(small.expect("a small call behind bulk work is admitted").into_inner().count, 1);
    assert!(!first_bulk.is_finished(), "answered within the bulk work, in {small_took:?}");
    eprintln!("small call behind bulk work answered in {small_took:?}");

    for bulk in [first_bulk, second_bulk] {
        assert_eq!(bulk.await.unwrap().expect("bulk calls are never refused for queue time").into_inner().count, 64);
    }
    assert_eq!(server.engine.stats().rejected_overload.load(Ordering::SeqCst), 0);
    eventually("the queue to drain", || server.engine.queue_depth() == 0).await;
    server.client().await.embed(embed_request(&["room again"])).await.expect("the queue drained");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn work_of_a_cancelled_request_never_reaches_the_model() {
    let server = InProcessServer::start(&[ONNX, &["--max-batch-size", "4"]].concat()).await;
    let mut request = tonic::Request::new(EmbedRequest { inputs: long_texts(64), ..Default::default() });
    request.set_timeout(Duration::from_millis(300));
    let status = server.client().await.embed(request).await.unwrap_err();
    assert!(matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled), "{status:?}");

    let stats = server.engine.stats().clone();
    eventually("every sequence to be run or dropped", || {
        stats.sequences.load(Ordering::SeqCst) + stats.dropped_sequences.load(Ordering::SeqCst) == 64
    })
    .await;
    let dropped = stats.dropped_sequences.load(Ordering::SeqCst);
    assert!(dropped > 0, "no sequence of the cancelled request was dropped");
    eprintln!("ran {} sequences, dropped {dropped}", 64 - dropped);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_lets_in_flight_requests_finish() {
    let mut server = InProcessServer::start(ONNX).await;
    let mut client = server.client().await;
    let texts = long_texts(32);
    let in_flight =
        tokio::spawn(async move { client.embed(EmbedRequest { inputs: texts, ..Default::default() }).await });
    eventually("the request to be admitted", || server.engine.in_flight_inputs() == 32).await;

    server.begin_shutdown();
    let response = in_flight.await.unwrap().expect("in-flight request completes during shutdown");
    assert_eq!(response.into_inner().count, 32);
    tokio::time::timeout(READY_TIMEOUT, &mut server.task).await.expect("server stops").unwrap().unwrap();
    assert_eq!(health_status(&server.address).await, None, "no longer accepting connections");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_the_binary_cleanly() {
    let mut server = ServerProcess::spawn(PSEUDO).await;
    wait_serving(&server.address).await;
    common::client(&server.address).await.embed(embed_request(&["before"])).await.unwrap();
    server.terminate();
    let status = tokio::time::timeout(READY_TIMEOUT, server.child.wait()).await.expect("exits").unwrap();
    assert!(status.success(), "exit status {status}");
    let mut stopped = false;
    while let Some(line) = server.stderr_lines.recv().await {
        stopped |= line.contains("stopped");
    }
    assert!(stopped, "the server logs a clean stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_setup_fails_at_start_with_a_clear_message() {
    let server = common::server_bin();
    let stderr = common::start_error(&server, &["--listen", "127.0.0.1:0", "--model-dir", "/nonexistent/model"]).await;
    assert!(stderr.contains("/nonexistent/model does not exist"), "{stderr}");
    let stderr = common::start_error(&server, &["--backend", "remote"]).await;
    assert!(stderr.contains("--upstream"), "{stderr}");
}
