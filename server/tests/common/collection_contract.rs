//! Named collections in a store shared by several servers: one created through a
//! server is used through another at once, its jobs and documents are the same
//! through either, and a deletion through one reaches the other.

use std::time::{Duration, Instant};

use embedwire_proto::v1::collection_service_client::CollectionServiceClient;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::*;
use futures::StreamExt;
use tonic::Code;
use tonic::transport::Channel;

use super::store_contract::text_query;
use super::{InProcessServer, ONNX};

struct Clients {
    collections: CollectionServiceClient<Channel>,
    search: SearchServiceClient<Channel>,
}

async fn clients(server: &InProcessServer) -> Clients {
    let channel = Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap();
    Clients { collections: CollectionServiceClient::new(channel.clone()), search: SearchServiceClient::new(channel) }
}

async fn documents_in(search: &mut SearchServiceClient<Channel>, collection: &str) -> Result<u64, Code> {
    let request = GetIndexStatsRequest { collection: collection.into() };
    search.get_index_stats(request).await.map(|r| r.into_inner().document_count).map_err(|s| s.code())
}

async fn names(collections: &mut CollectionServiceClient<Channel>) -> Vec<String> {
    let listed = collections.list_collections(ListCollectionsRequest {}).await.unwrap().into_inner();
    listed.collections.into_iter().map(|c| c.name).collect()
}

/// Two servers on `store_flags`: a collection made through one, filled through the
/// other, read through both, deleted through the second, gone from the first, and
/// made again empty.
pub async fn shared_by_two_servers(store_flags: Vec<String>) {
    let flags: Vec<&str> = ONNX.iter().copied().chain(store_flags.iter().map(String::as_str)).collect();
    let (first, second) = (InProcessServer::start(&flags).await, InProcessServer::start(&flags).await);
    let (mut one, mut two) = (clients(&first).await, clients(&second).await);
    const NAME: &str = "shared_tenant";

    let settings = CollectionSettings { chunk_tokens: Some(64), chunk_overlap_tokens: Some(8), ..Default::default() };
    let create = CreateCollectionRequest { name: NAME.into(), settings: Some(settings) };
    one.collections.create_collection(create.clone()).await.unwrap();
    let again = two.collections.create_collection(create).await.unwrap_err();
    assert_eq!(again.code(), Code::AlreadyExists, "{again:?}");

    // Filled through the server that did not create it.
    let documents: Vec<Document> = (0..6)
        .map(|i| Document {
            id: format!("doc-{i}"),
            text: format!("Tenant document {i} about shared stores."),
            ..Default::default()
        })
        .collect();
    let ingest = IngestRequest { documents, collection: NAME.into() };
    let job = two.search.ingest(ingest).await.unwrap().into_inner().job.unwrap();
    let watch = WatchJobRequest { job_id: job.job_id.clone(), collection: NAME.into() };
    let mut updates = two.search.watch_job(watch).await.unwrap().into_inner();
    let mut last = None;
    while let Some(update) = updates.next().await {
        last = update.unwrap().job;
    }
    assert_eq!(last.unwrap().status(), JobStatus::Completed);

    // The same job, documents and settings through either server.
    let get_job = GetJobRequest { job_id: job.job_id.clone(), collection: NAME.into() };
    assert_eq!(one.search.get_job(get_job).await.unwrap().into_inner().job.unwrap().processed_documents, 6);
    assert_eq!(documents_in(&mut one.search, NAME).await, Ok(6));
    assert_eq!(documents_in(&mut one.search, "").await, Ok(0), "nothing in the default collection");
    let search = SearchRequest {
        queries: vec![text_query("tenant document shared stores")],
        top_k: Some(10),
        collection: NAME.into(),
        ..Default::default()
    };
    let hits = one.search.search(search.clone()).await.unwrap().into_inner().results.remove(0).hits;
    assert!(!hits.is_empty());
    let listed = two.collections.list_collections(ListCollectionsRequest {}).await.unwrap().into_inner();
    let settings = listed.collections.iter().find(|c| c.name == NAME).unwrap().settings.unwrap();
    assert_eq!((settings.chunk_tokens, settings.chunk_overlap_tokens), (Some(64), Some(8)));
    assert!(names(&mut one.collections).await.contains(&NAME.to_string()));

    // Deleted through the second server: gone through the first too.
    let delete = DeleteCollectionRequest { name: NAME.into() };
    assert_eq!(two.collections.delete_collection(delete).await.unwrap().into_inner().deleted_documents, 6);
    assert!(!names(&mut one.collections).await.contains(&NAME.to_string()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while documents_in(&mut one.search, NAME).await != Err(Code::NotFound) {
        assert!(Instant::now() < deadline, "the first server still serves the deleted collection");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(one.search.search(search).await.unwrap_err().code(), Code::NotFound);

    // Made again: empty.
    let create = CreateCollectionRequest { name: NAME.into(), settings: None };
    one.collections.create_collection(create).await.unwrap();
    assert_eq!(documents_in(&mut two.search, NAME).await, Ok(0));
    let delete = DeleteCollectionRequest { name: NAME.into() };
    one.collections.delete_collection(delete).await.unwrap();
}
