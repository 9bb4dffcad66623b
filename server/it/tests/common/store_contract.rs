//! The cases every shared store passes the same way (run by `weaviate_store.rs` and
//! `postgres_store.rs` against real clusters): the embedded store's answers, one
//! index shared by two servers and the gateway, an index of another dimension refused
//! at start, and the helpers they use.

use std::collections::{BTreeMap, HashSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    Condition, DeleteDocumentsRequest, Document, Filter, GetDocumentsRequest, GetIndexStatsRequest, GetJobRequest,
    InfoRequest, IngestRequest, JobStatus, SearchHit, SearchQuery, SearchRequest, StringSet, condition, search_query,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::transport::Channel;

use super::{InProcessServer, ONNX, ServerProcess, TempDir, sentences, wait_serving};

pub async fn search_client(address: &str) -> SearchServiceClient<Channel> {
    let channel = Channel::from_shared(address.to_string()).unwrap().connect().await.unwrap();
    SearchServiceClient::new(channel).max_decoding_message_size(64 << 20)
}

pub fn text_query(text: &str) -> SearchQuery {
    SearchQuery { query: Some(search_query::Query::Text(text.to_string())) }
}

pub fn condition_equals(key: &str, value: &str) -> Condition {
    Condition { key: key.into(), test: Some(condition::Test::Equals(value.into())) }
}

pub fn condition_any(key: &str, values: &[&str]) -> Condition {
    Condition {
        key: key.into(),
        test: Some(condition::Test::AnyOf(StringSet { values: values.iter().map(|v| v.to_string()).collect() })),
    }
}

pub const TOPICS: [&str; 4] = ["alpha", "beta", "gamma", "delta"];

/// A corpus with metadata, short documents and a few long ones (several chunks).
pub fn corpus() -> Vec<Document> {
    let mut documents: Vec<Document> = sentences(400, 14)
        .into_iter()
        .enumerate()
        .map(|(i, text)| Document {
            id: format!("doc-{i}"),
            text,
            metadata: BTreeMap::from([
                ("topic".to_string(), TOPICS[i % 4].to_string()),
                ("parity".to_string(), if i % 2 == 0 { "even" } else { "odd" }.to_string()),
            ])
            .into_iter()
            .collect(),
        })
        .collect();
    for (i, long) in sentences(8, 600).into_iter().enumerate() {
        documents.push(Document {
            id: format!("long-{i}"),
            text: long,
            metadata: [("topic".to_string(), TOPICS[i % 4].to_string())].into_iter().collect(),
        });
    }
    documents
}

/// Ingests and polls GetJob on `client` until the job ends.
pub async fn ingest_and_wait(
    client: &mut SearchServiceClient<Channel>,
    documents: Vec<Document>,
) -> embedwire_proto::v1::Job {
    let job = client.ingest(IngestRequest { documents, ..Default::default() }).await.unwrap().into_inner().job.unwrap();
    wait_job(client, &job.job_id).await
}

pub async fn wait_job(client: &mut SearchServiceClient<Channel>, job_id: &str) -> embedwire_proto::v1::Job {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let job = client
            .get_job(GetJobRequest { job_id: job_id.into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .job
            .unwrap();
        if job.finished_at.is_some() {
            return job;
        }
        assert!(tokio::time::Instant::now() < deadline, "job did not finish: {job:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long a write may take to reach every replica a search can be answered from.
/// Weaviate acknowledges a write once a quorum (2 of 3) has it and commits it on the
/// third a moment later; each search is answered by one replica per shard, and the
/// server's calls rotate over the nodes, so a search right after a job ends can land
/// on the replica still without it (seen in CI: "gate valves throttling" answered
/// without valve-b). Bounded here, not assumed to be zero; the embedded store and the
/// PostgreSQL primary answer at once.
pub const READ_LAG: Duration = Duration::from_secs(10);

/// Answers in a row that must agree before a write counts as seen everywhere: two
/// rounds over a 3-node cluster's coordinators.
const AGREEING_ANSWERS: usize = 6;

/// Waits (at most [`READ_LAG`]) until `request` answers with hits that `seen` accepts
/// [`AGREEING_ANSWERS`] times in a row; panics naming `what` past that.
pub async fn until_every_replica(
    client: &mut SearchServiceClient<Channel>,
    request: SearchRequest,
    what: &str,
    mut seen: impl FnMut(&[SearchHit]) -> bool,
) {
    let started = Instant::now();
    let (mut agreeing, mut answers) = (0, 0);
    while agreeing < AGREEING_ANSWERS {
        let hits = client.search(request.clone()).await.unwrap().into_inner().results.remove(0).hits;
        answers += 1;
        agreeing = if seen(&hits) { agreeing + 1 } else { 0 };
        let late = started.elapsed() >= READ_LAG;
        assert!(agreeing > 0 || !late, "{what}: not seen within {READ_LAG:?}: {:?}", keys(&hits));
        if agreeing == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Printed for the record: how long the replicas took to agree in this run.
    println!("{what}: {answers} answers, {:?} until {AGREEING_ANSWERS} in a row agreed", started.elapsed());
}

/// Waits (as [`until_every_replica`]) until `request` answers with the same chunks
/// [`AGREEING_ANSWERS`] times in a row: every replica holds what was written.
pub async fn until_replicas_agree(client: &mut SearchServiceClient<Channel>, request: SearchRequest, what: &str) {
    let mut last: Option<HashSet<(String, u32)>> = None;
    until_every_replica(client, request, what, |hits| {
        let now: HashSet<_> = keys(hits).into_iter().collect();
        let same = last.as_ref() == Some(&now);
        last = Some(now);
        same
    })
    .await;
}

pub fn keys(hits: &[SearchHit]) -> Vec<(String, u32)> {
    hits.iter().map(|h| (h.document_id.clone(), h.chunk.as_ref().map_or(u32::MAX, |c| c.index))).collect()
}

/// The store `flags` give answers as the embedded store does: recall@10 against exact
/// search, filters, citations, text, scores (within `score_tolerance`), threshold,
/// offset and stored documents.
pub async fn same_answers_as_the_embedded_store(flags: Vec<String>, kind: &str, score_tolerance: f32) {
    let data = TempDir::new("parity");
    let embedded = InProcessServer::start(&[ONNX, &["--data-dir", &data.flag()]].concat()).await;
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let store = InProcessServer::start(&[ONNX, &flags].concat()).await;
    let mut exact = search_client(&embedded.address).await;
    let mut shared = search_client(&store.address).await;
    for client in [&mut exact, &mut shared] {
        let job = ingest_and_wait(client, corpus()).await;
        assert_eq!(job.status, JobStatus::Completed as i32, "{job:?}");
        assert_eq!(job.processed_documents, 408);
    }
    let every_chunk = SearchRequest { queries: vec![text_query("a")], top_k: Some(1000), ..Default::default() };
    until_replicas_agree(&mut shared, every_chunk, &format!("{kind}: every chunk")).await;
    let exact_stats = exact.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
    let shared_stats = shared.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
    assert_eq!((shared_stats.document_count, shared_stats.chunk_count), (408, exact_stats.chunk_count));
    assert!(exact_stats.chunk_count > 408, "the long documents have several chunks");

    let filters = [
        None,
        Some(Filter { must: vec![condition_equals("topic", "beta")], ..Default::default() }),
        Some(Filter {
            should: vec![condition_any("topic", &["alpha", "gamma"])],
            must_not: vec![condition_equals("parity", "odd")],
            ..Default::default()
        }),
    ];
    let queries = sentences(30, 6);
    let (mut found, mut wanted) = (0usize, 0usize);
    for (q, query) in queries.iter().enumerate() {
        let filter = filters[q % filters.len()].clone();
        let request = SearchRequest {
            queries: vec![text_query(query)],
            top_k: Some(10),
            filter: filter.clone(),
            include_metadata: Some(true),
            include_text: Some(true),
            ..Default::default()
        };
        let truth = exact.search(request.clone()).await.unwrap().into_inner().results.remove(0).hits;
        let answer = shared.search(request).await.unwrap().into_inner().results.remove(0).hits;
        let truth_keys: HashSet<_> = keys(&truth).into_iter().collect();
        wanted += truth.len();
        found += keys(&answer).iter().filter(|k| truth_keys.contains(k)).count();
        for hit in &answer {
            // Every hit passes the filter, whatever the store.
            let metadata = &hit.metadata;
            match q % filters.len() {
                1 => assert_eq!(metadata.get("topic").map(String::as_str), Some("beta"), "{hit:?}"),
                2 => {
                    assert!(["alpha", "gamma"].contains(&metadata["topic"].as_str()), "{hit:?}");
                    assert_ne!(metadata.get("parity").map(String::as_str), Some("odd"), "{hit:?}");
                }
                _ => {}
            }
            // Same citation, text and score as the embedded store for the same chunk.
            if let Some(same) = truth.iter().find(|t| (&t.document_id, &t.chunk) == (&hit.document_id, &hit.chunk)) {
                assert_eq!(hit.text, same.text);
                assert!((hit.score - same.score).abs() < score_tolerance, "{} vs {}", hit.score, same.score);
            }
        }
    }
    let recall = found as f64 / wanted as f64;
    println!("recall@10 of the {kind} store against exact search: {recall:.4} ({found}/{wanted})");
    assert!(recall >= 0.98, "recall@10 {recall}");

    // Threshold, offset and stored documents agree too.
    let request = SearchRequest {
        queries: vec![text_query(&queries[0])],
        top_k: Some(5),
        offset: 3,
        score_threshold: Some(0.2),
        ..Default::default()
    };
    let truth = exact.search(request.clone()).await.unwrap().into_inner().results.remove(0).hits;
    let answer = shared.search(request).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(keys(&answer), keys(&truth));
    let ids = vec!["doc-7".to_string(), "long-3".to_string(), "missing".to_string()];
    let a =
        exact.get_documents(GetDocumentsRequest { ids: ids.clone(), ..Default::default() }).await.unwrap().into_inner();
    let b = shared.get_documents(GetDocumentsRequest { ids, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(b.missing_ids, vec!["missing".to_string()]);
    assert_eq!(a.documents.len(), 2);
    for (x, y) in a.documents.iter().zip(&b.documents) {
        assert_eq!((&x.id, &x.text, &x.metadata, &x.chunks), (&y.id, &y.text, &y.metadata, &y.chunks));
    }
    embedded.stop().await.unwrap();
    store.stop().await.unwrap();
}

/// A free loopback port for a process that binds it itself.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The gateway binary, built by the workspace build beside the server's.
pub fn gateway_binary() -> std::path::PathBuf {
    embedwire_bench::server_binary::gateway_beside(&super::server_bin()).unwrap()
}

/// Starts the real gateway binary on a free port in front of `upstreams` (probing
/// them every second); returns it (killed when dropped) and its base URL once it
/// listens. Its log goes to the test's stderr.
pub async fn start_gateway(upstreams: &[&str]) -> (tokio::process::Child, String) {
    let port = free_port();
    let mut gateway = tokio::process::Command::new(gateway_binary())
        .args(["--listen", &format!("127.0.0.1:{port}"), "--upstream", &upstreams.join(",")])
        .args(["--probe-interval", "1"])
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut log = BufReader::new(gateway.stderr.take().unwrap()).lines();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = log.next_line().await.unwrap() {
            if line.contains("listening on") {
                return;
            }
        }
    })
    .await
    .expect("gateway listening");
    tokio::spawn(async move {
        while let Ok(Some(line)) = log.next_line().await {
            eprintln!("[gateway] {line}");
        }
    });
    (gateway, format!("http://127.0.0.1:{port}"))
}

/// What a shared store's test expects of it.
pub struct SharedStore {
    /// Flags of a server on the shared index.
    pub flags: Vec<String>,
    /// Info's store kind, the start of its index id, and its node count.
    pub kind: &'static str,
    pub index_prefix: String,
    pub nodes: usize,
    /// Store operations that must show up in /metrics after ingest and search.
    pub operations: &'static [&'static str],
    /// How long a write through one server may take to be seen through another.
    pub read_lag: Duration,
}

/// Two servers on one shared index behind the gateway: both name the index, one
/// answers for a job the other took, both find (and the gateway balances over) what
/// one ingested, deletes through one are gone on the other, store calls are timed.
pub async fn one_index_shared_by_two_servers_and_the_gateway(store: SharedStore) {
    let flags: Vec<&str> = store.flags.iter().map(String::as_str).collect();
    let a = InProcessServer::start(&[ONNX, &flags].concat()).await;
    let b = InProcessServer::start(&[ONNX, &flags].concat()).await;
    let (_gateway, gateway_url) = start_gateway(&[&a.address, &b.address]).await;

    // Both servers name the same shared index.
    for server in [&a, &b] {
        let mut embed =
            EmbedServiceClient::new(Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap());
        let info = embed.info(InfoRequest {}).await.unwrap().into_inner().store.expect("store in Info");
        assert_eq!((info.kind.as_str(), info.shared, info.healthy), (store.kind, true, true), "{info:?}");
        assert!(info.index_id.starts_with(&store.index_prefix), "{}", info.index_id);
        assert_eq!(info.nodes.len(), store.nodes, "{info:?}");
        // Known from the start: a node is reported missing only once a check failed.
        assert!(info.nodes.iter().all(|node| node.healthy), "a node reported missing by a new server: {info:?}");
    }

    let mut client_a = search_client(&a.address).await;
    let mut client_b = search_client(&b.address).await;
    let documents: Vec<Document> = sentences(200, 12)
        .into_iter()
        .enumerate()
        .map(|(i, text)| Document { id: format!("s-{i}"), text, metadata: Default::default() })
        .collect();
    let queries: Vec<String> = documents.iter().take(10).map(|d| d.text.clone()).collect();
    let ingest = client_a.ingest(IngestRequest { documents, ..Default::default() }).await.unwrap();
    let index = ingest.metadata().get("x-embedwire-index").expect("index metadata").to_str().unwrap().to_string();
    let job = ingest.into_inner().job.unwrap();
    // Server B answers for the job server A took.
    let finished = wait_job(&mut client_b, &job.job_id).await;
    assert_eq!((finished.status, finished.processed_documents), (JobStatus::Completed as i32, 200));

    // B finds what A ingested, and so does the gateway (over HTTP, balanced).
    for (i, query) in queries.iter().enumerate() {
        let request = SearchRequest { queries: vec![text_query(query)], top_k: Some(1), ..Default::default() };
        let response = client_b.search(request).await.unwrap();
        assert_eq!(response.metadata().get("x-embedwire-index").unwrap().to_str().unwrap(), index);
        assert_eq!(response.into_inner().results[0].hits[0].document_id, format!("s-{i}"));
    }
    let http = reqwest::Client::new();
    let mut upstreams = HashSet::new();
    for (i, query) in queries.iter().enumerate() {
        let response = http
            .post(format!("{gateway_url}/v1/search"))
            .json(&serde_json::json!({"query": query, "top_k": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-embedwire-index"].to_str().unwrap(), index);
        upstreams.insert(response.headers()["x-embedwire-upstream"].to_str().unwrap().to_string());
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["results"][0]["id"], format!("s-{i}"));
    }
    assert_eq!(upstreams.len(), 2, "a shared index is balanced over both servers: {upstreams:?}");
    let health: serde_json::Value =
        http.get(format!("{gateway_url}/healthz")).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["store"]["kind"], store.kind, "{health}");

    // Store calls are timed by operation.
    let metrics = http.get(format!("{}/metrics", a.address)).send().await.unwrap().text().await.unwrap();
    for operation in store.operations {
        let series =
            format!("embedwire_store_request_seconds_count{{store=\"{}\",operation=\"{operation}\"}}", store.kind);
        assert!(metrics.contains(&series), "{series} missing from /metrics");
    }

    // Deleted through B, gone on A.
    let deleted = client_b
        .delete_documents(DeleteDocumentsRequest {
            ids: vec!["s-0".into(), "s-1".into()],
            filter: None,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.deleted_count, 2);
    // A may read from a replica, which trails by at most the store's replica lag bound.
    let deadline = tokio::time::Instant::now() + store.read_lag;
    loop {
        let ids = vec!["s-0".into(), "s-2".into()];
        let missing = client_a
            .get_documents(GetDocumentsRequest { ids, ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .missing_ids;
        let request = SearchRequest { queries: vec![text_query(&queries[1])], top_k: Some(3), ..Default::default() };
        let hits = client_a.search(request).await.unwrap().into_inner().results.remove(0).hits;
        let gone = hits.iter().all(|h| h.document_id != "s-1" && h.document_id != "s-0");
        if missing == vec!["s-0".to_string()] && gone {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "deleted through B, still on A: {missing:?} {hits:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = client_a.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
    assert_eq!(stats.document_count, 198);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// Runs the server binary until it exits; returns (success, stderr).
pub async fn start_and_expect_exit(args: &[String]) -> (bool, String) {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(super::server_bin())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("NO_COLOR", "1")
            .output(),
    )
    .await
    .expect("the server exits on bad configuration")
    .unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// A server with the pseudo backend at dim 8 on the index `flags` name creates it and
/// serves; then a server with the real model on the same flags must refuse to start,
/// without a panic. Returns what it printed, for the store's test to check the message.
pub async fn refuses_another_dimension(flags: &[String]) -> String {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut pseudo = ServerProcess::spawn(&[&flags[..], &["--backend", "pseudo", "--pseudo-dim", "8"]].concat()).await;
    wait_serving(&pseudo.address).await;
    pseudo.child.kill().await.unwrap();
    let onnx = [&flags[..], ONNX].concat().into_iter().map(String::from).collect::<Vec<_>>();
    let (ok, stderr) = start_and_expect_exit(&onnx).await;
    assert!(!ok, "the real model started on an index of dim 8: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}
