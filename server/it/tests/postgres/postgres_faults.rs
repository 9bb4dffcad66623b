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
//!   without a restart;
//! - a job whose pending document cannot be read (damaged in the store): the runner
//!   puts it aside and completes newer jobs, instead of retrying it forever;
//! - a job taken over while the replica has stopped replaying: every read that decides
//!   the job (list, claim, pending, settle) goes to the primary, so it completes with
//!   every document and a server that never wrote sees it completed.
//!
//! Every test counts the documents it had acknowledged before and after the fault:
//! each is stored exactly once. The tests share the cluster and fault it, so they run
//! one at a time (`SERIAL`), each in its own database, and each starts by bringing
//! back whatever a failed test left down.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::postgres::{PostgresCluster, Role};
use common::store_faults::{
    self, assert_exactly_once, assert_finds, blocking, documents, ingest, ingest_completed, search_client,
    search_until, start_server, wait_completed, wait_indexing,
};
use embedwire_proto::v1::{GetDocumentsRequest, GetJobRequest, InfoRequest, JobStatus};
use tokio::sync::{Mutex, MutexGuard};

/// One test at a time: they share the cluster and stop its servers.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// The shared cluster, primary and replica up, a fresh database `db`, and the right to
/// fault the cluster until the guard drops; returns the server flags for `db`.
async fn exclusive_cluster(db: &'static str) -> (MutexGuard<'static, ()>, &'static PostgresCluster, Vec<String>) {
    let serial = SERIAL.lock().await;
    let cluster = blocking(move || {
        let cluster = PostgresCluster::shared();
        cluster.start_server(Role::Primary);
        cluster.start_server(Role::Replica);
        // A failed test may have left replay paused; the database would never reach it.
        let _ = cluster.try_replica_sql("postgres", "SELECT pg_wal_replay_resume()");
        cluster.create_database(db);
        cluster
    })
    .await;
    let mut flags = cluster.server_flags(db, "faults");
    // These tests are about the store: searches that overlap the checks must not be
    // refused by admission control (its queue-time bound is a few ms here).
    flags.extend(["--max-queue-ms".into(), "10000".into()]);
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
    let (seed, mut ids) = ingest_completed(&mut client, "seed", SEED).await;
    assert_exactly_once(&mut client, &ids, "seeded").await;

    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let searches =
        tokio::spawn(search_until(vec![client.clone()], seed[7].text.clone(), stop.clone(), answered.clone()));
    let documents = documents("primary", DOCUMENTS);
    ids.extend(documents.iter().map(|d| d.id.clone()));
    let acknowledged = ingest(&mut client, documents.clone()).await;
    wait_indexing(&mut client, &acknowledged.job_id).await;
    let answered_before = answered.load(Ordering::Relaxed);
    blocking(move || cluster.kill(Role::Primary)).await;
    eprintln!("killed the primary with SIGKILL during the ingest");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answered_while_down = answered.load(Ordering::Relaxed) - answered_before;
    wait_nodes(&server.address, [false, true]).await;

    let restarting = Instant::now();
    blocking(move || cluster.start_server(Role::Primary)).await;
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
    let (documents, ids) = ingest_completed(&mut client, "replica", DOCUMENTS).await;
    wait_nodes(&server.address, [true, true]).await;

    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let searches =
        tokio::spawn(search_until(vec![client.clone()], documents[3].text.clone(), stop.clone(), answered.clone()));
    blocking(move || cluster.stop(Role::Replica)).await;
    wait_nodes(&server.address, [true, false]).await;
    let answered_before = answered.load(Ordering::Relaxed);
    assert_exactly_once(&mut client, &ids, "with the replica down").await;
    assert_finds(&mut client, &documents[DOCUMENTS - 1]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answered_while_down = answered.load(Ordering::Relaxed) - answered_before;

    blocking(move || cluster.start_server(Role::Replica)).await;
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
    let (_serial, cluster, flags) = exclusive_cluster("store_down").await;
    let stop = move || {
        cluster.stop(Role::Replica);
        cluster.stop(Role::Primary);
    };
    let start = move || {
        cluster.start_server(Role::Primary);
        cluster.start_server(Role::Replica);
    };
    store_faults::whole_store_down_then_back_without_a_server_restart(&flags, "postgres store", stop, start).await;
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
    let (first, _) = ingest_completed(&mut via_writer, "before", DOCUMENTS).await;
    blocking(move || cluster.wait_replica_caught_up()).await;

    // The replica stops replaying: it answers, but falls behind every write.
    blocking(move || cluster.replica_sql("replica_lag", "SELECT pg_wal_replay_pause()")).await;
    let (second, _) = ingest_completed(&mut via_writer, "after", DOCUMENTS).await;
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

/// Issue 26's question for PostgreSQL: can a read from a lagging replica decide a job's
/// state? The replica stops replaying before the ingest, but answers and counts as
/// fresh enough (a lag bound of an hour), so a server that has not written yet would
/// read from it. Server A ingests and dies at once (SIGKILL); B, which has written
/// nothing, finds the job in the store's list, takes it over when A's lease ends and
/// completes it with every document; C, started afterwards and writing nothing, reads
/// it completed. Had any of those reads gone to the replica, B would not find the job
/// (the replica has neither it nor its documents) and C would answer NOT_FOUND.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn job_taken_over_with_the_replica_paused_is_decided_on_the_primary() {
    const DOCUMENTS: usize = 300;
    let (_serial, cluster, flags) = exclusive_cluster("replica_paused_job").await;
    let started = Instant::now();
    let extra = ["--job-lease-secs", "3", "--postgres-max-replica-lag-secs", "3600"];
    let mut a = start_server(&flags, &extra).await;
    let b = start_server(&flags, &extra).await;
    let mut via_a = search_client(&a.address).await;
    let mut via_b = search_client(&b.address).await;
    blocking(move || cluster.wait_replica_caught_up()).await;
    blocking(move || cluster.replica_sql("replica_paused_job", "SELECT pg_wal_replay_pause()")).await;

    let documents = documents("paused", DOCUMENTS);
    let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();
    let acknowledged = ingest(&mut via_a, documents.clone()).await;
    a.child.start_kill().unwrap();
    a.child.wait().await.unwrap();
    let killed = Instant::now();
    let on_replica =
        blocking(move || cluster.replica_sql("replica_paused_job", "SELECT count(*) FROM faults.jobs")).await;
    assert_eq!(on_replica, "0", "the paused replica does not have the job");

    // B learns of the job from the store's list (it has no other way: nobody asks B).
    let done = wait_completed(&mut via_b, &acknowledged.job_id).await;
    eprintln!("B completed the job {:.1?} after A was killed", killed.elapsed());
    assert_eq!((done.processed_documents as usize, done.failed_documents), (DOCUMENTS, 0));
    assert_exactly_once(&mut via_b, &ids, "with the replica paused, via B").await;

    let c = start_server(&flags, &extra).await;
    let mut via_c = search_client(&c.address).await;
    let seen_by_c = store_faults::job(&mut via_c, &acknowledged.job_id).await;
    assert_eq!(seen_by_c.status, JobStatus::Completed as i32, "C: {seen_by_c:?}");
    assert_eq!((seen_by_c.processed_documents as usize, seen_by_c.failed_documents), (DOCUMENTS, 0));

    blocking(move || {
        cluster.replica_sql("replica_paused_job", "SELECT pg_wal_replay_resume()");
        cluster.wait_replica_caught_up();
    })
    .await;
    assert_exactly_once(&mut via_c, &ids, "replica resumed, via C").await;
    assert_finds(&mut via_c, &documents[DOCUMENTS - 1]).await;
    eprintln!("job_taken_over_with_the_replica_paused_is_decided_on_the_primary took {:.1?}", started.elapsed());
}

/// One job that fails every time the runner works on it must not stall the newer ones.
/// A chaos run of the Weaviate store found a job record a SIGKILLed node had left
/// unreadable: the runner retried that oldest job every 200 ms and 297 newer jobs
/// never ran. Here the broken job is the oldest, with a pending document that does not
/// parse (written by SQL); a newer job must still complete, and the broken one must
/// not be reported done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_that_keeps_failing_does_not_block_newer_jobs() {
    const DOCUMENTS: usize = 50;
    let (_serial, cluster, flags) = exclusive_cluster("broken_job").await;
    let server = start_server(&flags, &[]).await;
    let mut client = search_client(&server.address).await;
    blocking(move || {
        cluster.sql(
            "broken_job",
            "INSERT INTO faults.jobs (job_id, state, total, processed, failed, started_at, next_sequence, receiving, revision)
                 VALUES ('broken', 'pending', 1, 0, 0, 0, 1, false, 1);
             INSERT INTO faults.pending (job_id, sequence, document) VALUES ('broken', 0, '{\"no\": \"document\"}')",
        )
    })
    .await;
    // The server follows the store's jobs every second: wait until it knows this one.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get_job(GetJobRequest { job_id: "broken".into(), ..Default::default() }).await.is_err() {
        assert!(Instant::now() < deadline, "the server does not see the broken job");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let (documents, ids) = ingest_completed(&mut client, "after-broken", DOCUMENTS).await;
    // (Not `assert_exactly_once`: the broken job's document stays pending.)
    let got = client
        .get_documents(GetDocumentsRequest { ids: ids.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(got.missing_ids.is_empty(), "documents of the newer job missing: {:?}", got.missing_ids);
    assert_finds(&mut client, &documents[DOCUMENTS - 1]).await;
    let broken = store_faults::job(&mut client, "broken").await;
    assert!(
        broken.status != JobStatus::Completed as i32 && broken.processed_documents == 0,
        "the broken job reported done: {broken:?}"
    );
}
