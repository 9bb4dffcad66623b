//! What the fault tests of every shared store share: documents that are one chunk
//! each, ingest and job polling, the exactly-once check of acknowledged documents,
//! searches kept running through a fault, and the cases every store passes the same
//! way: a SIGKILLed server, and the whole store down then back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    CountAccuracy, Document, GetDocumentsRequest, GetIndexStatsRequest, GetJobRequest, IngestRequest, Job, JobStatus,
    SearchQuery, SearchRequest, SearchResponse, search_query,
};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;

use super::{ServerProcess, health_status, sentences, wait_health, wait_serving};

/// Longest wait for a job to complete (the real model on 2 shared cores).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs a blocking cluster call (seconds long) off the runtime's workers, so that the
/// tasks of the test (searches, log readers) keep running meanwhile.
pub async fn blocking<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(call).await.expect("cluster call")
}

/// Starts the real binary with the real model on the store `flags` give, and waits
/// until it serves.
pub async fn start_server(flags: &[String], extra: &[&str]) -> ServerProcess {
    let mut args = vec!["--backend", "onnx", "--max-documents-per-request", "5000"];
    args.extend(flags.iter().map(String::as_str));
    args.extend_from_slice(extra);
    let server = ServerProcess::spawn(&args).await;
    wait_serving(&server.address).await;
    server
}

pub async fn search_client(address: &str) -> SearchServiceClient<Channel> {
    let channel = Channel::from_shared(address.to_string()).unwrap().connect().await.expect("connect");
    SearchServiceClient::new(channel).max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20)
}

/// `count` short documents (one chunk each) with ids `<prefix>-<i>`.
pub fn documents(prefix: &str, count: usize) -> Vec<Document> {
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
pub async fn ingest(client: &mut SearchServiceClient<Channel>, documents: Vec<Document>) -> Job {
    let count = documents.len();
    let job = client
        .ingest(IngestRequest { documents, ..Default::default() })
        .await
        .expect("ingest")
        .into_inner()
        .job
        .unwrap();
    assert_eq!(job.total_documents as usize, count, "every document acknowledged");
    job
}

pub async fn job(client: &mut SearchServiceClient<Channel>, id: &str) -> Job {
    client
        .get_job(GetJobRequest { job_id: id.to_string(), ..Default::default() })
        .await
        .expect("get job")
        .into_inner()
        .job
        .unwrap()
}

/// Ingests `count` new documents `<prefix>-<i>` (see [`documents`]) in one request and
/// waits until the job completes; returns the documents and their ids.
pub async fn ingest_completed(
    client: &mut SearchServiceClient<Channel>,
    prefix: &str,
    count: usize,
) -> (Vec<Document>, Vec<String>) {
    let documents = documents(prefix, count);
    let ids = documents.iter().map(|d| d.id.clone()).collect();
    let acknowledged = ingest(client, documents.clone()).await;
    wait_completed(client, &acknowledged.job_id).await;
    (documents, ids)
}

/// Polls GetJob until the job has indexed some documents, so that a fault lands in
/// the middle of it; panics after [`JOB_TIMEOUT`].
pub async fn wait_indexing(client: &mut SearchServiceClient<Channel>, id: &str) {
    let deadline = Instant::now() + JOB_TIMEOUT;
    while job(client, id).await.processed_documents == 0 {
        assert!(Instant::now() < deadline, "nothing indexed within {JOB_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls GetJob until the job completes; panics on failure or after [`JOB_TIMEOUT`].
pub async fn wait_completed(client: &mut SearchServiceClient<Channel>, id: &str) -> Job {
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
pub async fn exactly_once(client: &mut SearchServiceClient<Channel>, ids: &[String]) -> Result<(), String> {
    for batch in ids.chunks(1000) {
        let got = client
            .get_documents(GetDocumentsRequest { ids: batch.to_vec(), ..Default::default() })
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
        .get_index_stats(GetIndexStatsRequest::default())
        .await
        .map_err(|status| format!("GetIndexStats: {status:?}"))?
        .into_inner();
    let expected = ids.len() as u64;
    let counts = (stats.document_count, stats.chunk_count, stats.pending_documents);
    // With a store node down the counts are the last exact ones, marked so (issue 29): no
    // claim about now, so only exact counts are held to the acknowledged documents.
    let claims_exact =
        matches!(CountAccuracy::try_from(stats.counts_accuracy), Ok(CountAccuracy::Exact | CountAccuracy::Unspecified));
    if claims_exact && counts != (expected, expected, 0) {
        return Err(format!("(documents, chunks, pending) = {counts:?}, expected ({expected}, {expected}, 0)"));
    }
    Ok(())
}

pub async fn assert_exactly_once(client: &mut SearchServiceClient<Channel>, ids: &[String], when: &str) {
    if let Err(problem) = exactly_once(client, ids).await {
        panic!("{when}: {problem}");
    }
}

pub fn text_query(text: &str) -> SearchRequest {
    SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Text(text.to_string())) }],
        top_k: Some(3),
        ..Default::default()
    }
}

/// The index a search answer names (`x-embedwire-index`).
pub fn index_of(response: &tonic::Response<SearchResponse>) -> String {
    response.metadata().get("x-embedwire-index").expect("search answers name their index").to_str().unwrap().to_string()
}

/// The document `text` was taken from is the best hit for it, once.
pub async fn assert_finds(client: &mut SearchServiceClient<Channel>, document: &Document) {
    let response = client.search(text_query(&document.text)).await.expect("search");
    let hits = &response.get_ref().results[0].hits;
    assert_eq!(hits[0].document_id, document.id, "best hit for its own text");
    assert!(hits[0].score > 0.99, "score {} for its own text", hits[0].score);
    assert_ne!(hits[1].document_id, document.id, "{} found twice", document.id);
}

/// A server SIGKILLed in the middle of a job: another server on the same shared index
/// (`flags`) takes the job over when the lease runs out and finishes it, every
/// acknowledged document stored exactly once; a restarted server with an empty data
/// directory reports it completed.
pub async fn sigkilled_server_job_finishes_on_another_server(flags: &[String]) {
    const DOCUMENTS: usize = 1000;
    let started = Instant::now();
    // A short lease so that B takes over soon after A stops renewing it.
    let lease = ["--job-lease-secs", "3"];
    let mut a = start_server(flags, &lease).await;
    let b = start_server(flags, &lease).await;
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

    // A again, from an empty data directory: everything it knows comes from the store.
    let a = start_server(flags, &lease).await;
    let mut via_a = search_client(&a.address).await;
    let seen_by_a = job(&mut via_a, &job_id).await;
    assert_eq!(seen_by_a.status, JobStatus::Completed as i32, "restarted A: {seen_by_a:?}");
    assert_eq!((seen_by_a.processed_documents as usize, seen_by_a.failed_documents), (DOCUMENTS, 0));
    assert_exactly_once(&mut via_a, &ids, "via the restarted A").await;
    eprintln!("sigkilled_server_job_finishes_on_another_server took {:.1?}", started.elapsed());
}

/// The whole store stopped under a server on it (`flags`): search answers UNAVAILABLE
/// over gRPC and 503 over HTTP, both naming `store` ("postgres store", ...); health
/// turns NOT_SERVING within 5 s and /readyz answers 503. Once the store is started
/// again, the same server serves again without a restart, every acknowledged document
/// stored exactly once. `stop` stops the whole store and `start` brings it back; both
/// block until done (they run via [`blocking`]).
pub async fn whole_store_down_then_back_without_a_server_restart(
    flags: &[String],
    store: &str,
    stop: impl FnOnce() + Send + 'static,
    start: impl FnOnce() + Send + 'static,
) {
    const DOCUMENTS: usize = 300;
    let started = Instant::now();
    let server = start_server(flags, &[]).await;
    let mut client = search_client(&server.address).await;
    let (documents, ids) = ingest_completed(&mut client, "down", DOCUMENTS).await;
    assert_exactly_once(&mut client, &ids, "before the stop").await;

    let stopping = Instant::now();
    blocking(stop).await;
    let stopped = Instant::now();
    eprintln!("stopped the {store} in {:.1?}", stopping.elapsed());

    let status = client.search(text_query(&documents[0].text)).await.expect_err("search with the store down");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains(store), "names the store: {}", status.message());

    let http = reqwest::Client::new();
    let response = http
        .post(format!("{}/v1/search", server.address))
        .json(&serde_json::json!({"query": documents[0].text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let body = response.text().await.unwrap();
    assert!(body.contains(store), "names the store: {body}");

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
    blocking(start).await;
    eprintln!("{store} back after {:.1?}", restarting.elapsed());
    wait_health(&server.address, ServingStatus::Serving).await;
    eprintln!("SERVING again {:.1?} after the {store} start", restarting.elapsed());
    let readyz = http.get(format!("{}/readyz", server.address)).send().await.unwrap();
    assert_eq!(readyz.status().as_u16(), 200, "/readyz with the store back");
    assert_finds(&mut client, &documents[0]).await;
    assert_exactly_once(&mut client, &ids, "after the store came back").await;
    eprintln!("whole_store_down_then_back_without_a_server_restart ({store}) took {:.1?}", started.elapsed());
}

/// Searches through every client in turn until `stop`, counting answers and failures.
pub async fn search_until(
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
