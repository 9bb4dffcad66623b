//! The embedded store's keyword index after a crash at the wrong moment: a keyword
//! index older than the redb file (the kill came between the two commits) or missing
//! altogether is rebuilt from the file at start, so the two agree before the server
//! serves. The kill itself, at random moments of a large ingest, is in `crash.rs`.

use crate::common;

use std::path::Path;

use common::{ServerProcess, TempDir, wait_serving};
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    DeleteDocumentsRequest, Document, GetIndexStatsRequest, SearchMode, SearchQuery, SearchRequest, search_query,
};
use tonic::transport::Channel;

async fn start(data_dir: &str) -> (ServerProcess, SearchServiceClient<Channel>) {
    let server = ServerProcess::spawn(&["--backend", "pseudo", "--data-dir", data_dir]).await;
    wait_serving(&server.address).await;
    let channel = Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap();
    (server, SearchServiceClient::new(channel))
}

async fn stop(mut server: ServerProcess) {
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
}

fn documents(range: std::ops::Range<usize>) -> Vec<Document> {
    range
        .map(|i| Document {
            id: format!("doc-{i}"),
            text: format!("document number {i} about topic {} and subject {}", i % 97, i % 89),
            ..Default::default()
        })
        .collect()
}

async fn keyword_hits(client: &mut SearchServiceClient<Channel>, text: &str) -> Vec<String> {
    let request = SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Text(text.into())) }],
        top_k: Some(1000),
        mode: SearchMode::Keyword as i32,
        ..Default::default()
    };
    let hits = client.search(request).await.unwrap().into_inner().results.remove(0).hits;
    hits.into_iter().map(|h| h.document_id).collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_keyword_index_behind_the_file_or_missing_is_rebuilt_at_start() {
    let data = TempDir::new("keyword-rebuild");
    let keyword_dir = Path::new(&data.flag()).join("keyword");
    let (server, mut client) = start(&data.flag()).await;
    common::store_contract::ingest_and_wait(&mut client, documents(0..300)).await;
    stop(server).await;
    // The keyword index as a kill between the two commits of later changes leaves it.
    let behind = TempDir::new("keyword-behind");
    copy_dir(&keyword_dir, Path::new(&behind.flag()));

    let (server, mut client) = start(&data.flag()).await;
    common::store_contract::ingest_and_wait(&mut client, documents(300..400)).await;
    client
        .delete_documents(DeleteDocumentsRequest { ids: vec!["doc-150".into()], filter: None, ..Default::default() })
        .await
        .unwrap();
    stop(server).await;
    std::fs::remove_dir_all(&keyword_dir).unwrap();
    copy_dir(Path::new(&behind.flag()), &keyword_dir);

    for damage in ["behind", "missing"] {
        let (server, mut client) = start(&data.flag()).await;
        let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
        assert_eq!(stats.chunk_count, 399, "{damage}");
        super::crash::keyword_index_agrees(&mut client, 0).await;
        assert_eq!(keyword_hits(&mut client, "350").await, ["doc-350"], "{damage}: a later document is found");
        assert!(keyword_hits(&mut client, "150").await.is_empty(), "{damage}: the deleted document is gone");
        stop(server).await;
        std::fs::remove_dir_all(&keyword_dir).unwrap();
    }
}
