//! `--store postgres` against a real PostgreSQL 18 + pgvector primary with a streaming
//! replica (started once for this test binary, or by `make test` for the whole run) and
//! the real model: the shared-store contract (the same answers as the embedded store,
//! one index shared by two servers and the gateway), filters with hostile keys and
//! values, and bad configuration refused at start with a clear message. Each test has
//! its own database.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::postgres::PostgresCluster;
use common::store_contract::{
    self, SharedStore, condition_any, condition_equals, free_port, ingest_and_wait, search_client,
    start_and_expect_exit, text_query,
};
use common::{InProcessServer, ONNX, TempDir};
use embedwire_proto::v1::{DeleteDocumentsRequest, Document, Filter, JobStatus, SearchRequest};

/// Flags of a server on `collection` in database `db` (created if missing), reading
/// from the replica.
fn postgres_flags(db: &str, collection: &str) -> Vec<String> {
    let cluster = PostgresCluster::shared_store();
    if cluster.sql("postgres", &format!("SELECT count(*) FROM pg_database WHERE datname = '{db}'")) == "0" {
        cluster.create_database(db);
    }
    cluster.server_flags(db, collection)
}

#[tokio::test(flavor = "multi_thread")]
async fn same_answers_as_the_embedded_store_filters_and_citations_included() {
    // halfvec (the default) keeps 11 bits of mantissa: scores agree to about 1e-3.
    store_contract::same_answers_as_the_embedded_store(postgres_flags("parity", "parity"), "postgres", 5e-3).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_index_shared_by_two_servers_and_the_gateway() {
    let mut flags = postgres_flags("shared", "shared");
    // The other vector type, so that both are covered.
    flags.extend(["--postgres-vector".into(), "vector".into()]);
    store_contract::one_index_shared_by_two_servers_and_the_gateway(SharedStore {
        flags,
        kind: "postgres",
        index_prefix: "postgres:shared@127.0.0.1:".into(),
        nodes: 2,
        operations: &["search", "create_job", "commit_indexed", "claim_job"],
        // Reads may go to the replica, skipped when more than 2 s behind.
        read_lag: Duration::from_secs(3),
    })
    .await;
}

/// Keys and values that would break or change a query if they were written into it.
const HOSTILE: [&str; 7] = ["it's", "a'); DROP TABLE chunks; --", "{a,b}", "$.k", "x\"y", "; SELECT 1", "ünï ✓"];

#[tokio::test(flavor = "multi_thread")]
async fn filters_with_hostile_keys_and_values_are_only_data() {
    let server = InProcessServer::start(
        &[ONNX, &postgres_flags("hostile", "hostile").iter().map(String::as_str).collect::<Vec<_>>()].concat(),
    )
    .await;
    let mut client = search_client(&server.address).await;
    // Document i has every hostile key, with hostile value i (and a plain tag).
    let documents: Vec<Document> = (0..HOSTILE.len())
        .map(|i| Document {
            id: format!("h-{i}"),
            text: format!("document number {i} about quoting in SQL"),
            metadata: HOSTILE
                .iter()
                .map(|key| (key.to_string(), HOSTILE[i].to_string()))
                .chain([("tag".to_string(), if i % 2 == 0 { "even" } else { "odd" }.to_string())])
                .collect::<BTreeMap<_, _>>()
                .into_iter()
                .collect(),
        })
        .collect();
    let job = ingest_and_wait(&mut client, documents).await;
    assert_eq!(job.status, JobStatus::Completed as i32, "{job:?}");

    let search = |filter: Filter| SearchRequest {
        queries: vec![text_query("quoting in SQL")],
        top_k: Some(20),
        filter: Some(filter),
        ..Default::default()
    };
    let ids =
        |hits: &[embedwire_proto::v1::SearchHit]| hits.iter().map(|h| h.document_id.clone()).collect::<HashSet<_>>();
    for (k, key) in HOSTILE.iter().enumerate() {
        for (v, value) in HOSTILE.iter().enumerate() {
            let filter = Filter { must: vec![condition_equals(key, value)], ..Default::default() };
            let hits = client.search(search(filter)).await.unwrap().into_inner().results.remove(0).hits;
            assert_eq!(ids(&hits), HashSet::from([format!("h-{v}")]), "key #{k} {key:?} = {value:?}");
        }
        // A value no document has matches nothing; must_not of it matches everything.
        let absent = Filter { must: vec![condition_equals(key, "' OR '1'='1")], ..Default::default() };
        let hits = client.search(search(absent)).await.unwrap().into_inner().results.remove(0).hits;
        assert!(hits.is_empty(), "key {key:?}: {hits:?}");
        let everything = Filter { must_not: vec![condition_equals(key, "' OR '1'='1")], ..Default::default() };
        let hits = client.search(search(everything)).await.unwrap().into_inner().results.remove(0).hits;
        assert_eq!(hits.len(), HOSTILE.len(), "key {key:?}");
    }
    let filter = Filter {
        should: vec![condition_any(HOSTILE[1], &[HOSTILE[2], HOSTILE[6]])],
        must_not: vec![condition_equals("tag", "odd")],
        ..Default::default()
    };
    let hits = client.search(search(filter)).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(ids(&hits), HashSet::from(["h-2".to_string(), "h-6".to_string()]));
    // A key that names no metadata: nothing passes must, everything passes must_not.
    let missing = Filter { must_not: vec![condition_equals("no such key", "x")], ..Default::default() };
    let hits = client.search(search(missing)).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(hits.len(), HOSTILE.len());

    // Delete by a hostile filter removes exactly its match, and every table is still there.
    let filter = Filter { must: vec![condition_equals(HOSTILE[1], HOSTILE[1])], ..Default::default() };
    let deleted = client
        .delete_documents(DeleteDocumentsRequest { ids: vec![], filter: Some(filter) })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.deleted_count, 1);
    let cluster = PostgresCluster::shared_store();
    assert_eq!(cluster.sql("hostile", "SELECT count(*) FROM hostile.documents"), (HOSTILE.len() - 1).to_string());
    assert_eq!(cluster.sql("hostile", "SELECT count(*) FROM hostile.chunks WHERE doc_id = 'h-1'"), "0");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn servers_starting_together_migrate_once() {
    let flags = postgres_flags("migrate", "together");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let args = [&["--backend", "pseudo"][..], &flags].concat();
    let servers = futures::future::join_all((0..4).map(|_| InProcessServer::start(&args))).await;
    let cluster = PostgresCluster::shared_store();
    // Each migration once: versions 1 (the tables) and 2 (keyword search).
    assert_eq!(
        cluster.sql("migrate", "SELECT string_agg(version::text, ',' ORDER BY version) FROM together.migrations"),
        "1,2"
    );
    assert_eq!(cluster.sql("migrate", "SELECT value FROM together.settings WHERE key = 'vector'"), "halfvec");
    for server in servers {
        server.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_configuration_is_refused_with_a_clear_message() {
    let data = TempDir::new("pg-bad-config");
    let cluster = PostgresCluster::shared_store();
    let with_data = |mut args: Vec<String>| {
        args.extend(["--data-dir".to_string(), data.flag()]);
        args
    };

    // Nothing listens there.
    let url = format!("postgres://postgres@127.0.0.1:{}/none", free_port());
    let args = with_data(["--store", "postgres", "--postgres-url", &url].map(String::from).to_vec());
    let (ok, stderr) = start_and_expect_exit(&args).await;
    assert!(!ok && stderr.contains("--postgres-url") && stderr.contains("cannot use the database"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // Not a URL, and no URL at all.
    let args = with_data(["--store", "postgres", "--postgres-url", "localhost"].map(String::from).to_vec());
    let (ok, stderr) = start_and_expect_exit(&args).await;
    assert!(!ok && stderr.contains("--postgres-url must be a URL"), "{stderr}");
    let (ok, stderr) = start_and_expect_exit(&with_data(vec!["--store".into(), "postgres".into()])).await;
    assert!(!ok && stderr.contains("needs --postgres-url"), "{stderr}");

    // A user who may not create the extension, in a database that lacks it.
    cluster.create_database("noextension");
    cluster.sql("noextension", "DROP ROLE IF EXISTS plain; CREATE ROLE plain LOGIN");
    let url = cluster.primary_url("noextension").replace("postgres@", "plain@");
    let args = with_data(["--store", "postgres", "--postgres-url", &url].map(String::from).to_vec());
    let (ok, stderr) = start_and_expect_exit(&args).await;
    assert!(!ok && stderr.contains("pgvector extension is missing"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // An index made for another model's dimension.
    let stderr = store_contract::refuses_another_dimension(&with_data(postgres_flags("dimension", "dimension"))).await;
    assert!(stderr.contains("dim=8") && stderr.contains("--collection"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn keyword_and_hybrid_search() {
    common::hybrid_contract::keyword_and_hybrid_search(postgres_flags("hybrid", "hybrid"), "postgres").await;
}
