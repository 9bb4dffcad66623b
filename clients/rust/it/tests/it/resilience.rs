//! The call policy against real servers: retries when the server sheds load,
//! failover when a server dies, hedging, deadlines, and connecting with some
//! addresses down.

use crate::common;

use std::time::Duration;

use common::{PSEUDO, address, dead_address, start, texts};
use embedwire_client::{BulkOptions, ClientConfig, Code, EmbedOptions, Error, HealthStatus, RetryPolicy};

/// Many fast retries, so a test never runs out of them by bad luck.
fn patient() -> RetryPolicy {
    RetryPolicy {
        max_retries: 200,
        initial_backoff: Duration::from_millis(2),
        max_backoff: Duration::from_millis(50),
        ..RetryPolicy::default()
    }
}

#[tokio::test]
async fn resource_exhausted_is_retried_until_every_batch_is_admitted() {
    // Room for one batch at a time, and the real model, so a batch takes long
    // enough (tens of ms) that concurrent ones are sure to be turned away (the
    // pseudo backend answers before the next request arrives).
    let server = start(&["--backend", "onnx", "--max-in-flight-inputs", "64", "--max-inputs-per-request", "64"]).await;
    let bulk = BulkOptions { batch_size: 64, max_concurrent_requests: 8 };
    let texts = texts(640);

    let impatient = ClientConfig::new([address(&server)])
        .with_retry(RetryPolicy { max_retries: 0, ..RetryPolicy::default() })
        .connect()
        .await
        .unwrap();
    let error = impatient.embed_many(&texts, bulk, &EmbedOptions::default()).await.unwrap_err();
    assert!(matches!(error, Error::Status { code: Code::ResourceExhausted, .. }), "the limit bites: {error:?}");
    assert!(error.to_string().starts_with("RESOURCE_EXHAUSTED: "), "{error}");

    let client = ClientConfig::new([address(&server)]).with_retry(patient()).connect().await.unwrap();
    let embeddings = client.embed_many(&texts, bulk, &EmbedOptions::default()).await.unwrap();
    assert_eq!(embeddings.len(), 640);
    let stats = client.stats();
    assert!(stats.retries > 0, "{stats:?}");
    let check = client.embed([texts[639].as_str()]).await.unwrap();
    let diff = embeddings.row(639).iter().zip(check.row(0)).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(diff < 1e-5, "the last row is the last text's vector (batching moves values by float noise only): {diff}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn overload_refusals_carry_a_hint_and_the_default_policy_rides_them_out() {
    // Room for two 32-text calls at a time, the real model (a call takes 100+ ms,
    // so a burst collides for sure), and a burst of 8 calls at once: four times
    // what fits, refused in part for about three calls' time.
    let server = start(&["--backend", "onnx", "--max-in-flight-inputs", "64", "--max-inputs-per-request", "64"]).await;
    let texts = texts(32);
    let burst = |client: embedwire_client::Client| {
        let texts = texts.clone();
        async move {
            let calls = (0..8).map(|_| client.embed(texts.iter().map(String::as_str)));
            let results = futures::future::join_all(calls).await;
            (client, results)
        }
    };

    // Without retries the refusal surfaces, saying when to come back.
    let impatient = ClientConfig::new([address(&server)])
        .with_retry(RetryPolicy { max_retries: 0, ..RetryPolicy::default() })
        .connect()
        .await
        .unwrap();
    let (_, results) = burst(impatient).await;
    let refused: Vec<Error> = results.into_iter().filter_map(Result::err).collect();
    let error = refused.first().expect("a burst of 8 x 32 texts over a bound of 64 is refused in part");
    assert_eq!(error.code(), Code::ResourceExhausted, "{error:?}");
    let hint = error.retry_after().expect("an overload refusal carries its retry hint");
    assert!(hint > Duration::ZERO && hint <= Duration::from_secs(10), "{hint:?}");
    assert!(error.to_string().ends_with(&format!(" (retry after {hint:?})")), "the message says when: {error}");
    assert!(refused.iter().all(|e| e.retry_after().is_some()), "{refused:?}");

    // With the default policy the same burst succeeds whole: every refusal was
    // waited out on its hint, none reached the caller.
    let client = ClientConfig::new([address(&server)]).connect().await.unwrap();
    let (client, results) = burst(client).await;
    for result in &results {
        let embeddings = result.as_ref().expect("no refusal surfaces with the default retry policy");
        assert_eq!(embeddings.len(), 32);
    }
    let stats = client.stats();
    assert!(stats.pushbacks > 0, "refusals with a hint happened and were retried: {stats:?}");
    assert!(stats.retries >= stats.pushbacks, "{stats:?}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn calls_fail_over_when_a_server_is_killed() {
    let (first, second) = (start(PSEUDO).await, start(PSEUDO).await);
    // A few quick retries: enough to go around the dead server, and few enough that
    // the last call, with no server left, gives up soon.
    let retry = RetryPolicy {
        max_retries: 5,
        initial_backoff: Duration::from_millis(2),
        max_backoff: Duration::from_millis(20),
        ..RetryPolicy::default()
    };
    let client = ClientConfig::new([address(&first), address(&second)]).with_retry(retry).connect().await.unwrap();
    let texts = texts(2000);
    let bulk = BulkOptions { batch_size: 50, max_concurrent_requests: 4 };
    let before = client.embed_many(&texts, bulk, &EmbedOptions::default()).await.unwrap();
    assert_eq!(client.stats().retries, 0, "both servers up: {:?}", client.stats());

    first.stop().await.unwrap();
    let after = client.embed_many(&texts, bulk, &EmbedOptions::default()).await.unwrap();
    assert_eq!(before.as_slice(), after.as_slice(), "the survivor computes the same vectors");
    let stats = client.stats();
    assert!(stats.failovers > 0, "calls to the dead server went to the other one: {stats:?}");

    // The dead one is skipped for its cool-down: no further failovers.
    let failovers = stats.failovers;
    client.embed_many(&texts, bulk, &EmbedOptions::default()).await.unwrap();
    assert_eq!(client.stats().failovers, failovers, "{:?}", client.stats());

    let health = client.health().await;
    assert!(matches!(health[0].status, Err(Error::Unreachable { .. })), "{health:?}");
    assert!(matches!(health[1].status, Ok(HealthStatus::Serving)), "{health:?}");

    second.stop().await.unwrap();
    let error = client.embed(["nobody left"]).await.unwrap_err();
    assert!(matches!(error, Error::Unreachable { .. }), "{error:?}");
    assert!(error.to_string().contains("connection refused"), "{error}");
}

#[tokio::test]
async fn hedged_calls_send_a_second_copy_and_keep_the_first_answer() {
    let (first, second) = (start(PSEUDO).await, start(PSEUDO).await);
    // A zero delay hedges every call: the answers must still be right and whole.
    let client =
        ClientConfig::new([address(&first), address(&second)]).with_hedging(Duration::ZERO).connect().await.unwrap();
    let texts = texts(500);
    let bulk = BulkOptions { batch_size: 25, max_concurrent_requests: 4 };
    let hedged = client.embed_many(&texts, bulk, &EmbedOptions::default()).await.unwrap();
    let stats = client.stats();
    assert!(stats.hedges > 0 && stats.attempts > 20, "{stats:?}");

    let plain = ClientConfig::new([address(&first)]).connect().await.unwrap();
    let expected = plain.embed_many(&texts, bulk, &EmbedOptions::default()).await.unwrap();
    assert_eq!(hedged.as_slice(), expected.as_slice());
    first.stop().await.unwrap();
    second.stop().await.unwrap();
}

#[tokio::test]
async fn a_call_over_its_deadline_fails_with_deadline_exceeded() {
    let server = start(PSEUDO).await;
    let client =
        ClientConfig::new([address(&server)]).with_timeout(Some(Duration::from_micros(1))).connect().await.unwrap();
    let error = client.embed(texts(1000)).await.unwrap_err();
    assert!(matches!(error, Error::DeadlineExceeded { .. }), "{error:?}");
    assert_eq!(error.code(), Code::DeadlineExceeded);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn connect_needs_one_reachable_server() {
    let dead = dead_address();
    let error = ClientConfig::new([dead.clone()]).connect().await.unwrap_err();
    assert_eq!(error.to_string(), format!("cannot reach {dead}: connection refused"));

    let server = start(PSEUDO).await;
    let client = ClientConfig::new([dead.clone(), address(&server)]).with_api_key("test-key").connect().await.unwrap();
    // The dead address starts in its cool-down, so no call even tries it.
    for _ in 0..4 {
        client.embed(["hello"]).await.unwrap();
    }
    assert_eq!(client.stats().retries, 0, "{:?}", client.stats());
    assert_eq!(client.info().await.unwrap().dim, 384);
    server.stop().await.unwrap();
}
