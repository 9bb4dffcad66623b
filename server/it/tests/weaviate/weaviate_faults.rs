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
//!   them, and every acknowledged document becomes searchable;
//! - at replication factor 2, a node killed with SIGKILL: QUORUM cannot be met on the
//!   shards with a replica there, so a new job cannot progress; it says why (GetJob on
//!   both servers and `GET /v1/jobs/{id}` carry `last_error` and `retrying_since`), its
//!   server logs a handful of lines, not one per try, and once the node is back on its
//!   data the job finishes by itself and the document is searchable.
//! - a Weaviate node lost behind two servers and the gateway (issue 29): every
//!   `/healthz` says `degraded` naming the node, no page presents a partial count as
//!   current, the gateway keeps both servers in use (searches and a new ingest
//!   through it succeed at once); with the node back, `ok` and the exact count again;
//! - pending documents of a completed job restored as Weaviate restores deleted
//!   objects: the server deletes them (and no pending object of another job);
//! - a read at QUORUM that repairs a restarted node's job records writes them whole.
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
use common::store_contract::start_gateway;
use common::store_faults::{
    self, assert_exactly_once, assert_finds, blocking, documents, index_of, ingest, ingest_completed, job,
    search_client, search_until, text_query, wait_completed, wait_indexing,
};
use common::weaviate::{AsyncReplication, WeaviateCluster};
use embedwire_proto::v1::{CountAccuracy, GetIndexStatsRequest, GetJobRequest, InfoRequest, IngestRequest, JobStatus};
use serde_json::Value;
use tokio::sync::{Mutex, MutexGuard};

/// One test at a time: they share the cluster and kill its nodes.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// Nodes of the cluster; replication factor 3 (min(3, nodes)), QUORUM writes survive one down.
const NODES: usize = 3;

/// Longest wait for a restarted Weaviate node to catch up by async replication, which
/// only copies objects older than its propagation delay (5 s here, 30 s by default).
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
async fn a_server_started_while_a_node_is_down_serves_and_ingests() {
    // `embedwire-bench chaos --store weaviate` restarts a killed server while the node it
    // killed is still down: the server must start on the collections' layout
    // (replication factor 3 with 3 addresses configured). Once Weaviate has dropped the
    // node from /v1/nodes, as it had in a chaos run that failed so, the list has only
    // 2 nodes; here the node may still be listed as down, which must work too.
    const KILLED: usize = 1;
    let (_serial, cluster) = exclusive_cluster().await;
    let first = start_server(cluster, "FaultStartNodeDown", &[]).await;
    let (_, mut ids) = ingest_completed(&mut search_client(&first.address).await, "before", 5).await;
    drop(first);
    blocking(move || {
        cluster.kill_node(KILLED);
        cluster.wait_node_unhealthy(KILLED, 0);
    })
    .await;
    let server = start_server(cluster, "FaultStartNodeDown", &[]).await;
    let mut client = search_client(&server.address).await;
    let (_, during) = ingest_completed(&mut client, "during", 5).await;
    ids.extend(during);
    assert_exactly_once(&mut client, &ids, "with a node down").await;
    blocking(move || cluster.restart_node(KILLED)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_weaviate_node_during_ingest_and_search() {
    const SEED: usize = 200;
    // Enough that the node dies with most of the job still to write (batches of 64).
    const DOCUMENTS: usize = 600;
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
    // Weaviate's own replication timing: the restarted node must stay without the
    // documents while B settles, and at `make cluster`'s 5 s it could catch up first.
    // Its own cluster, stopped and removed when the test ends.
    let _serial = SERIAL.lock().await;
    let owned = Arc::new(blocking(|| WeaviateCluster::start_with(NODES, AsyncReplication::WeaviateDefaults)).await);
    let cluster: &WeaviateCluster = &owned;
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

    let node = owned.clone();
    blocking(move || node.kill_node(RESTARTED)).await;
    let documents = documents("settle", DOCUMENTS);
    let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();
    let acknowledged = ingest(&mut via_a, documents.clone()).await;
    // A dies at once, holding the job's lease, before it indexes much (if anything).
    a.child.start_kill().unwrap();
    a.child.wait().await.unwrap();
    let written = Instant::now();
    let node = owned.clone();
    blocking(move || node.restart_node(RESTARTED)).await;
    eprintln!("weaviate-{RESTARTED} back {:.1?} after the documents were written without it", written.elapsed());

    // B's job list comes from a search of the restarted node, which misses the job:
    // asking for it by id shows it to B, whose runner takes it over once A's lease ends.
    let deadline = Instant::now() + Duration::from_secs(30);
    while via_b.get_job(GetJobRequest { job_id: acknowledged.job_id.clone(), ..Default::default() }).await.is_err() {
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

/// How many of `warnings` name each job (`job="..."`), lines naming none counted
/// under "no job".
fn warnings_by_job(warnings: &[String]) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for line in warnings {
        let subject = line
            .split("job=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .map_or_else(|| "no job".to_string(), |id| format!("job {id}"));
        *counts.entry(subject).or_insert(0) += 1;
    }
    counts
}

/// A stale replica repaired by a read keeps whole objects. At a consistency above ONE,
/// Weaviate 1.35 repairs a replica that missed a write with the object the search
/// found, which holds only the properties the search asked for: the servers' list of
/// unfinished jobs (job ids only) rewrote a restarted node's copy of a job's progress
/// as an object with a job id alone, with the newest time, so that nothing repaired
/// it back; read from there, the lease looked free and the job could be taken over
/// (175 such reads in 25 cycles of a chaos run). Here: a job written while node R was down,
/// its server killed holding the lease, R restarted (Weaviate's own 30 s replication
/// delay keeps it behind), and a second server reading the jobs every second: each
/// copy of the job's records the reads' repairs give R is whole. (Which records a
/// read repairs depends on the replicas Weaviate asks, so the test waits for one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_repairs_a_restarted_node_with_whole_job_records() {
    const RESTARTED: usize = 2;
    const COLLECTION: &str = "FaultWhole";
    /// Every property a job record has (`schema.rs`), each repaired copy must too.
    const PROPERTIES: [&str; 6] = ["job_id", "part", "state", "record_json", "lease_owner", "lease_until"];
    /// How long the repaired copies are watched after the first one appears.
    const WATCH: Duration = Duration::from_secs(5);
    let _serial = SERIAL.lock().await;
    let owned = Arc::new(blocking(|| WeaviateCluster::start_with(NODES, AsyncReplication::WeaviateDefaults)).await);
    let cluster: &WeaviateCluster = &owned;
    let started = Instant::now();
    // A's lease outlasts the test: B only reads the job, never takes it over (a take
    // over rewrites the records whole at QUORUM and would hide the repair).
    let lease = ["--job-lease-secs", "120"];
    let mut a = start_server(cluster, COLLECTION, &lease).await;
    let mut via_a = search_client(&a.address).await;

    let node = owned.clone();
    blocking(move || node.kill_node(RESTARTED)).await;
    let job_id = ingest(&mut via_a, documents("whole", 50)).await.job_id;
    a.child.start_kill().unwrap();
    a.child.wait().await.unwrap();
    let node = owned.clone();
    blocking(move || node.restart_node(RESTARTED)).await;
    let on_restarted = || job_records_on(cluster, RESTARTED, COLLECTION, &job_id);
    assert!(on_restarted().await.is_empty(), "weaviate-{RESTARTED} missed the job's records while down");

    let _b = start_server(cluster, COLLECTION, &lease).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while on_restarted().await.is_empty() {
        assert!(Instant::now() < deadline, "no read repaired weaviate-{RESTARTED}'s job records in 60 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let first = Instant::now();
    let mut repaired = Vec::new();
    while first.elapsed() < WATCH {
        repaired = on_restarted().await;
        for copy in &repaired {
            let properties = &copy["properties"];
            for name in PROPERTIES {
                assert!(properties.get(name).is_some(), "{name} missing from a repaired job record: {copy}");
            }
            let json = properties["record_json"].as_str().unwrap_or_default();
            assert!(serde_json::from_str::<Value>(json).is_ok(), "a repaired job record unreadable: {copy}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let parts: Vec<&str> = repaired.iter().filter_map(|copy| copy["properties"]["part"].as_str()).collect();
    eprintln!(
        "repaired on weaviate-{RESTARTED}: {parts:?}; a_read_repairs_a_restarted_node_with_whole_job_records took {:.1?}",
        started.elapsed()
    );
}

/// The copies node `node` holds of job `job_id`'s records (header, progress), read
/// there by id.
async fn job_records_on(cluster: &WeaviateCluster, node: usize, collection: &str, job_id: &str) -> Vec<Value> {
    let mut copies = Vec::new();
    for part in ["header", "progress"] {
        let uuid = embedwire_server::store::weaviate::convert::job_uuid(job_id, part);
        let name = &cluster.node_names()[node];
        let url = format!("{}/v1/objects/{collection}Jobs/{uuid}?node_name={name}", cluster.http_urls()[node]);
        let answer = reqwest::get(&url).await.unwrap();
        if answer.status() == reqwest::StatusCode::NOT_FOUND {
            continue;
        }
        assert!(answer.status().is_success(), "GET {url}: {}", answer.status());
        copies.push(answer.json().await.unwrap());
    }
    copies
}

/// Warnings and errors among the lines a server has logged since the last call.
fn drain_warnings(server: &mut ServerProcess) -> Vec<String> {
    let mut warnings = Vec::new();
    while let Ok(line) = server.stderr_lines.try_recv() {
        if line.contains(" WARN ") || line.contains(" ERROR ") {
            warnings.push(line);
        }
    }
    warnings
}

/// Issue 29: at RF 2, QUORUM needs both replicas of a shard, so with one node of three
/// SIGKILLed every read of the job's pending documents (a search over every shard)
/// fails. Before, the job stayed `pending` with no reason while its server logged the
/// raw Weaviate error about five times a second (~300 lines a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rf2_node_loss_job_says_why_and_finishes_when_the_node_returns() {
    const COLLECTION: &str = "FaultReplicas2";
    const KILLED: usize = 1;
    /// How long the server's log is watched while the job cannot progress.
    const WATCH: Duration = Duration::from_secs(12);
    /// Most warnings allowed in that time about one job, or about none: a line when
    /// it starts failing and one per change of its reason (Weaviate may first answer
    /// "cannot achieve consistency level" before it drops the dead node from its
    /// routing). Counted per job: jobs server B acknowledged may be taken over by A
    /// once their leases lapse (the CI run of 2026-11-29: three, 15 s after their
    /// creation; 7 lines in all, no job logged twice), each of them news of its own.
    const MOST_WARNINGS: usize = 3;
    /// Ingests tried right after the kill, each refused or not by where its objects land.
    const REFUSAL_TRIES: usize = 12;
    let (_serial, cluster) = exclusive_cluster().await;
    let started = Instant::now();
    let rf2 = ["--replication-factor", "2"];
    let mut a = start_server(cluster, COLLECTION, &rf2).await;
    let b = start_server(cluster, COLLECTION, &rf2).await;
    let mut via_a = search_client(&a.address).await;
    let mut via_b = search_client(&b.address).await;
    let (_, mut ids) = ingest_completed(&mut via_a, "before", 20).await;

    blocking(move || cluster.kill_node(KILLED)).await;
    let killed = Instant::now();
    let killed_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    // Refused ingests leave nothing behind. Until Weaviate sees the node is dead,
    // a create whose pending documents land on a whole shard but whose job does not is
    // refused; before the take-back, its pending document stayed pending for ever (no
    // job to run it, and the ghost sweep skipped it): this test then failed about one
    // run in four. Through server B, so that its acknowledged jobs' warnings do not
    // count against server A's below.
    // All at once, to land inside that window.
    let tries = documents("refused-or-not", REFUSAL_TRIES).into_iter().map(|document| {
        let mut via_b = via_b.clone();
        async move {
            (via_b.ingest(IngestRequest { documents: vec![document.clone()], ..Default::default() }).await, document.id)
        }
    });
    let mut refused = 0;
    for (answer, id) in futures::future::join_all(tries).await {
        match answer {
            Ok(_) => ids.push(id),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{id}: {status}");
                refused += 1;
            }
        }
    }
    eprintln!("{refused} of {REFUSAL_TRIES} ingests refused right after weaviate-{KILLED} was killed");
    blocking(move || cluster.wait_node_unhealthy(KILLED, 0)).await;
    eprintln!("weaviate-{KILLED} SIGKILLed; the cluster saw it down after {:.1?}", killed.elapsed());
    drain_warnings(&mut a);

    // Until Weaviate routes around the dead node, a write to a shard with a replica there
    // fails at QUORUM; the ingest is acknowledged once it does.
    let document = documents("lost-node", 1).remove(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let acknowledged = loop {
        match via_a.ingest(IngestRequest { documents: vec![document.clone()], ..Default::default() }).await {
            Ok(response) => break response.into_inner().job.unwrap(),
            Err(status) => {
                assert!(Instant::now() < deadline, "ingest never acknowledged with one node down: {status}");
                eprintln!("ingest refused with weaviate-{KILLED} down (retrying): {}", status.message());
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    ids.push(document.id.clone());
    let job_id = acknowledged.job_id.clone();
    eprintln!("job {job_id} acknowledged {:.1?} after the kill", killed.elapsed());

    // The job says why it cannot progress, on the server running it...
    let deadline = Instant::now() + Duration::from_secs(30);
    let stuck = loop {
        let now = job(&mut via_a, &job_id).await;
        assert_ne!(
            now.status,
            JobStatus::Completed as i32,
            "at RF 2 with a node down the job cannot complete: {now:?}"
        );
        if now.last_error.contains("replicas reachable") {
            break now;
        }
        assert!(Instant::now() < deadline, "no last_error naming the replicas within 30 s: {now:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("GetJob via A after {:.1?}: {stuck:?}", killed.elapsed());
    // Pending if the node died before the runner first read the job's documents, Running
    // if after (the clean-clone run of 2026-11-29 saw the second): both are true states.
    let waiting = [JobStatus::Pending as i32, JobStatus::Running as i32];
    assert!(waiting.contains(&stuck.status), "{stuck:?}");
    assert!(
        stuck.last_error.contains("1 of 2 replicas reachable") && stuck.last_error.contains("QUORUM needs 2"),
        "the reason names the replicas missing: {:?}",
        stuck.last_error
    );
    assert!(!stuck.last_error.contains("inconsistent consistency levels"), "Weaviate's raw text: {stuck:?}");
    let since = stuck.retrying_since.expect("retrying_since with last_error");
    assert!(
        since >= killed_unix - 1.0 && since <= killed_unix + 60.0,
        "retrying since {since}, killed at {killed_unix}"
    );

    // ... over HTTP ...
    let url = format!("{}/v1/jobs/{job_id}", a.address);
    let body: serde_json::Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
    assert_eq!(body["status"], "pending", "{body}");
    assert!(body["last_error"].as_str().is_some_and(|e| e.contains("replicas reachable")), "{body}");
    assert!(body["retrying_since"].as_f64().is_some(), "{body}");

    // ... and on the other server, which reads it from the job's record.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let seen = job(&mut via_b, &job_id).await;
        if seen.last_error.contains("replicas reachable") && seen.retrying_since.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "server B does not show why the job waits: {seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A handful of log lines while it keeps failing, not one per try.
    let mut warnings = drain_warnings(&mut a);
    let watched = Instant::now();
    while watched.elapsed() < WATCH {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = job(&mut via_a, &job_id).await;
        assert!(!now.last_error.is_empty() && now.status == JobStatus::Pending as i32, "still waiting: {now:?}");
        assert_eq!(now.retrying_since, Some(since), "one run of failures, since its start");
        warnings.extend(drain_warnings(&mut a));
    }
    eprintln!(
        "server A logged {} warnings from the ingest to {:.0?} later:\n{}",
        warnings.len(),
        killed.elapsed(),
        warnings.join("\n")
    );
    for (subject, lines) in warnings_by_job(&warnings) {
        assert!(lines <= MOST_WARNINGS, "{lines} warnings about {subject}: a log flood");
    }
    let about_job = format!("job=\"{job_id}\"");
    assert!(
        warnings.iter().any(|w| w.contains("job cannot progress") && w.contains(&about_job)),
        "the failure is logged once"
    );

    let restarting = Instant::now();
    blocking(move || cluster.restart_node(KILLED)).await;
    eprintln!("weaviate-{KILLED} back on its data, the cluster healthy after {:.1?}", restarting.elapsed());
    let done = wait_completed(&mut via_a, &job_id).await;
    eprintln!("the job completed {:.1?} after the node was back", restarting.elapsed());
    assert_eq!((done.processed_documents, done.failed_documents), (1, 0));
    assert!(done.last_error.is_empty() && done.retrying_since.is_none(), "cleared once it progressed: {done:?}");
    let body: serde_json::Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
    assert!(body.get("last_error").is_none() && body.get("retrying_since").is_none(), "{body}");
    let recovered = drain_warnings(&mut a);
    eprintln!("server A logged {} warnings after the node came back:\n{}", recovered.len(), recovered.join("\n"));

    assert_finds(&mut via_a, &document).await;
    wait_replicas_agree_rf2(cluster, COLLECTION, ids.len() as u64).await;
    assert_exactly_once(&mut via_b, &ids, "after the node came back").await;
    eprintln!("rf2_node_loss_job_says_why_and_finishes_when_the_node_returns took {:.1?}", started.elapsed());
}

/// Waits until the collection's documents, counted through each node, number
/// `documents` (at RF 2 a node holds two of three shards, so its own replicas cannot
/// be compared with the total as in [`wait_replicas_agree`]).
async fn wait_replicas_agree_rf2(cluster: &WeaviateCluster, collection: &str, documents: u64) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let mut totals = Vec::new();
        for via in 0..NODES {
            totals.push(replica_counts(cluster, via, collection).await);
        }
        if totals.iter().all(|c| c.is_some_and(|(_, docs, pending)| docs == documents && pending == 0)) {
            return;
        }
        assert!(Instant::now() < deadline, "counts through each node after {CONVERGE_TIMEOUT:?}: {totals:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
/// Issue 29. Two servers on one collection (RF 3) and the gateway in front; one
/// Weaviate node SIGKILLed, then restarted on its data directory. While it is down:
/// the three `/healthz` pages turn `degraded` naming it; a count is exact only if
/// true, and once a page says the node is missing its count is the last exact one
/// with its age, or null (GetIndexStats and /metrics likewise); the gateway keeps
/// both servers healthy, its searches all answer and a new ingest through it is
/// acknowledged at once and indexed. With the node back: `ok` on every page and the
/// count exact and equal to the documents acknowledged (not summed by the gateway).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_node_keeps_health_and_counts_truthful() {
    const SEED: usize = 40;
    const LATE: usize = 5;
    const KILLED: usize = 2;
    const COLLECTION: &str = "FaultHealth";
    let (_serial, cluster) = exclusive_cluster().await;
    let started = Instant::now();
    let lost = cluster.node_names()[KILLED].clone();
    let a = start_server(cluster, COLLECTION, &[]).await;
    let b = start_server(cluster, COLLECTION, &[]).await;
    let (_gateway, gateway) = start_gateway(&[&a.address, &b.address]).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let pages = [a.address.clone(), b.address.clone(), gateway.clone()].map(|base| format!("{base}/healthz"));
    let mut via_a = search_client(&a.address).await;
    let mut via_b = search_client(&b.address).await;
    let (seed, mut ids) = ingest_completed(&mut via_a, "health", SEED).await;

    let whole = |h: &Value, count: usize| {
        h["status"] == "ok" && h["document_count_exact"] == true && h["document_count"] == count as u64
    };
    for page in &pages {
        let truth = [SEED as u64];
        poll_health(&http, page, "ok with the seed counted", Duration::from_secs(30), &truth, |h| whole(h, SEED)).await;
    }

    blocking(move || cluster.kill_node(KILLED)).await;
    let killed = Instant::now();
    eprintln!("killed {lost} with SIGKILL");
    let stop = Arc::new(AtomicBool::new(false));
    let searches = tokio::spawn(gateway_searches(http.clone(), gateway.clone(), seed[3].text.clone(), stop.clone()));

    // A new ingest through the gateway: acknowledged at once, indexed within 30 s.
    let late = documents("late", LATE);
    ids.extend(late.iter().map(|d| d.id.clone()));
    let body = serde_json::json!({"documents": late.iter().map(|d| serde_json::json!({"id": d.id, "text": d.text})).collect::<Vec<_>>()});
    let response = http.post(format!("{gateway}/v1/ingest")).json(&body).send().await.unwrap();
    let acknowledged_after = killed.elapsed();
    let status = response.status();
    let job: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "ingest through the gateway {acknowledged_after:.1?} after the loss: {job}");
    eprintln!("ingest through the gateway acknowledged {acknowledged_after:.1?} after the loss");
    // Measured about 10 s on the first try after a SIGKILL (no 503: the call waits),
    // the rest of issue 29's "within a few seconds" is still open; this bound catches
    // a stall, not the wait.
    assert!(
        acknowledged_after < Duration::from_secs(15),
        "ingest acknowledged only {acknowledged_after:.1?} after the loss"
    );
    let job_id = job["job_id"].as_str().unwrap().to_string();
    // Stored now: SEED, or SEED + LATE once the job commits; any exact count is one of them.
    let truth = [SEED as u64, (SEED + LATE) as u64];
    let degraded = |h: &Value| h["status"] == "degraded" && h["detail"].as_str().is_some_and(|d| d.contains(&lost));
    for page in &pages {
        let seen =
            poll_health(&http, page, "degraded naming the lost node", Duration::from_secs(20), &truth, degraded).await;
        eprintln!("{page} degraded {:.1?} after the loss: {seen}", killed.elapsed());
    }
    // From now on every page knows the node is missing: no count is exact.
    for page in &pages {
        let health = health_page(&http, page).await;
        assert!(degraded(&health), "{page}: {health}");
        assert_eq!(
            health["document_count_exact"], false,
            "{page} presents a count as exact with {lost} missing: {health}"
        );
        assert_truthful(&health, &truth, page);
    }
    let upstreams = health_page(&http, &pages[2]).await["upstreams"].clone();
    for upstream in upstreams.as_array().unwrap() {
        assert_eq!(upstream["healthy"], true, "the gateway took a live server out: {upstreams}");
        assert_eq!(upstream["store_healthy"], true, "{upstreams}");
    }
    for client in [&mut via_a, &mut via_b] {
        let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
        assert_ne!(stats.counts_accuracy(), CountAccuracy::Exact, "{stats:?}");
        assert!(stats.counts_detail.contains(&lost), "{stats:?}");
        if stats.counts_accuracy() == CountAccuracy::LastExact {
            assert!(truth.contains(&stats.document_count), "{stats:?}");
            assert!(truth.contains(&stats.chunk_count), "one chunk a document: {stats:?}");
        }
    }
    let metrics = http.get(format!("{}/metrics", a.address)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("embedwire_index_counts_exact 0"), "{metrics}");
    assert!(!metrics.contains("embedwire_index_documents "), "a count that is not exact exported as a gauge");

    let mut job_state = Value::Null;
    while job_state["status"] != "completed" {
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the late job is not done 30 s after the loss: {job_state}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        job_state = http.get(format!("{gateway}/v1/jobs/{job_id}")).send().await.unwrap().json().await.unwrap();
    }
    eprintln!("the late job completed {:.1?} after the loss", killed.elapsed());
    stop.store(true, Ordering::Relaxed);
    let (answered, failures) = searches.await.unwrap();
    eprintln!("searches through the gateway with {lost} down: {answered} answered, {} failed", failures.len());
    assert!(failures.is_empty(), "searches through the gateway failed after the loss: {failures:?}");
    assert!(answered > 0);

    let restarting = Instant::now();
    blocking(move || cluster.restart_node(KILLED)).await;
    eprintln!("{lost} back after {:.1?}", restarting.elapsed());
    let acknowledged = [(SEED + LATE) as u64];
    for page in &pages {
        // The node's replicas catch up by async replication; until every node counts
        // the same, the counts stay the last exact ones.
        poll_health(&http, page, "ok with every acknowledged document counted", CONVERGE_TIMEOUT, &acknowledged, |h| {
            whole(h, SEED + LATE)
        })
        .await;
        eprintln!("{page} ok and exact {:.1?} after the restart", restarting.elapsed());
    }
    for client in [&mut via_a, &mut via_b] {
        let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
        assert_eq!(stats.counts_accuracy(), CountAccuracy::Exact, "{stats:?}");
        assert_eq!((stats.document_count, stats.chunk_count), ((SEED + LATE) as u64, (SEED + LATE) as u64));
    }
    let metrics = http.get(format!("{}/metrics", b.address)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(&format!("embedwire_index_documents {}", SEED + LATE)), "{metrics}");
    let converging = Instant::now();
    wait_replicas_agree(cluster, COLLECTION, ids.len() as u64).await;
    eprintln!("every node holds every document, nothing pending, {:.1?} later", converging.elapsed());
    assert_exactly_once(&mut via_b, &ids, "node back").await;
    eprintln!("lost_node_keeps_health_and_counts_truthful took {:.1?}", started.elapsed());
}

/// Weaviate can bring back pending objects deleted while a node was down (seen in
/// [`lost_node_keeps_health_and_counts_truthful`] when the node came back: the 5
/// pending objects of the job ingested meanwhile returned on every node, for ever
/// counted as pending). Written back here as Weaviate restores them: the server's
/// health follower deletes the ones of a completed job, and only those.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pending_documents_restored_after_their_job_completed_are_deleted() {
    const COLLECTION: &str = "FaultGhosts";
    let (_serial, cluster) = exclusive_cluster().await;
    let server = start_server(cluster, COLLECTION, &[]).await;
    let mut client = search_client(&server.address).await;
    let documents = documents("ghost", 4);
    let completed = ingest(&mut client, documents.clone()).await.job_id;
    wait_completed(&mut client, &completed).await;
    let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();

    // Three ghosts of the completed job, and one of a job no server knows (not ours to delete).
    let restored = |job_id: &str, sequence: usize, document: &embedwire_proto::v1::Document| {
        serde_json::json!({
            "class": format!("{COLLECTION}Pending"),
            "properties": {
                "job_id": job_id,
                "sequence": sequence,
                "failed": false,
                "reason": "",
                "document_json": serde_json::json!({"id": document.id, "text": document.text, "metadata": {}}).to_string(),
            },
        })
    };
    let http = reqwest::Client::new();
    let objects = (0..3).map(|i| restored(&completed, i, &documents[i])).chain([restored(
        "a-job-nobody-knows",
        0,
        &documents[3],
    )]);
    let mut written = Vec::new();
    for object in objects {
        let reply = http.post(format!("{}/v1/objects", cluster.http_urls()[0])).json(&object).send().await.unwrap();
        assert!(reply.status().is_success(), "{}", reply.text().await.unwrap());
        written.push(reply.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string());
    }
    let pending = |stats: &embedwire_proto::v1::GetIndexStatsResponse| {
        (stats.counts_accuracy() == CountAccuracy::Exact).then_some(stats.pending_documents)
    };
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
        if seen.last() != Some(&pending(&stats)) {
            seen.push(pending(&stats));
        }
        if pending(&stats) == Some(1) && seen.contains(&Some(4)) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(40), "pending documents counted over time: {seen:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("pending documents counted: {seen:?}; the ghosts deleted {:.1?} after they came back", started.elapsed());
    for via in 0..NODES {
        let counts = replica_counts(cluster, via, COLLECTION).await;
        assert_eq!(counts, Some((4, 4, 1)), "node {via}: (chunks, documents, pending)");
    }
    // The completed job and its documents are untouched (the foreign object removed first).
    let foreign = format!("{}/v1/objects/{COLLECTION}Pending/{}", cluster.http_urls()[0], written[3]);
    assert!(http.delete(foreign).send().await.unwrap().status().is_success());
    assert_eq!(job(&mut client, &completed).await.status, JobStatus::Completed as i32);
    assert_exactly_once(&mut client, &ids, "ghosts deleted").await;
}

/// `/healthz` as JSON.
async fn health_page(http: &reqwest::Client, page: &str) -> Value {
    http.get(page).send().await.unwrap().json().await.unwrap()
}

/// A `/healthz` count is never a false one: exact only when it is one of `truth`
/// (what is stored now); otherwise null, or a last exact count with its age, the
/// reason, and a value the index held.
fn assert_truthful(health: &Value, truth: &[u64], page: &str) {
    let count = &health["document_count"];
    match health["document_count_exact"].as_bool() {
        Some(true) => {
            assert!(count.as_u64().is_some_and(|c| truth.contains(&c)), "{page}: a false exact count: {health}")
        }
        Some(false) => {
            assert!(health["document_count_detail"].is_string(), "{page}: an inexact count without a reason: {health}");
            if !count.is_null() {
                assert!(
                    health["document_count_age_secs"].is_number(),
                    "{page}: a last count without its age: {health}"
                );
            }
        }
        None => panic!("{page}: no document_count_exact: {health}"),
    }
}

/// Polls `page` until `done`, checking every answer with [`assert_truthful`]; returns
/// the answer that was done, panics after `timeout`.
pub(crate) async fn poll_health(
    http: &reqwest::Client,
    page: &str,
    what: &str,
    timeout: Duration,
    truth: &[u64],
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let health = health_page(http, page).await;
        assert_truthful(&health, truth, page);
        if done(&health) {
            return health;
        }
        assert!(Instant::now() < deadline, "{page} not {what} within {timeout:?}: {health}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Searches through the gateway's `/v1/search` until `stop`; (answered, failures
/// with when they happened).
async fn gateway_searches(
    http: reqwest::Client,
    gateway: String,
    query: String,
    stop: Arc<AtomicBool>,
) -> (usize, Vec<String>) {
    let started = Instant::now();
    let (mut answered, mut failures) = (0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let body = serde_json::json!({"query": query, "top_k": 3});
        match http.post(format!("{gateway}/v1/search")).json(&body).send().await {
            Ok(response) if response.status() == 200 => answered += 1,
            Ok(response) => failures.push(format!(
                "{:.1?}: {} {}",
                started.elapsed(),
                response.status(),
                response.text().await.unwrap_or_default()
            )),
            Err(error) => failures.push(format!("{:.1?}: {error}", started.elapsed())),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (answered, failures)
}
