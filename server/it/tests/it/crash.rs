//! Nothing acknowledged is lost: the real binary is killed with SIGKILL again and again
//! while it indexes a large ingest. After every restart each document the job had
//! reported processed is stored and searchable (by vector and by keyword), the keyword
//! index holds exactly the chunks the vector index holds, nothing is duplicated, and
//! the job resumes until every acknowledged document is indexed.

use crate::common;

use std::time::{Duration, Instant};

use common::{READY_TIMEOUT, ServerProcess, TempDir, wait_serving};
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    Document, GetDocumentsRequest, GetIndexStatsRequest, GetJobRequest, IngestRequest, Job, JobStatus, SearchMode,
    SearchQuery, SearchRequest, SearchStreamRequest, search_query,
};
use tonic::transport::Channel;

const DOCUMENTS: usize = 20_000;
const KILLS: usize = 10;

fn text_of(i: usize) -> String {
    format!("document number {i} about topic {} and subject {}", i % 97, i % 89)
}

async fn start(data_dir: &str) -> (ServerProcess, SearchServiceClient<Channel>) {
    let flags = [
        "--backend",
        "pseudo",
        "--data-dir",
        data_dir,
        "--ingest-batch-documents",
        "32",
        "--max-documents-per-request",
        "20000",
    ];
    let server = ServerProcess::spawn(&flags).await;
    wait_serving(&server.address).await;
    let channel = Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap();
    (server, SearchServiceClient::new(channel).max_decoding_message_size(64 << 20))
}

async fn job(client: &mut SearchServiceClient<Channel>, id: &str) -> Job {
    client
        .get_job(GetJobRequest { job_id: id.to_string(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap()
}

/// Every document below `processed` is stored and is its own best hit; the index holds
/// exactly one chunk per stored document.
async fn check_processed_are_searchable(client: &mut SearchServiceClient<Channel>, processed: usize) {
    let ids: Vec<String> = (0..processed).map(|i| format!("doc-{i}")).collect();
    for batch in ids.chunks(5000) {
        let got = client
            .get_documents(GetDocumentsRequest { ids: batch.to_vec(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert!(
            got.missing_ids.is_empty(),
            "{} processed documents missing, e.g. {:?}",
            got.missing_ids.len(),
            &got.missing_ids[..1]
        );
    }
    let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
    assert!(stats.document_count >= processed as u64);
    assert_eq!(stats.chunk_count, stats.document_count, "one chunk per document, none duplicated");
    // Spread probes over the processed range (pseudo vectors: same text, same vector).
    for probe in (0..processed).step_by((processed / 25).max(1)) {
        let request = SearchRequest {
            queries: vec![SearchQuery { query: Some(search_query::Query::Text(text_of(probe))) }],
            top_k: Some(2),
            ..Default::default()
        };
        let hits = client.search(request).await.unwrap().into_inner().results.remove(0).hits;
        assert_eq!(hits[0].document_id, format!("doc-{probe}"));
        assert!(hits[0].score > 0.9999);
        assert_ne!(hits[1].document_id, hits[0].document_id, "no duplicate of doc-{probe}");
    }
    keyword_index_agrees(client, processed).await;
}

/// The keyword index holds the indexed chunks, each once (every text has the word
/// "document"; one chunk per document), counted between two GetIndexStats because the
/// resumed job keeps indexing meanwhile; and a document's own number finds it first
/// (numbers from 97 on are in one text only: topics and subjects are smaller).
pub async fn keyword_index_agrees(client: &mut SearchServiceClient<Channel>, processed: usize) {
    let chunks = async |client: &mut SearchServiceClient<Channel>| {
        client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner().chunk_count
    };
    let before = chunks(client).await;
    let every = SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Text("document".into())) }],
        top_k: Some(100_000),
        include_text: Some(false),
        include_metadata: Some(false),
        mode: SearchMode::Keyword as i32,
        ..Default::default()
    };
    let mut stream =
        client.search_stream(SearchStreamRequest { search: Some(every), page_size: 5000 }).await.unwrap().into_inner();
    let mut found = std::collections::HashSet::new();
    let mut hits = 0u64;
    while let Some(page) = stream.message().await.unwrap() {
        hits += page.hits.len() as u64;
        found.extend(page.hits.into_iter().map(|h| h.document_id));
    }
    let after = chunks(client).await;
    assert!(before <= hits && hits <= after, "the keyword index holds {hits} chunks, the index {before} to {after}");
    assert_eq!(found.len() as u64, hits, "each chunk once, one chunk per document");
    for probe in (97..processed).step_by((processed / 25).max(1)) {
        let request = SearchRequest {
            queries: vec![SearchQuery { query: Some(search_query::Query::Text(probe.to_string())) }],
            top_k: Some(2),
            mode: SearchMode::Keyword as i32,
            ..Default::default()
        };
        let hits = client.search(request).await.unwrap().into_inner().results.remove(0).hits;
        assert_eq!(hits.len(), 1, "only doc-{probe} holds {probe}: {hits:?}");
        assert_eq!(hits[0].document_id, format!("doc-{probe}"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_ingest_loses_nothing_acknowledged() {
    let data = TempDir::new("crash");
    let data_dir = data.flag();
    let (mut server, mut client) = start(&data_dir).await;
    let documents: Vec<Document> =
        (0..DOCUMENTS).map(|i| Document { id: format!("doc-{i}"), text: text_of(i), ..Default::default() }).collect();
    let acknowledged =
        client.ingest(IngestRequest { documents, ..Default::default() }).await.unwrap().into_inner().job.unwrap();
    let job_id = acknowledged.job_id.clone();
    assert_eq!(acknowledged.total_documents as usize, DOCUMENTS);

    let mut reported = 0usize;
    for kill in 0..KILLS {
        // Wait for progress past what was seen before, then kill mid-flight.
        let deadline = Instant::now() + READY_TIMEOUT;
        let seen = loop {
            let now = job(&mut client, &job_id).await;
            if now.processed_documents as usize > reported || now.status == JobStatus::Completed as i32 {
                break now;
            }
            assert!(Instant::now() < deadline, "no progress after restart {kill}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_ne!(seen.status, JobStatus::Completed as i32, "the job finished before kill {kill}: make it larger");
        reported = seen.processed_documents as usize;
        server.child.start_kill().unwrap();
        server.child.wait().await.unwrap();
        drop(client);

        (server, client) = start(&data_dir).await;
        let after = job(&mut client, &job_id).await;
        assert!(
            after.processed_documents as usize >= reported,
            "processed went back from {reported} to {}",
            after.processed_documents
        );
        assert_eq!(after.total_documents as usize, DOCUMENTS);
        check_processed_are_searchable(&mut client, reported).await;
        eprintln!("kill {}: {reported} processed before, {} after restart", kill + 1, after.processed_documents);
    }

    // The job resumes and indexes every acknowledged document.
    let deadline = Instant::now() + Duration::from_secs(120);
    while job(&mut client, &job_id).await.status != JobStatus::Completed as i32 {
        assert!(Instant::now() < deadline, "the job did not complete");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = job(&mut client, &job_id).await;
    assert_eq!((done.processed_documents as usize, done.failed_documents), (DOCUMENTS, 0));
    check_processed_are_searchable(&mut client, DOCUMENTS).await;
    let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
    assert_eq!((stats.document_count as usize, stats.pending_documents), (DOCUMENTS, 0));
}
