//! The library's SearchService calls against a real server (pseudo backend): ingest
//! by call and by stream, jobs, search with filters, documents.

use crate::common;

use common::{PSEUDO, client, start};
use embedwire_client::{Code, Document, Error, Filter, JobStatus, Query, SearchOptions};

#[tokio::test]
async fn ingest_wait_search_get_and_delete() {
    let server = start(PSEUDO).await;
    let client = client(&[&server]).await;
    let documents = vec![
        Document::new("Rust is a systems programming language.").with_id("rust").with_metadata("kind", "lang"),
        Document::new("Bread is made of flour, water and yeast.").with_id("bread").with_metadata("kind", "food"),
        Document::new("Python is popular for data science.").with_metadata("kind", "lang"),
    ];
    let receipt = client.ingest(documents).await.unwrap();
    assert_eq!(receipt.document_ids.len(), 3);
    assert_eq!(&receipt.document_ids[..2], ["rust", "bread"]);
    assert!(!receipt.document_ids[2].is_empty(), "the server assigned an id");

    let mut updates = 0;
    let job = client.wait_job(&receipt.job.id, |_| updates += 1).await.unwrap();
    assert_eq!(job.status, JobStatus::Completed, "{job:?}");
    assert_eq!((job.processed_documents, job.total_documents), (3, 3));
    assert!(updates >= 1 && job.finished_at.is_some());
    assert_eq!(client.get_job(&receipt.job.id).await.unwrap().status, JobStatus::Completed);

    // The pseudo model ranks an identical text first.
    let hits = client.search("Bread is made of flour, water and yeast.", &SearchOptions::default()).await.unwrap();
    assert_eq!(hits[0].document_id, "bread", "{hits:?}");
    assert!(hits[0].score > 0.99 && hits[0].text.contains("flour"));
    assert_eq!(hits[0].metadata["kind"], "food");

    let only_lang = SearchOptions { filter: Some(Filter::new().must_equal("kind", "lang")), ..Default::default() };
    let hits = client.search("Bread is made of flour, water and yeast.", &only_lang).await.unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|hit| hit.metadata["kind"] == "lang"), "{hits:?}");

    // A vector query finds the same document as its text.
    let vector = client.embed(["Rust is a systems programming language."]).await.unwrap().row(0).to_vec();
    let with_vectors = SearchOptions { top_k: Some(1), include_vectors: true, ..Default::default() };
    let hits = client.search(Query::Vector(vector.clone()), &with_vectors).await.unwrap();
    assert_eq!(hits[0].document_id, "rust");
    let returned = hits[0].vector.as_ref().expect("vector included");
    assert!(returned.iter().zip(&vector).all(|(a, b)| (a - b).abs() < 1e-5));

    let fetched = client.get_documents(["rust", "missing"]).await.unwrap();
    assert_eq!(fetched.found.len(), 1);
    assert_eq!(fetched.found[0].text, "Rust is a systems programming language.");
    assert_eq!(fetched.found[0].chunks.len(), 1);
    assert_eq!(fetched.missing_ids, ["missing"]);

    let deleted = client.delete_documents(vec![], Some(&Filter::new().must_equal("kind", "lang"))).await.unwrap();
    assert_eq!(deleted, 2);
    let hits = client.search("Rust", &SearchOptions::default()).await.unwrap();
    assert_eq!(hits.iter().map(|hit| hit.document_id.as_str()).collect::<Vec<_>>(), ["bread"]);
    assert_eq!(client.index_stats().await.unwrap().document_count, 1);

    let error = client.get_job("no-such-job").await.unwrap_err();
    assert!(matches!(error, Error::Status { code: Code::NotFound, .. }), "{error:?}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_streamed_bulk_load_is_one_job() {
    let server = start(PSEUDO).await;
    let client = client(&[&server]).await;
    // More than one message's worth (256 documents per message).
    let documents = (0..700).map(|i| {
        Document::new(format!("bulk document {i}")).with_id(format!("doc-{i}")).with_metadata("n", i.to_string())
    });
    let receipt = client.ingest_iter(documents).await.unwrap();
    assert_eq!(receipt.received_documents, 700);
    let job = client.wait_job(&receipt.job.id, |_| {}).await.unwrap();
    assert_eq!((job.status, job.processed_documents), (JobStatus::Completed, 700), "{job:?}");
    assert_eq!(client.index_stats().await.unwrap().document_count, 700);

    let hits =
        client.search("bulk document 431", &SearchOptions { top_k: Some(1), ..Default::default() }).await.unwrap();
    assert_eq!(hits[0].document_id, "doc-431");

    // A stream the server rejects reports the server's reason.
    let error = client.ingest_iter([Document::new("")]).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument, "{error}");
    server.stop().await.unwrap();
}

/// A client bound to a collection acts on it only; collections are created, listed
/// and deleted through the library and the CLI.
#[tokio::test]
async fn collections_through_the_library_and_the_cli() {
    use embedwire_client::{CollectionIndex, CollectionSettings};

    let server = start(PSEUDO).await;
    let client = client(&[&server]).await;
    let settings =
        CollectionSettings { chunk_tokens: Some(32), index: Some(CollectionIndex::Hnsw), ..Default::default() };
    let created = client.create_collection("tenant_a", settings).await.unwrap();
    assert_eq!((created.name.as_str(), created.chunk_tokens, created.index), ("tenant_a", 32, CollectionIndex::Hnsw));
    let again = client.create_collection("tenant_a", CollectionSettings::default()).await.unwrap_err();
    assert!(matches!(&again, Error::Status { code: Code::AlreadyExists, .. }), "{again:?}");

    let tenant = client.collection("tenant_a");
    assert_eq!(tenant.collection_name(), "tenant_a");
    let receipt = tenant.ingest(vec![Document::new("Only in tenant a.").with_id("a1")]).await.unwrap();
    assert_eq!(tenant.wait_job(&receipt.job.id, |_| {}).await.unwrap().status, JobStatus::Completed);
    let missing = client.get_job(&receipt.job.id).await.unwrap_err();
    assert!(matches!(&missing, Error::Status { code: Code::NotFound, .. }), "the default collection has no such job");
    assert_eq!(tenant.index_stats().await.unwrap().document_count, 1);
    assert_eq!(client.index_stats().await.unwrap().document_count, 0);
    let hits = tenant.search("Only in tenant a.", &SearchOptions::default()).await.unwrap();
    assert_eq!(hits[0].document_id, "a1");
    assert!(client.search("Only in tenant a.", &SearchOptions::default()).await.unwrap().is_empty());
    assert_eq!(tenant.get_documents(["a1"]).await.unwrap().found.len(), 1);
    assert!(client.get_documents(["a1"]).await.unwrap().found.is_empty());

    // The CLI: --collection for document commands, `collections` to manage them.
    let address = common::address(&server);
    let listed = common::cli(&["--server", &address, "--json", "collections", "list"], None).await;
    let listed: serde_json::Value = serde_json::from_str(&common::stdout_of(&listed)).unwrap();
    assert_eq!(listed[0]["name"], "tenant_a", "{listed}");
    let found =
        common::cli(&["--server", &address, "--collection", "tenant_a", "--json", "search", "tenant a"], None).await;
    assert!(common::stdout_of(&found).contains("\"a1\""), "{}", common::stdout_of(&found));
    let create = ["--server", &address, "collections", "create", "tenant_b", "--index", "exact"];
    assert!(common::stdout_of(&common::cli(&create, None).await).contains("created tenant_b"));
    let deleted = common::cli(&["--server", &address, "--json", "collections", "delete", "tenant_a"], None).await;
    let deleted: serde_json::Value = serde_json::from_str(&common::stdout_of(&deleted)).unwrap();
    assert_eq!(deleted["deleted_documents"], 1);
    let names: Vec<String> = client.list_collections().await.unwrap().into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["tenant_b"]);
    let gone = tenant.index_stats().await.unwrap_err();
    assert!(matches!(&gone, Error::Status { code: Code::NotFound, .. }), "{gone:?}");
}
