//! Collections on the embedded store: separate indexes on one server. The same ids
//! in two collections stay apart, jobs of one are not reachable through another,
//! deleting one leaves the others whole, and a restart finds each as it was.

use crate::common;

use common::{InProcessServer, PSEUDO, TempDir};
use embedwire_proto::v1::collection_service_client::CollectionServiceClient;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    CollectionIndex, CollectionSettings, CreateCollectionRequest, DeleteCollectionRequest, DeleteDocumentsRequest,
    Document, GetDocumentsRequest, GetIndexStatsRequest, GetJobRequest, IngestRequest, IngestStreamRequest,
    ListCollectionsRequest, SearchMode, SearchRequest, SearchStreamRequest, WatchJobRequest,
};
use futures::StreamExt;
use tonic::Code;
use tonic::transport::Channel;

struct Clients {
    collections: CollectionServiceClient<Channel>,
    search: SearchServiceClient<Channel>,
}

async fn clients(server: &InProcessServer) -> Clients {
    clients_at(&server.address).await
}

async fn clients_at(address: &str) -> Clients {
    let channel = Channel::from_shared(address.to_string()).unwrap().connect().await.unwrap();
    Clients { collections: CollectionServiceClient::new(channel.clone()), search: SearchServiceClient::new(channel) }
}

fn create(name: &str, settings: CollectionSettings) -> CreateCollectionRequest {
    CreateCollectionRequest { name: name.into(), settings: Some(settings) }
}

/// The same two ids in every collection, each text naming its collection.
fn documents(collection: &str) -> Vec<Document> {
    ["one", "two"]
        .iter()
        .map(|id| Document {
            id: format!("doc-{id}"),
            text: format!("Document {id} of the {collection} collection, about shared ids kept apart."),
            metadata: [("collection".to_string(), collection.to_string())].into(),
        })
        .collect()
}

/// Ingests into `collection` and waits for the job (watched in the same collection).
async fn ingest(search: &mut SearchServiceClient<Channel>, collection: &str, documents: Vec<Document>) -> String {
    let request = IngestRequest { documents, collection: collection.into() };
    let job = search.ingest(request).await.unwrap().into_inner().job.unwrap();
    let watch = WatchJobRequest { job_id: job.job_id.clone(), collection: collection.into() };
    let mut updates = search.watch_job(watch).await.unwrap().into_inner();
    let mut last = None;
    while let Some(update) = updates.next().await {
        last = update.unwrap().job;
    }
    assert_eq!(last.unwrap().processed_documents, 2, "{collection}");
    job.job_id
}

fn keyword_search(collection: &str) -> SearchRequest {
    SearchRequest {
        queries: vec![common::store_contract::text_query("document shared ids collection")],
        top_k: Some(10),
        mode: SearchMode::Keyword as i32,
        collection: collection.into(),
        ..Default::default()
    }
}

/// The collections each hit's document says it belongs to.
async fn found_in(search: &mut SearchServiceClient<Channel>, collection: &str) -> Vec<String> {
    let results = search.search(keyword_search(collection)).await.unwrap().into_inner().results;
    let mut found: Vec<String> = results[0].hits.iter().map(|hit| hit.metadata["collection"].clone()).collect();
    found.dedup();
    found
}

async fn documents_in(search: &mut SearchServiceClient<Channel>, collection: &str) -> u64 {
    let request = GetIndexStatsRequest { collection: collection.into() };
    search.get_index_stats(request).await.unwrap().into_inner().document_count
}

#[tokio::test(flavor = "multi_thread")]
async fn collections_keep_their_documents_jobs_and_settings_apart() {
    let data = TempDir::new("collections");
    let data_dir = data.flag();
    let flags = [PSEUDO, &["--data-dir", &data_dir]].concat();
    let server = InProcessServer::start(&flags).await;
    let Clients { collections: mut admin, mut search } = clients(&server).await;

    // Create: settings of their own, the server's where unset.
    let alpha = CollectionSettings { chunk_tokens: Some(64), chunk_overlap_tokens: Some(8), ..Default::default() };
    let created = admin.create_collection(create("alpha", alpha)).await.unwrap().into_inner().collection.unwrap();
    let settings = created.settings.unwrap();
    assert_eq!((settings.chunk_tokens, settings.chunk_overlap_tokens), (Some(64), Some(8)));
    assert_eq!(settings.index, CollectionIndex::Exact as i32, "the server's --index");
    let beta = CollectionSettings { index: CollectionIndex::Hnsw as i32, ..Default::default() };
    admin.create_collection(create("beta", beta)).await.unwrap();

    // Refusals name the field.
    let status = admin.create_collection(create("alpha", Default::default())).await.unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    for bad in ["Alpha", "a-b", "", "../x"] {
        let status = admin.create_collection(create(bad, Default::default())).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{bad}: {status:?}");
        assert!(status.message().starts_with("name: "), "{}", status.message());
    }
    let overlapping =
        CollectionSettings { chunk_tokens: Some(16), chunk_overlap_tokens: Some(16), ..Default::default() };
    let status = admin.create_collection(create("gamma", overlapping)).await.unwrap_err();
    assert!(status.message().starts_with("settings.chunk_overlap_tokens: "), "{}", status.message());

    let listed = admin.list_collections(ListCollectionsRequest {}).await.unwrap().into_inner().collections;
    let names: Vec<&str> = listed.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);

    // The same ids in three collections (the default one included) stay apart.
    let mut jobs = Vec::new();
    for collection in ["", "alpha", "beta"] {
        jobs.push(ingest(&mut search, collection, documents(collection)).await);
    }
    for collection in ["", "alpha", "beta"] {
        assert_eq!(found_in(&mut search, collection).await, [collection], "search of {collection:?}");
        let request = GetDocumentsRequest { ids: vec!["doc-one".into()], collection: collection.into() };
        let found = search.get_documents(request).await.unwrap().into_inner().documents;
        assert_eq!(found[0].metadata["collection"], collection, "{found:?}");
        assert_eq!(documents_in(&mut search, collection).await, 2);
    }
    // A job is reachable only through its own collection.
    for (job, own) in jobs.iter().zip(["", "alpha", "beta"]) {
        for other in ["", "alpha", "beta"].into_iter().filter(|other| *other != own) {
            let request = GetJobRequest { job_id: job.clone(), collection: other.into() };
            assert_eq!(search.get_job(request).await.unwrap_err().code(), Code::NotFound, "{own} via {other}");
        }
        let request = GetJobRequest { job_id: job.clone(), collection: own.into() };
        assert!(search.get_job(request).await.is_ok());
    }
    // An unknown collection is NOT_FOUND, naming it, on every call.
    let status = search.search(keyword_search("gamma")).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert!(status.message().contains("gamma"), "{}", status.message());
    let status = search.ingest(IngestRequest { documents: documents("gamma"), collection: "gamma".into() }).await;
    assert_eq!(status.unwrap_err().code(), Code::NotFound);
    let status = search.get_index_stats(GetIndexStatsRequest { collection: "gamma".into() }).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let status = search.get_index_stats(GetIndexStatsRequest { collection: "Gamma!".into() }).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "a malformed name says so");

    // Deleting a document in one collection leaves the same id in the others.
    let request =
        DeleteDocumentsRequest { ids: vec!["doc-one".into()], collection: "alpha".into(), ..Default::default() };
    assert_eq!(search.delete_documents(request).await.unwrap().into_inner().deleted_count, 1);
    assert_eq!(documents_in(&mut search, "alpha").await, 1);
    assert_eq!(documents_in(&mut search, "beta").await, 2);
    assert_eq!(documents_in(&mut search, "").await, 2);

    // A stream names its collection in its first message; another name later is refused.
    let stream = futures::stream::iter(vec![
        IngestStreamRequest { documents: documents("beta")[..1].to_vec(), collection: "beta".into() },
        IngestStreamRequest { documents: documents("beta")[1..].to_vec(), collection: String::new() },
    ]);
    let streamed = search.ingest_stream(stream).await.unwrap().into_inner();
    assert_eq!(streamed.received_documents, 2);
    let stream = futures::stream::iter(vec![
        IngestStreamRequest { documents: documents("beta"), collection: "beta".into() },
        IngestStreamRequest { documents: documents("alpha"), collection: "alpha".into() },
    ]);
    let status = search.ingest_stream(stream).await.unwrap_err();
    assert!(status.message().starts_with("messages[1].collection: "), "{}", status.message());
    let search_stream = SearchStreamRequest { search: Some(keyword_search("beta")), page_size: 1 };
    let mut pages = search.search_stream(search_stream).await.unwrap().into_inner();
    while let Some(page) = pages.next().await {
        assert!(page.unwrap().hits.iter().all(|hit| hit.metadata["collection"] == "beta"));
    }

    // Deleting a collection removes it whole and leaves the others.
    let deleted = admin.delete_collection(DeleteCollectionRequest { name: "alpha".into() }).await.unwrap();
    assert_eq!(deleted.into_inner().deleted_documents, 1);
    assert_eq!(search.search(keyword_search("alpha")).await.unwrap_err().code(), Code::NotFound);
    let status = admin.delete_collection(DeleteCollectionRequest { name: "alpha".into() }).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(found_in(&mut search, "beta").await, ["beta"]);
    assert_eq!(found_in(&mut search, "").await, [""]);
    assert!(!data.0.join("collections/alpha").exists(), "its files are gone");
    server.stop().await.unwrap();

    // A restart opens each collection as it was; a collection created again is empty.
    let server = InProcessServer::start(&flags).await;
    let Clients { collections: mut admin, mut search } = clients(&server).await;
    let listed = admin.list_collections(ListCollectionsRequest {}).await.unwrap().into_inner().collections;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].name.as_str(), listed[0].settings.as_ref().unwrap().index),
        ("beta", CollectionIndex::Hnsw as i32)
    );
    assert_eq!(documents_in(&mut search, "beta").await, 2);
    assert_eq!(documents_in(&mut search, "").await, 2);
    admin.create_collection(create("alpha", Default::default())).await.unwrap();
    assert_eq!(documents_in(&mut search, "alpha").await, 0);
    server.stop().await.unwrap();
}

/// A collection directory without its record (a crash between the steps of a create
/// or a delete) is not a collection: it is removed at start, and the name is free.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_create_steps_leaves_no_half_collection() {
    let data = TempDir::new("collections-crash");
    let data_dir = data.flag();
    let flags = [PSEUDO, &["--data-dir", &data_dir]].concat();
    // What a crash mid-create or mid-delete leaves: a directory without its record.
    std::fs::create_dir_all(data.0.join("collections/half/keyword")).unwrap();
    std::fs::write(data.0.join("collections/half/store.redb"), b"partial").unwrap();
    let server = InProcessServer::start(&flags).await;
    let Clients { collections: mut admin, .. } = clients(&server).await;
    let listed = admin.list_collections(ListCollectionsRequest {}).await.unwrap().into_inner().collections;
    assert!(listed.is_empty(), "{listed:?}");
    assert!(!data.0.join("collections/half").exists(), "removed at start");
    admin.create_collection(create("half", Default::default())).await.unwrap();
    server.stop().await.unwrap();
}

/// SIGKILL while two collections index (see [`common::collection_contract`]).
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_ingest_into_two_collections_loses_nothing_acknowledged() {
    let data = TempDir::new("collections-kill");
    let flags = ["--backend", "pseudo", "--data-dir", &data.flag()].map(String::from).to_vec();
    common::collection_contract::sigkill_during_ingest_into_two_collections(flags, 4_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_matrix_on_the_embedded_store() {
    let data = TempDir::new("collection-matrix");
    let keys = common::collection_access::write_keys_file(&data.0, "a").display().to_string();
    let data_dir = data.flag();
    let flags = [PSEUDO, &["--data-dir", &data_dir, "--api-keys-file", &keys]].concat();
    let server = InProcessServer::start(&flags).await;
    common::collection_access::run(&server.address, "").await;
}

/// A collection whose job was cut short by SIGKILL opens by itself at the next start,
/// and its job resumes, before any request names it (collections open at their first
/// use otherwise: `/metrics` counts them).
#[tokio::test(flavor = "multi_thread")]
async fn unfinished_jobs_resume_after_a_restart_without_a_request() {
    use common::{ServerProcess, wait_serving};
    use std::time::{Duration, Instant};

    let data = TempDir::new("collections-resume");
    let data_dir = data.flag();
    let flags = [
        "--backend",
        "pseudo",
        "--data-dir",
        &data_dir,
        "--ingest-batch-documents",
        "16",
        "--max-documents-per-request",
        "3000",
    ];
    let metric = async |address: &str, name: &str| -> f64 {
        let page = reqwest::get(format!("{address}/metrics")).await.unwrap().text().await.unwrap();
        page.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    };
    let mut server = ServerProcess::spawn(&flags).await;
    wait_serving(&server.address).await;
    let mut clients = clients_at(&server.address).await;
    for name in ["idle", "busy"] {
        clients.collections.create_collection(create(name, Default::default())).await.unwrap();
    }
    let documents =
        (0..3000).map(|i| Document { id: format!("d{i}"), text: format!("text {i}"), ..Default::default() });
    let request = IngestRequest { documents: documents.collect(), collection: "busy".into() };
    let job = clients.search.ingest(request).await.unwrap().into_inner().job.unwrap();
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();

    let server = ServerProcess::spawn(&flags).await;
    wait_serving(&server.address).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&server.address, "embedwire_ingested_documents_total").await < 1.0 {
        assert!(Instant::now() < deadline, "the job did not resume by itself");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metric(&server.address, "embedwire_collections").await, 2.0);
    assert_eq!(metric(&server.address, "embedwire_collections_open").await, 1.0, "only the one with a job opened");
    let mut clients = clients_at(&server.address).await;
    let watch = WatchJobRequest { job_id: job.job_id.clone(), collection: "busy".into() };
    let mut updates = clients.search.watch_job(watch).await.unwrap().into_inner();
    let mut last = None;
    while let Some(update) = updates.next().await {
        last = update.unwrap().job;
    }
    assert_eq!(last.unwrap().processed_documents, 3000);
    assert_eq!(documents_in(&mut clients.search, "idle").await, 0);
    assert_eq!(metric(&server.address, "embedwire_collections_open").await, 2.0, "opened by the request");
}
