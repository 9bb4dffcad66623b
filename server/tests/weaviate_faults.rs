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
//!   serves again without a restart.
//!
//! Every test counts the documents it had acknowledged before and after the fault:
//! each is stored exactly once (GetDocuments over every id, one chunk each, and the
//! index's document and chunk counts equal to the number acknowledged).
//!
//! The tests share the cluster and kill parts of it, so they run one at a time
//! (`SERIAL`), each in its own collection, and each starts by bringing back any node a
//! failed test left down.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::weaviate::WeaviateCluster;
use common::{ServerProcess, health_status, sentences, wait_health, wait_serving};
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    Document, GetDocumentsRequest, GetIndexStatsRequest, GetJobRequest, InfoRequest, IngestRequest, Job, JobStatus,
    SearchQuery, SearchRequest, SearchResponse, search_query,
};
use tokio::sync::{Mutex, MutexGuard};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;

/// One test at a time: they share the cluster and kill its nodes.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// Nodes of the cluster; replication factor 3 (min(3, nodes)), QUORUM writes survive one down.
const NODES: usize = 3;

/// Longest wait for a job to complete (the real model on 2 shared cores).
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

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

/// Runs a blocking cluster call (seconds long) off the runtime's workers, so that the
/// tasks of the test (searches, log readers) keep running meanwhile.
async fn blocking<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(call).await.expect("cluster call")
}

/// Starts the real binary on the cluster's `collection` and waits until it serves.
async fn start_server(cluster: &WeaviateCluster, collection: &str, extra: &[&str]) -> ServerProcess {
    let http = cluster.http_urls().join(",");
    let grpc = cluster.grpc_addrs().join(",");
    let mut args = vec![
        "--backend",
        "onnx",
        "--store",
        "weaviate",
        "--weaviate-http",
        &http,
        "--weaviate-grpc",
        &grpc,
        "--collection",
        collection,
        "--max-documents-per-request",
        "5000",
    ];
    args.extend_from_slice(extra);
    let server = ServerProcess::spawn(&args).await;
    wait_serving(&server.address).await;
    server
}

async fn search_client(address: &str) -> SearchServiceClient<Channel> {
    let channel = Channel::from_shared(address.to_string()).unwrap().connect().await.expect("connect");
    SearchServiceClient::new(channel).max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20)
}

/// `count` short documents (one chunk each) with ids `<prefix>-<i>`.
fn documents(prefix: &str, count: usize) -> Vec<Document> {
    sentences(count, 8)
        .into_iter()
        .enumerate()
        .map(|(i, text)| Document {
            id: format!("{prefix}-{i}"),
            text: format!("{prefix} {text}"),
            ..Default::default()
        })
        .collect()
}

/// Ingests `documents` in one request; returns the acknowledged job.
async fn ingest(client: &mut SearchServiceClient<Channel>, documents: Vec<Document>) -> Job {
    let count = documents.len();
    let job = client.ingest(IngestRequest { documents }).await.expect("ingest").into_inner().job.unwrap();
    assert_eq!(job.total_documents as usize, count, "every document acknowledged");
    job
}

async fn job(client: &mut SearchServiceClient<Channel>, id: &str) -> Job {
    client.get_job(GetJobRequest { job_id: id.to_string() }).await.expect("get job").into_inner().job.unwrap()
}

/// Polls GetJob until the job completes; panics on failure or after [`JOB_TIMEOUT`].
async fn wait_completed(client: &mut SearchServiceClient<Channel>, id: &str) -> Job {
    let deadline = Instant::now() + JOB_TIMEOUT;
    loop {
        let now = job(client, id).await;
        assert_ne!(now.status, JobStatus::Failed as i32, "job {id} failed: {now:?}");
        if now.status == JobStatus::Completed as i32 {
            return now;
        }
        assert!(Instant::now() < deadline, "job {id} not completed within {JOB_TIMEOUT:?}: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every id in `ids` is stored exactly once, as one chunk, and the index holds nothing
/// else: no acknowledged document lost, none doubled. Err says what is off.
async fn exactly_once(client: &mut SearchServiceClient<Channel>, ids: &[String]) -> Result<(), String> {
    for batch in ids.chunks(1000) {
        let got = client
            .get_documents(GetDocumentsRequest { ids: batch.to_vec() })
            .await
            .map_err(|status| format!("GetDocuments: {status:?}"))?
            .into_inner();
        if !got.missing_ids.is_empty() {
            return Err(format!(
                "{} of {} acknowledged documents missing, e.g. {:?}",
                got.missing_ids.len(),
                batch.len(),
                &got.missing_ids[..got.missing_ids.len().min(3)]
            ));
        }
        let found: Vec<&str> = got.documents.iter().map(|d| d.id.as_str()).collect();
        if found != batch {
            return Err("documents not in request order, or repeated".into());
        }
        if let Some(document) = got.documents.iter().find(|d| d.chunks.len() != 1) {
            return Err(format!("{} has {} chunks, not 1", document.id, document.chunks.len()));
        }
    }
    let stats = client
        .get_index_stats(GetIndexStatsRequest {})
        .await
        .map_err(|status| format!("GetIndexStats: {status:?}"))?
        .into_inner();
    let expected = ids.len() as u64;
    let counts = (stats.document_count, stats.chunk_count, stats.pending_documents);
    if counts != (expected, expected, 0) {
        return Err(format!("(documents, chunks, pending) = {counts:?}, expected ({expected}, {expected}, 0)"));
    }
    Ok(())
}

async fn assert_exactly_once(client: &mut SearchServiceClient<Channel>, ids: &[String], when: &str) {
    if let Err(problem) = exactly_once(client, ids).await {
        panic!("{when}: {problem}");
    }
}

fn text_query(text: &str) -> SearchRequest {
    SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Text(text.to_string())) }],
        top_k: Some(3),
        ..Default::default()
    }
}

/// The index a search answer names (`x-embedwire-index`).
fn index_of(response: &tonic::Response<SearchResponse>) -> String {
    response.metadata().get("x-embedwire-index").expect("search answers name their index").to_str().unwrap().to_string()
}

/// The document `text` was taken from is the best hit for it, once.
async fn assert_finds(client: &mut SearchServiceClient<Channel>, document: &Document) {
    let response = client.search(text_query(&document.text)).await.expect("search");
    let hits = &response.get_ref().results[0].hits;
    assert_eq!(hits[0].document_id, document.id, "best hit for its own text");
    assert!(hits[0].score > 0.99, "score {} for its own text", hits[0].score);
    assert_ne!(hits[1].document_id, document.id, "{} found twice", document.id);
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
    const DOCUMENTS: usize = 3000;
    let (_serial, cluster) = exclusive_cluster().await;
    let started = Instant::now();
    // A short lease so that B takes over soon after A stops renewing it.
    let lease = ["--job-lease-secs", "3"];
    let mut a = start_server(cluster, "FaultServerKill", &lease).await;
    let b = start_server(cluster, "FaultServerKill", &lease).await;
    let mut via_a = search_client(&a.address).await;
    let mut via_b = search_client(&b.address).await;
    assert_exactly_once(&mut via_b, &[], "before the ingest").await;

    let documents = documents("kill", DOCUMENTS);
    let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();
    let acknowledged = ingest(&mut via_a, documents.clone()).await;
    let job_id = acknowledged.job_id;

    // Kill A once it has indexed some, but not all, of the job.
    let deadline = Instant::now() + JOB_TIMEOUT;
    let before_kill = loop {
        let now = job(&mut via_a, &job_id).await;
        assert_ne!(now.status, JobStatus::Completed as i32, "the job finished before the kill: make it larger");
        if now.processed_documents > 0 {
            break now;
        }
        assert!(Instant::now() < deadline, "A indexed nothing within {JOB_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    a.child.start_kill().unwrap(); // SIGKILL
    a.child.wait().await.unwrap();
    let killed = Instant::now();
    eprintln!("killed A with SIGKILL at {}/{DOCUMENTS} processed", before_kill.processed_documents);
    assert!((before_kill.processed_documents as usize) < DOCUMENTS);

    let done = wait_completed(&mut via_b, &job_id).await;
    eprintln!("B completed the job {:.1?} after the kill", killed.elapsed());
    assert_eq!((done.processed_documents as usize, done.failed_documents), (DOCUMENTS, 0));
    assert_exactly_once(&mut via_b, &ids, "after B took over").await;
    for probe in [0, DOCUMENTS / 2, DOCUMENTS - 1] {
        assert_finds(&mut via_b, &documents[probe]).await;
    }

    // A again, from an empty data directory: everything it knows comes from the cluster.
    let a = start_server(cluster, "FaultServerKill", &lease).await;
    let mut via_a = search_client(&a.address).await;
    let seen_by_a = job(&mut via_a, &job_id).await;
    assert_eq!(seen_by_a.status, JobStatus::Completed as i32, "restarted A: {seen_by_a:?}");
    assert_eq!((seen_by_a.processed_documents as usize, seen_by_a.failed_documents), (DOCUMENTS, 0));
    assert_exactly_once(&mut via_a, &ids, "via the restarted A").await;
    eprintln!("sigkilled_server_job_finishes_on_another_server took {:.1?}", started.elapsed());
}

/// Searches through every client in turn until `stop`, counting answers and failures.
async fn search_until(
    clients: Vec<SearchServiceClient<Channel>>,
    query: String,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut clients = clients;
    let mut turn = 0;
    while !stop.load(Ordering::Relaxed) {
        let count = clients.len();
        let client = &mut clients[turn % count];
        turn += 1;
        match client.search(text_query(&query)).await {
            Ok(response) if !response.get_ref().results[0].hits.is_empty() => {
                answered.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => failures.push("search answered without hits".to_string()),
            Err(status) => failures.push(format!("{:?}: {}", status.code(), status.message())),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    failures
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

    let seed = documents("seed", SEED);
    let seeded = ingest(&mut via_a, seed.clone()).await;
    wait_completed(&mut via_a, &seeded.job_id).await;
    let mut ids: Vec<String> = seed.iter().map(|d| d.id.clone()).collect();
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
    let deadline = Instant::now() + JOB_TIMEOUT;
    while job(&mut via_a, &acknowledged.job_id).await.processed_documents == 0 {
        assert!(Instant::now() < deadline, "nothing indexed within {JOB_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    const DOCUMENTS: usize = 300;
    let (_serial, cluster) = exclusive_cluster().await;
    let started = Instant::now();
    let server = start_server(cluster, "FaultClusterDown", &[]).await;
    let mut client = search_client(&server.address).await;
    let documents = documents("down", DOCUMENTS);
    let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();
    let acknowledged = ingest(&mut client, documents.clone()).await;
    wait_completed(&mut client, &acknowledged.job_id).await;
    assert_exactly_once(&mut client, &ids, "before the stop").await;

    let stopping = Instant::now();
    blocking(move || cluster.stop_all()).await;
    let stopped = Instant::now();
    eprintln!("stopped every weaviate node in {:.1?}", stopping.elapsed());

    let status = client.search(text_query(&documents[0].text)).await.expect_err("search with the store down");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("weaviate store"), "names the store: {}", status.message());

    let http = reqwest::Client::new();
    let response = http
        .post(format!("{}/v1/search", server.address))
        .json(&serde_json::json!({"query": documents[0].text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let body = response.text().await.unwrap();
    assert!(body.contains("weaviate store"), "names the store: {body}");

    // The store is checked every second: NOT_SERVING within a few.
    let deadline = stopped + Duration::from_secs(5);
    while health_status(&server.address).await != Some(ServingStatus::NotServing) {
        assert!(Instant::now() < deadline, "still {:?} 5 s after the stop", health_status(&server.address).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("NOT_SERVING {:.1?} after the stop", stopped.elapsed());
    let readyz = http.get(format!("{}/readyz", server.address)).send().await.unwrap();
    assert_eq!(readyz.status().as_u16(), 503, "/readyz with the store down");

    let restarting = Instant::now();
    blocking(move || cluster.start_all()).await;
    eprintln!("cluster back after {:.1?}", restarting.elapsed());
    wait_health(&server.address, ServingStatus::Serving).await;
    eprintln!("SERVING again {:.1?} after the cluster start", restarting.elapsed());
    let readyz = http.get(format!("{}/readyz", server.address)).send().await.unwrap();
    assert_eq!(readyz.status().as_u16(), 200, "/readyz with the store back");
    assert_finds(&mut client, &documents[0]).await;
    assert_exactly_once(&mut client, &ids, "after the cluster came back").await;
    eprintln!("whole_cluster_down_then_back_without_a_server_restart took {:.1?}", started.elapsed());
}
