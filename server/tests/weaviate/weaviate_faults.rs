//! Faults under `--store weaviate`, on one real 3-node Weaviate cluster (replication
//! factor 3, writes at QUORUM, reads at ONE: the defaults) and real `embedwire-server`
//! binaries with the real model:
//! - a server killed with SIGKILL in the middle of a job: another server takes the job
//!   over when the lease runs out and finishes it; a restarted server with an empty data
//!   directory reports it completed;
//! - a Weaviate node killed with SIGKILL during an ingest and a stream of searches:
//!   searches keep answering, the job completes, the node rejoins and catches up on
//!   what it missed (async replication, within about 40 s);
//! - the whole cluster stopped: search answers UNAVAILABLE (gRPC) and 503 (HTTP) naming
//!   the store, health turns NOT_SERVING; once the cluster is back the same server
//!   serves again without a restart;
//! - a job settled through a node restarted after its documents were written (so its
//!   own replicas miss them): the job waits for them instead of completing without
//!   them, and every acknowledged document becomes searchable.
//!
//! Every test counts the documents it had acknowledged before and after the fault:
//! each is stored exactly once (GetDocuments over every id, one chunk each, and the
//! index's document and chunk counts equal to the number acknowledged).
//!
//! The tests share the cluster and kill parts of it, so they run one at a time
//! (`SERIAL`), each in its own collection, and each starts by bringing back any node a
//! failed test left down.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::ServerProcess;
use common::store_faults::{
    self, assert_exactly_once, assert_finds, blocking, documents, index_of, ingest, ingest_completed, search_client,
    search_until, text_query, wait_completed, wait_indexing,
};
use common::weaviate::WeaviateCluster;
use embedwire_proto::v1::{GetJobRequest, InfoRequest};
use tokio::sync::{Mutex, MutexGuard};

/// One test at a time: they share the cluster and kill its nodes.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// Nodes of the cluster; replication factor 3 (min(3, nodes)), QUORUM writes survive one down.
const NODES: usize = 3;

/// Longest wait for a restarted Weaviate node to catch up by async replication, which
/// only copies objects older than its propagation delay (30 s by default).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(120);

/// The shared cluster, all nodes up, and the right to fault it until the guard drops.
async fn exclusive_cluster() -> (MutexGuard<'static, ()>, &'static WeaviateCluster) {
    let serial = SERIAL.lock().await;
    let cluster = blocking(|| {
        // Shared by this binary's tests only, and each holds SERIAL: faulting it is safe.
        let cluster = WeaviateCluster::shared(NODES);
        // Brings back whatever an earlier (failed) test left stopped; cheap when all run.
        cluster.start_all();
        cluster
    })
    .await;
    (serial, cluster)
}

async fn start_server(cluster: &WeaviateCluster, collection: &str, extra: &[&str]) -> ServerProcess {
    store_faults::start_server(&cluster.server_flags(collection), extra).await
}

/// (chunks, documents, pending documents) in `collection` as node `via` counts them in
/// its own replicas (a GraphQL Aggregate answered by that node), or None.
async fn replica_counts(cluster: &WeaviateCluster, via: usize, collection: &str) -> Option<(u64, u64, u64)> {
    let query = format!(
        "{{ Aggregate {{ {collection} {{ meta {{ count }} }} {collection}Documents {{ meta {{ count }} }} \
         {collection}Pending {{ meta {{ count }} }} }} }}"
    );
    let url = format!("{}/v1/graphql", cluster.http_urls()[via]);
    let reply: serde_json::Value = reqwest::Client::new()
        .post(url)
        .json(&serde_json::json!({ "query": query }))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let count = |class: String| reply["data"]["Aggregate"][class][0]["meta"]["count"].as_u64();
    Some((
        count(collection.to_string())?,
        count(format!("{collection}Documents"))?,
        count(format!("{collection}Pending"))?,
    ))
}

/// Waits until every node's own replicas hold `documents` documents of one chunk each
/// and nothing pending; panics after [`CONVERGE_TIMEOUT`] with what each node holds.
async fn wait_replicas_agree(cluster: &WeaviateCluster, collection: &str, documents: u64) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let mut last_report = Instant::now();
    loop {
        let mut counts = Vec::new();
        for via in 0..NODES {
            counts.push(replica_counts(cluster, via, collection).await);
        }
        if counts.iter().all(|c| *c == Some((documents, documents, 0))) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nodes still disagree after {CONVERGE_TIMEOUT:?}: (chunks, documents, pending) per node {counts:?}"
        );
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("(chunks, documents, pending) per node: {counts:?}");
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkilled_server_job_finishes_on_another_server() {
    let (_serial, cluster) = exclusive_cluster().await;
    store_faults::sigkilled_server_job_finishes_on_another_server(&cluster.server_flags("FaultServerKill")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_weaviate_node_during_ingest_and_search() {
    const SEED: usize = 200;
    const DOCUMENTS: usize = 1500;
    const KILLED: usize = 2;
    let (_serial, cluster) = exclusive_cluster().await;
    let started = Instant::now();
    let a = start_server(cluster, "FaultNodeKill", &[]).await;
    let b = start_server(cluster, "FaultNodeKill", &[]).await;
    let mut via_a = search_client(&a.address).await;
    let mut via_b = search_client(&b.address).await;

    let (seed, mut ids) = ingest_completed(&mut via_a, "seed", SEED).await;
    assert_exactly_once(&mut via_b, &ids, "seeded").await;
    let index = index_of(&via_a.search(text_query("seed")).await.unwrap());
    assert_eq!(index_of(&via_b.search(text_query("seed")).await.unwrap()), index, "one shared index");

    // Searches through both servers from before the kill until after the node is back.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let searches = tokio::spawn(search_until(
        vec![via_a.clone(), via_b.clone()],
        seed[7].text.clone(),
        stop.clone(),
        answered.clone(),
    ));

    let documents = documents("node", DOCUMENTS);
    ids.extend(documents.iter().map(|d| d.id.clone()));
    let acknowledged = ingest(&mut via_a, documents.clone()).await;
    wait_indexing(&mut via_a, &acknowledged.job_id).await;
    let answered_before_kill = answered.load(Ordering::Relaxed);
    blocking(move || cluster.kill_node(KILLED)).await;
    let killed = Instant::now();
    eprintln!("killed weaviate-{KILLED} with SIGKILL during the ingest");

    let done = wait_completed(&mut via_a, &acknowledged.job_id).await;
    eprintln!("job completed {:.1?} after the kill, with weaviate-{KILLED} down", killed.elapsed());
    assert_eq!((done.processed_documents as usize, done.failed_documents), (DOCUMENTS, 0));
    let answered_while_down = answered.load(Ordering::Relaxed) - answered_before_kill;
    assert_exactly_once(&mut via_b, &ids, "with a node down").await;

    let restarting = Instant::now();
    blocking(move || cluster.restart_node(KILLED)).await;
    eprintln!("weaviate-{KILLED} back and the cluster healthy after {:.1?}", restarting.elapsed());
    // Both servers see every node healthy again (they read the node list every second).
    for client in [&a.address, &b.address] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info = common::client(client).await.info(InfoRequest {}).await.unwrap().into_inner();
            let store = info.store.expect("a store");
            if store.healthy && store.nodes.len() == NODES && store.nodes.iter().all(|n| n.healthy) {
                break;
            }
            assert!(Instant::now() < deadline, "{client} does not see the node back: {store:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Keep searching for a moment with the node back (stale pooled connections fail here).
    let answered_after = answered.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while answered.load(Ordering::Relaxed) < answered_after + 20 {
        assert!(Instant::now() < deadline, "searches stopped answering after the restart");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let failures = searches.await.unwrap();
    let total = answered.load(Ordering::Relaxed);
    eprintln!(
        "searches: {total} answered ({answered_while_down} while weaviate-{KILLED} was down), {} failed: {failures:?}",
        failures.len()
    );
    // Reads go out at ONE and the store tries the next node when one cannot be reached,
    // so a dead node costs a retry, never an error.
    assert!(failures.is_empty(), "searches failed around the node kill: {failures:?}");
    assert!(answered_while_down > 0, "no search answered while the node was down");

    // The restarted node missed what was written and deleted while it was down, and
    // Weaviate answers a query from the coordinating node's own replicas: reads through
    // it hide acknowledged documents until async replication (which the store enables)
    // has repaired it. Wait until every node's own replicas hold the right counts.
    let converging = Instant::now();
    wait_replicas_agree(cluster, "FaultNodeKill", ids.len() as u64).await;
    eprintln!("every node holds every document {:.1?} after weaviate-{KILLED} came back", converging.elapsed());
    // Reads rotate over the nodes and one check makes about ten: a few rounds through
    // both servers read through every node.
    for round in 0..NODES {
        assert_exactly_once(&mut via_a, &ids, &format!("node back, round {round} via A")).await;
        assert_exactly_once(&mut via_b, &ids, &format!("node back, round {round} via B")).await;
    }
    assert_finds(&mut via_b, &documents[DOCUMENTS - 1]).await;
    eprintln!("killed_weaviate_node_during_ingest_and_search took {:.1?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_cluster_down_then_back_without_a_server_restart() {
    let (_serial, cluster) = exclusive_cluster().await;
    store_faults::whole_store_down_then_back_without_a_server_restart(
        &cluster.server_flags("FaultClusterDown"),
        "weaviate store",
        move || cluster.stop_all(),
        move || cluster.start_all(),
    )
    .await;
}

/// The race of issue 26: a job settled by counting its pending documents with a search,
/// which Weaviate answers from one replica per shard. Here that replica is a node that
/// was down while the documents were written (acknowledged by the QUORUM of the two
/// others) and came back before async replication (30 s propagation delay) copied
/// them: server B, which reaches the cluster through that node only, takes the job
/// over from a SIGKILLed server A. Counting by search, B saw no pending document and
/// marked the job completed with nothing indexed; the documents stayed pending, never
/// searchable. Settling by id at QUORUM finds them, and the job ends only once every
/// acknowledged document is indexed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn job_waits_for_documents_a_restarted_node_does_not_hold() {
    const DOCUMENTS: usize = 300;
    const RESTARTED: usize = 2;
    const COLLECTION: &str = "FaultSettle";
    let (_serial, cluster) = exclusive_cluster().await;
    let started = Instant::now();
    let lease = ["--job-lease-secs", "3"];
    let mut a = start_server(cluster, COLLECTION, &lease).await;
    // B talks to the cluster through the restarted node only, so that every search it
    // makes (pending documents, settlement) is answered from that node's replicas.
    let only_restarted = [
        "--store",
        "weaviate",
        "--weaviate-http",
        &cluster.http_urls()[RESTARTED],
        "--weaviate-grpc",
        &cluster.grpc_addrs()[RESTARTED],
        "--collection",
        COLLECTION,
    ]
    .map(String::from);
    let b = store_faults::start_server(&only_restarted, &lease).await;
    let mut via_a = search_client(&a.address).await;
    let mut via_b = search_client(&b.address).await;

    blocking(move || cluster.kill_node(RESTARTED)).await;
    let documents = documents("settle", DOCUMENTS);
    let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();
    let acknowledged = ingest(&mut via_a, documents.clone()).await;
    // A dies at once, holding the job's lease, before it indexes much (if anything).
    a.child.start_kill().unwrap();
    a.child.wait().await.unwrap();
    let written = Instant::now();
    blocking(move || cluster.restart_node(RESTARTED)).await;
    eprintln!("weaviate-{RESTARTED} back {:.1?} after the documents were written without it", written.elapsed());

    // B's job list comes from a search of the restarted node, which misses the job:
    // asking for it by id shows it to B, whose runner takes it over once A's lease ends.
    let deadline = Instant::now() + Duration::from_secs(30);
    while via_b.get_job(GetJobRequest { job_id: acknowledged.job_id.clone() }).await.is_err() {
        assert!(Instant::now() < deadline, "B cannot read the job");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let done = wait_completed(&mut via_b, &acknowledged.job_id).await;
    eprintln!("B completed the job {:.1?} after the documents were written", written.elapsed());
    assert_eq!((done.processed_documents as usize, done.failed_documents), (DOCUMENTS, 0));

    // Completed means indexed: no node still holds a pending document of the job (a
    // job completed over pending documents leaves them there for good).
    // (A QUORUM delete reaches the third replica a moment later: a few seconds' grace.)
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut pending_left = Vec::new();
        for via in 0..NODES {
            pending_left.push(replica_counts(cluster, via, COLLECTION).await.map(|(_, _, pending)| pending));
        }
        if pending_left.iter().all(|p| *p == Some(0)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job completed with documents still pending; pending per node: {pending_left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every acknowledged document searchable, through every node once they agree.
    wait_replicas_agree(cluster, COLLECTION, DOCUMENTS as u64).await;
    for round in 0..NODES {
        assert_exactly_once(&mut via_b, &ids, &format!("after the settlement, round {round}")).await;
    }
    for probe in [0, DOCUMENTS / 2, DOCUMENTS - 1] {
        assert_finds(&mut via_b, &documents[probe]).await;
    }
    eprintln!("job_waits_for_documents_a_restarted_node_does_not_hold took {:.1?}", started.elapsed());
}
