//! `--store weaviate` against a real 3-node Weaviate cluster (started once for this
//! test binary, or by `make test` for the whole run) and the real model: the
//! shared-store contract (the same answers as the embedded store, one index shared by
//! several servers and the gateway), and bad configuration refused at start with a
//! clear message.

use crate::common;

use std::time::Duration;

use common::TempDir;
use common::store_contract::{self, SharedStore, free_port, start_and_expect_exit};
use common::weaviate::WeaviateCluster;

/// Tests share one cluster (under `make test` the one it started for the whole run);
/// each uses its own collection.
fn cluster() -> &'static WeaviateCluster {
    WeaviateCluster::shared_store(3)
}

fn weaviate_flags(collection: &str) -> Vec<String> {
    cluster().server_flags(collection)
}

#[tokio::test(flavor = "multi_thread")]
async fn same_answers_as_the_embedded_store_filters_and_citations_included() {
    store_contract::same_answers_as_the_embedded_store(weaviate_flags("parity"), "weaviate", 1e-4).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_index_shared_by_two_servers_and_the_gateway() {
    store_contract::one_index_shared_by_two_servers_and_the_gateway(SharedStore {
        flags: weaviate_flags("shared"),
        kind: "weaviate",
        index_prefix: "weaviate:Shared@".into(),
        nodes: 3,
        operations: &["search", "write_chunks", "delete_pending"],
        // Reads go to one replica (--read-consistency ONE, the default) and a delete is
        // acknowledged by a quorum (2 of 3): the third replica applies it a moment later,
        // and until then a read it answers still has the document. Idle, that moment is
        // too short to see; with three tests at once on 2 cores it was seen (s-0 still
        // returned by GetDocuments on A). Bounded here, not assumed to be zero.
        read_lag: Duration::from_secs(5),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_configuration_is_refused_with_a_clear_message() {
    let data = TempDir::new("bad-config");
    let base = |collection: &str| {
        let mut args = weaviate_flags(collection);
        args.extend(["--data-dir".to_string(), data.flag()]);
        args
    };

    // Nothing listens on these ports.
    let mut args = base("unreachable");
    let (http, grpc) = (free_port(), free_port());
    args[3] = format!("http://127.0.0.1:{http}");
    args[5] = format!("127.0.0.1:{grpc}");
    let (ok, stderr) = start_and_expect_exit(&args).await;
    assert!(!ok && stderr.contains("cannot reach the cluster") && stderr.contains("--weaviate-http"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // A bad consistency level is refused by the flag parser.
    let mut args = base("badlevel");
    args.extend(["--read-consistency".into(), "TWO".into()]);
    let (ok, stderr) = start_and_expect_exit(&args).await;
    assert!(!ok && stderr.contains("--read-consistency") && stderr.contains("QUORUM"), "{stderr}");

    // A collection made for another model's dimension.
    let stderr = store_contract::refuses_another_dimension(&base("dimension")).await;
    assert!(stderr.contains("Dimension") && stderr.contains("dim=8") && stderr.contains("--collection"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grouped_by_document() {
    common::grouping_contract::grouped_by_document(weaviate_flags("grouped"), "weaviate").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn collections_access_matrix() {
    common::collection_access::on_store(weaviate_flags("matrix")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_ingest_into_two_collections_loses_nothing_acknowledged() {
    let flags = [vec!["--backend".to_string(), "pseudo".into()], weaviate_flags("killed")].concat();
    common::collection_contract::sigkill_during_ingest_into_two_collections(flags, 300).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_creates_of_one_collection_name() {
    common::collection_contract::concurrent_creates_of_one_name(weaviate_flags("racing")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn collections_shared_by_two_servers() {
    common::collection_contract::shared_by_two_servers(weaviate_flags("tenants")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn keyword_and_hybrid_search() {
    common::hybrid_contract::keyword_and_hybrid_search(weaviate_flags("hybrid"), "weaviate").await;
}

/// Makes the chunk class of `collection` again as an older server version made it:
/// without the analyzed `keyword_text`, and with its `text` indexed for BM25 (the first
/// keyword-search version) or not (before keyword search). Returns the server flags.
async fn recreate_as_older_version(collection: &str, text_searchable: bool) -> Vec<String> {
    let flags = weaviate_flags(collection);
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    // The classes as this server version creates them, then the chunk class made again.
    drop(common::InProcessServer::start(&[common::ONNX, &flag_refs].concat()).await);
    let http = reqwest::Client::new();
    let base = &cluster().http_urls()[0];
    let class_name = format!("{}{}", collection[..1].to_uppercase(), &collection[1..]);
    let mut class: serde_json::Value =
        http.get(format!("{base}/v1/schema/{class_name}")).send().await.unwrap().json().await.unwrap();
    // Weaviate's default search breadth, as older versions left it.
    class["vectorIndexConfig"]["dynamicEfFactor"] = 8.into();
    let properties = class["properties"].as_array_mut().unwrap();
    properties.retain(|property| property["name"] != "keyword_text");
    for property in properties.iter_mut() {
        if property["name"] == "text" {
            property["tokenization"] = if text_searchable { "word" } else { "field" }.into();
            property["indexSearchable"] = text_searchable.into();
        }
    }
    let deleted = http.delete(format!("{base}/v1/schema/{class_name}")).send().await.unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.text().await.unwrap());
    let created = http.post(format!("{base}/v1/schema")).json(&class).send().await.unwrap();
    assert!(created.status().is_success(), "{}", created.text().await.unwrap());
    flags
}

/// A collection made before keyword search (its chunk text not indexed for BM25) keeps
/// serving vector search; keyword and hybrid searches are refused with a message that
/// names the collection and says what to do. Weaviate cannot index an existing
/// property afterwards, so this is the only honest answer short of a re-ingest. A
/// collection of the first keyword-search version (its text indexed as typed, no
/// analyzed words) keeps ranking its text by keyword, without stemming.
#[tokio::test(flavor = "multi_thread")]
async fn collections_from_older_versions_keep_working_or_refuse_clearly() {
    use embedwire_proto::v1::{Document, SearchMode, SearchRequest};
    let request = |query: &str, mode: SearchMode| SearchRequest {
        queries: vec![store_contract::text_query(query)],
        mode: mode as i32,
        ..Default::default()
    };
    let document =
        Document { id: "old".into(), text: "Old collections still search by meaning.".into(), ..Default::default() };

    let flags = recreate_as_older_version("legacy", false).await;
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = common::InProcessServer::start(&[common::ONNX, &flag_refs].concat()).await;
    let mut client = store_contract::search_client(&server.address).await;
    store_contract::ingest_and_wait(&mut client, vec![document.clone()]).await;
    let hits = client.search(request("searching by meaning", SearchMode::Vector)).await.unwrap().into_inner().results;
    assert_eq!(hits[0].hits[0].document_id, "old");
    for mode in [SearchMode::Keyword, SearchMode::Hybrid] {
        let status = client.search(request("searching by meaning", mode)).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        let message = status.message();
        assert!(message.contains("Legacy") && message.contains("before keyword search"), "{message}");
        assert!(message.contains("--collection"), "says what to do: {message}");
    }

    let flags = recreate_as_older_version("unstemmed", true).await;
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = common::InProcessServer::start(&[common::ONNX, &flag_refs].concat()).await;
    let mut client = store_contract::search_client(&server.address).await;
    store_contract::ingest_and_wait(&mut client, vec![document]).await;
    let keyword = |query: &'static str| {
        let mut client = client.clone();
        async move { client.search(request(query, SearchMode::Keyword)).await.unwrap().into_inner().results.remove(0).hits }
    };
    assert_eq!(keyword("collections meaning").await[0].document_id, "old", "the words as typed");
    assert!(keyword("collection meanings").await.is_empty(), "no stemming in a collection of that version");

    // Both older collections were given this version's search breadth at start (a
    // hybrid search's 50 vector candidates at ef 100, not 400).
    for class_name in ["Legacy", "Unstemmed"] {
        let url = format!("{}/v1/schema/{class_name}", cluster().http_urls()[0]);
        let class: serde_json::Value = reqwest::get(url).await.unwrap().json().await.unwrap();
        assert_eq!(class["vectorIndexConfig"]["dynamicEfFactor"], 2, "{class_name}");
    }
}

/// What a crash between a delete's two steps leaves (the registry object gone, the
/// classes still full) is taken for leftovers by the next create of the name once it
/// has stood so for a while: the create waits, and finishes even if its caller gave
/// up, with an empty collection (nothing of the old one leaks into the new).
#[tokio::test(flavor = "multi_thread")]
async fn a_create_clears_classes_left_without_a_registry_object() {
    use common::collection_contract::{clients, ingest_into};
    use embedwire_proto::v1::*;

    let flags = weaviate_flags("leftover");
    let flags: Vec<&str> = common::ONNX.iter().copied().chain(flags.iter().map(String::as_str)).collect();
    let server = common::InProcessServer::start(&flags).await;
    let mut first = clients(&server).await;
    let create = || CreateCollectionRequest { name: "stale".into(), settings: None };
    first.collections.create_collection(create()).await.unwrap();
    let documents =
        vec![Document { id: "old".into(), text: "A document of the first stale.".into(), ..Default::default() }];
    assert_eq!(ingest_into(&mut first.search, "stale", documents).await.status(), JobStatus::Completed);

    // The crash: the registry object deleted, the classes kept.
    let http = reqwest::Client::new();
    let base = &cluster().http_urls()[0];
    let listed: serde_json::Value = http
        .get(format!("{base}/v1/objects?class=LeftoverCollections&limit=100"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let object = listed["objects"].as_array().unwrap().iter().find(|o| o["properties"]["name"] == "stale").unwrap();
    let id = object["id"].as_str().unwrap();
    let deleted = http.delete(format!("{base}/v1/objects/LeftoverCollections/{id}")).send().await.unwrap();
    assert!(deleted.status().is_success(), "{:?}", deleted.status());

    // Through a server started since, which never served the old collection.
    let second = common::InProcessServer::start(&flags).await;
    let common::collection_contract::Clients { mut collections, mut search } = clients(&second).await;
    // A caller that gives up before the leftovers have aged: the create goes on.
    let started = std::time::Instant::now();
    let mut impatient = tonic::Request::new(create());
    impatient.set_timeout(Duration::from_secs(3));
    let gave_up = collections.create_collection(impatient).await.unwrap_err();
    assert!(matches!(gave_up.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled), "{gave_up:?}");
    loop {
        let listed = collections.list_collections(ListCollectionsRequest {}).await.unwrap().into_inner();
        if listed.collections.iter().any(|c| c.name == "stale") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the create given up on never finished");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(started.elapsed() >= Duration::from_secs(15), "leftovers are taken as such only after a wait");
    let again = collections.create_collection(create()).await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists, "{again:?}");
    let stats = search.get_index_stats(GetIndexStatsRequest { collection: "stale".into() }).await.unwrap();
    assert_eq!(stats.into_inner().document_count, 0, "nothing of the old collection in the new one");
    let query = store_contract::text_query("a document of the first stale");
    let request = SearchRequest { queries: vec![query], collection: "stale".into(), ..Default::default() };
    assert!(search.search(request).await.unwrap().into_inner().results[0].hits.is_empty());
}
