//! Faults under `--store postgres`, on one real PostgreSQL primary with a streaming
//! replica and real `embedwire-server` binaries with the real model:
//! - a server killed with SIGKILL in the middle of a job: another server takes the job
//!   over when the lease runs out and finishes it;
//! - the primary killed with SIGKILL during an ingest and a stream of searches, then
//!   restarted on its data: searches keep answering from the replica, the job completes
//!   once the primary is back;
//! - the replica stopped: searches keep answering from the primary, Info shows the
//!   replica down, then up again once it is back;
//! - the whole store stopped: search answers UNAVAILABLE (gRPC) and 503 (HTTP) naming
//!   the store, health turns NOT_SERVING; once it is back the same server serves again
//!   without a restart.
//!
//! Every test counts the documents it had acknowledged before and after the fault:
//! each is stored exactly once. The tests share the cluster and fault it, so they run
//! one at a time (`SERIAL`), each in its own database, and each starts by bringing
//! back whatever a failed test left down.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::postgres::PostgresCluster;
use common::store_faults::{
    self, JOB_TIMEOUT, assert_exactly_once, assert_finds, blocking, documents, ingest, job, search_client,
    search_until, start_server, text_query, wait_completed,
};
use common::{health_status, wait_health};
use embedwire_proto::v1::InfoRequest;
use tokio::sync::{Mutex, MutexGuard};
use tonic_health::pb::health_check_response::ServingStatus;

/// One test at a time: they share the cluster and stop its servers.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// The shared cluster, primary and replica up, a fresh database `db`, and the right to
/// fault the cluster until the guard drops; returns the server flags for `db`.
async fn exclusive_cluster(db: &'static str) -> (MutexGuard<'static, ()>, &'static PostgresCluster, Vec<String>) {
    let serial = SERIAL.lock().await;
    let cluster = blocking(move || {
        let cluster = PostgresCluster::shared();
        cluster.start_primary();
        cluster.start_replica();
        cluster.create_database(db);
        cluster
    })
    .await;
    let flags = [
        "--store",
        "postgres",
        "--postgres-url",
        &cluster.primary_url(db),
        "--postgres-read-url",
        &cluster.replica_url(db),
        "--collection",
        "faults",
    ]
    .map(String::from)
    .to_vec();
    // These tests are about the store: searches that overlap the checks must not be
    // refused by admission control (its queue-time bound is a few ms here).
    let flags = [flags, vec!["--max-queue-ms".into(), "10000".into()]].concat();
    (serial, cluster, flags)
}

/// Waits until the server's Info shows the store's nodes as `healthy` (primary, replica).
async fn wait_nodes(address: &str, healthy: [bool; 2]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = common::client(address).await.info(InfoRequest {}).await.unwrap().into_inner();
        let store = info.store.expect("a store");
        let now: Vec<bool> = store.nodes.iter().map(|n| n.healthy).collect();
        if now == healthy {
            return;
        }
        assert!(Instant::now() < deadline, "nodes {now:?}, expected {healthy:?}: {store:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkilled_server_job_finishes_on_another_server() {
    let (_serial, _cluster, flags) = exclusive_cluster("server_kill").await;
    store_faults::sigkilled_server_job_finishes_on_another_server(&flags).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_primary_during_ingest_and_search() {
    const SEED: usize = 200;
    const DOCUMENTS: usize = 1500;
    let (_serial, cluster, flags) = exclusive_cluster("primary_kill").await;
    let started = Instant::now();
    let server = start_server(&flags, &[]).await;
    let mut client = search_client(&server.address).await;
    let seed = documents("seed", SEED);
    let seeded = ingest(&mut client, seed.clone()).await;
    wait_completed(&mut client, &seeded.job_id).await;
    let mut ids: Vec<String> = seed.iter().map(|d| d.id.clone()).collect();
    assert_exactly_once(&mut client, &ids, "seeded").await;

    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let searches =
        tokio::spawn(search_until(vec![client.clone()], seed[7].text.clone(), stop.clone(), answered.clone()));
    let documents = documents("primary", DOCUMENTS);
    ids.extend(documents.iter().map(|d| d.id.clone()));
    let acknowledged = ingest(&mut client, documents.clone()).await;
    let deadline = Instant::now() + JOB_TIMEOUT;
    while job(&mut client, &acknowledged.job_id).await.processed_documents == 0 {
        assert!(Instant::now() < deadline, "nothing indexed within {JOB_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answered_before = answered.load(Ordering::Relaxed);
    blocking(move || cluster.kill_primary()).await;
    eprintln!("killed the primary with SIGKILL during the ingest");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answered_while_down = answered.load(Ordering::Relaxed) - answered_before;
    wait_nodes(&server.address, [false, true]).await;

    let restarting = Instant::now();
    blocking(move || cluster.start_primary()).await;
    eprintln!("primary back after {:.1?}", restarting.elapsed());
    let done = wait_completed(&mut client, &acknowledged.job_id).await;
    eprintln!("job completed {:.1?} after the primary came back", restarting.elapsed());
    assert_eq!((done.processed_documents as usize, done.failed_documents), (DOCUMENTS, 0));
    stop.store(true, Ordering::Relaxed);
    let failures = searches.await.unwrap();
    eprintln!(
        "searches: {} answered ({answered_while_down} while the primary was down), {} failed: {failures:?}",
        answered.load(Ordering::Relaxed),
        failures.len()
    );
    // Searches read from the replica, which does not need the primary.
    assert!(answered_while_down > 0, "no search answered while the primary was down");
    assert!(failures.is_empty(), "searches failed around the primary kill: {failures:?}");
    wait_nodes(&server.address, [true, true]).await;
    assert_exactly_once(&mut client, &ids, "after the primary came back").await;
    assert_finds(&mut client, &documents[DOCUMENTS - 1]).await;
    eprintln!("killed_primary_during_ingest_and_search took {:.1?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopped_replica_is_skipped_then_used_again() {
    const DOCUMENTS: usize = 300;
    let (_serial, cluster, flags) = exclusive_cluster("replica_stop").await;
    let server = start_server(&flags, &[]).await;
    let mut client = search_client(&server.address).await;
    let documents = documents("replica", DOCUMENTS);
    let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();
    let acknowledged = ingest(&mut client, documents.clone()).await;
    wait_completed(&mut client, &acknowledged.job_id).await;
    wait_nodes(&server.address, [true, true]).await;

    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let searches =
        tokio::spawn(search_until(vec![client.clone()], documents[3].text.clone(), stop.clone(), answered.clone()));
    blocking(move || cluster.stop_replica()).await;
    wait_nodes(&server.address, [true, false]).await;
    let answered_before = answered.load(Ordering::Relaxed);
    assert_exactly_once(&mut client, &ids, "with the replica down").await;
    assert_finds(&mut client, &documents[DOCUMENTS - 1]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answered_while_down = answered.load(Ordering::Relaxed) - answered_before;

    blocking(move || cluster.start_replica()).await;
    wait_nodes(&server.address, [true, true]).await;
    stop.store(true, Ordering::Relaxed);
    let failures = searches.await.unwrap();
    assert!(answered_while_down > 0, "no search answered while the replica was down");
    assert!(failures.is_empty(), "searches failed around the replica stop: {failures:?}");
    let metrics = reqwest::get(format!("{}/metrics", server.address)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("embedwire_store_request_seconds_count{store=\"postgres\",operation=\"search\"}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_store_down_then_back_without_a_server_restart() {
    const DOCUMENTS: usize = 300;
    let (_serial, cluster, flags) = exclusive_cluster("store_down").await;
    let server = start_server(&flags, &[]).await;
    let mut client = search_client(&server.address).await;
    let documents = documents("down", DOCUMENTS);
    let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();
    let acknowledged = ingest(&mut client, documents.clone()).await;
    wait_completed(&mut client, &acknowledged.job_id).await;
    assert_exactly_once(&mut client, &ids, "before the stop").await;

    blocking(move || {
        cluster.stop_replica();
        cluster.stop_primary();
    })
    .await;
    let stopped = Instant::now();
    let status = client.search(text_query(&documents[0].text)).await.expect_err("search with the store down");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("postgres store"), "names the store: {}", status.message());
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{}/v1/search", server.address))
        .json(&serde_json::json!({"query": documents[0].text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let body = response.text().await.unwrap();
    assert!(body.contains("postgres store"), "names the store: {body}");
    let deadline = stopped + Duration::from_secs(5);
    while health_status(&server.address).await != Some(ServingStatus::NotServing) {
        assert!(Instant::now() < deadline, "still {:?} 5 s after the stop", health_status(&server.address).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let readyz = http.get(format!("{}/readyz", server.address)).send().await.unwrap();
    assert_eq!(readyz.status().as_u16(), 503, "/readyz with the store down");

    blocking(move || {
        cluster.start_primary();
        cluster.start_replica();
    })
    .await;
    wait_health(&server.address, ServingStatus::Serving).await;
    assert_finds(&mut client, &documents[0]).await;
    assert_exactly_once(&mut client, &ids, "after the store came back").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lagging_replica_is_skipped() {
    const DOCUMENTS: usize = 100;
    let (_serial, cluster, flags) = exclusive_cluster("replica_lag").await;
    let lag = ["--postgres-max-replica-lag-secs", "1"];
    let writer = start_server(&flags, &lag).await;
    let reader = start_server(&flags, &lag).await;
    let mut via_writer = search_client(&writer.address).await;
    let mut via_reader = search_client(&reader.address).await;
    let first = documents("before", DOCUMENTS);
    let job_id = ingest(&mut via_writer, first.clone()).await.job_id;
    wait_completed(&mut via_writer, &job_id).await;
    blocking(move || cluster.wait_replica_caught_up()).await;

    // The replica stops replaying: it answers, but falls behind every write.
    blocking(move || cluster.replica_sql("replica_lag", "SELECT pg_wal_replay_pause()")).await;
    let second = documents("after", DOCUMENTS);
    let job_id = ingest(&mut via_writer, second.clone()).await.job_id;
    wait_completed(&mut via_writer, &job_id).await;
    let on_replica =
        blocking(move || cluster.replica_sql("replica_lag", "SELECT count(*) FROM faults.documents")).await;
    assert_eq!(on_replica, DOCUMENTS.to_string(), "the paused replica has only the first documents");
    // Past the lag bound (and a check of the WAL positions), the other server reads
    // from the primary and finds what the replica does not have.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let ids: Vec<String> = first.iter().chain(&second).map(|d| d.id.clone()).collect();
    assert_exactly_once(&mut via_reader, &ids, "with the replica paused").await;
    assert_finds(&mut via_reader, &second[DOCUMENTS - 1]).await;

    blocking(move || {
        cluster.replica_sql("replica_lag", "SELECT pg_wal_replay_resume()");
        cluster.wait_replica_caught_up();
    })
    .await;
    assert_finds(&mut via_reader, &second[0]).await;
}
