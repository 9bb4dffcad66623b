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
async fn collections_access_matrix() {
    common::collection_access::on_store(postgres_flags("matrix", "matrix")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_ingest_into_two_collections_loses_nothing_acknowledged() {
    let flags = [vec!["--backend".to_string(), "pseudo".into()], postgres_flags("killed", "killed")].concat();
    common::collection_contract::sigkill_during_ingest_into_two_collections(flags, 500).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_creates_of_one_collection_name() {
    common::collection_contract::concurrent_creates_of_one_name(postgres_flags("racing", "racing")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn collections_shared_by_two_servers() {
    common::collection_contract::shared_by_two_servers(postgres_flags("tenants", "tenants")).await;
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
        .delete_documents(DeleteDocumentsRequest { ids: vec![], filter: Some(filter), ..Default::default() })
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
    // Each migration once: versions 1 (the tables), 2 (tsvectors), 3 (BM25 postings)
    // and 4 (postings by term and chunk).
    assert_eq!(
        cluster.sql("migrate", "SELECT string_agg(version::text, ',' ORDER BY version) FROM together.migrations"),
        "1,2,3,4"
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
async fn grouped_by_document() {
    common::grouping_contract::grouped_by_document(postgres_flags("grouped", "grouped"), "postgres").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn keyword_and_hybrid_search() {
    common::hybrid_contract::keyword_and_hybrid_search(postgres_flags("hybrid", "hybrid"), "postgres").await;
}

/// The postings (one row per chunk and lexeme) follow every write: after ingest,
/// replace and delete they are exactly the chunks' lexemes.
fn assert_postings_match_chunks(cluster: &PostgresCluster, db: &str, schema: &str, when: &str) {
    let postings = cluster.sql(
        db,
        &format!(
            "SELECT count(*) FROM (SELECT term, doc_id, chunk_index FROM {schema}.chunk_terms
             EXCEPT SELECT t.lexeme, c.doc_id, c.chunk_index FROM {schema}.chunks c, unnest(c.text_search) t) extra"
        ),
    );
    assert_eq!(postings, "0", "{when}: postings of no chunk's lexeme");
    let (rows, lexemes) = (
        cluster.sql(db, &format!("SELECT count(*) FROM {schema}.chunk_terms")),
        cluster.sql(db, &format!("SELECT coalesce(sum(length(text_search)), 0) FROM {schema}.chunks")),
    );
    assert_eq!(rows, lexemes, "{when}: one posting per chunk and lexeme");
}

#[tokio::test(flavor = "multi_thread")]
async fn keyword_scores_are_bm25_and_the_postings_follow_every_write() {
    let cluster = PostgresCluster::shared_store();
    let flags = postgres_flags("bm25", "bm25");
    let server = InProcessServer::start(&[ONNX, &flags.iter().map(String::as_str).collect::<Vec<_>>()].concat()).await;
    let mut client = search_client(&server.address).await;
    let document = |id: &str, text: &str| Document { id: id.into(), text: text.into(), metadata: Default::default() };
    let job = ingest_and_wait(
        &mut client,
        vec![
            document("a", "The valve leaks. Replace the valve seal before the pump runs again."),
            document("b", "A pump moves water through pipes; one valve controls the flow."),
            document("c", "Seals wear out in cold weather and need inspection every spring."),
            document("d", "Nothing here mentions the part at all, only the weather."),
        ],
    )
    .await;
    assert_eq!(job.status, JobStatus::Completed as i32, "{job:?}");
    assert_postings_match_chunks(&cluster, "bm25", "bm25", "after ingest");

    // The server's score of each chunk for "valve seal", against BM25 (k1 1.2, b 0.75,
    // Lucene's IDF) computed here from the chunks' own tsvectors, not the postings.
    let keyword = |text: &str| SearchRequest {
        queries: vec![text_query(text)],
        top_k: Some(10),
        mode: embedwire_proto::v1::SearchMode::Keyword as i32,
        ..Default::default()
    };
    let hits = client.search(keyword("valve seals")).await.unwrap().into_inner().results.remove(0).hits;
    let expected = cluster.sql(
        "bm25",
        "WITH stats AS (SELECT count(*)::float8 AS n,
                               avg((SELECT sum(coalesce(array_length(positions, 1), 1)) FROM unnest(text_search)))::float8 AS avgdl
                        FROM bm25.chunks),
              terms AS (SELECT lexeme FROM unnest(to_tsvector('english', 'valve seals'))),
              df AS (SELECT lexeme, (SELECT count(*) FROM bm25.chunks WHERE text_search @@ lexeme::tsquery)::float8 AS df FROM terms),
              per_chunk AS (
                SELECT c.doc_id,
                       sum(ln(1 + (stats.n - df.df + 0.5) / (df.df + 0.5)) * t.tf * 2.2
                           / (t.tf + 1.2 * (0.25 + 0.75 * t.len / stats.avgdl))) AS score
                FROM bm25.chunks c, stats, df,
                     LATERAL (SELECT coalesce(array_length(u.positions, 1), 1)::float8 AS tf,
                                     (SELECT sum(coalesce(array_length(positions, 1), 1)) FROM unnest(c.text_search))::float8 AS len
                              FROM unnest(c.text_search) u WHERE u.lexeme = df.lexeme) t
                GROUP BY c.doc_id)
         SELECT string_agg(doc_id || '=' || round(score::numeric, 4), ',' ORDER BY score DESC, doc_id) FROM per_chunk",
    );
    let answered =
        hits.iter().map(|h| format!("{}={:.4}", h.document_id, h.keyword_score.unwrap())).collect::<Vec<_>>().join(",");
    assert_eq!(answered, expected, "the server's BM25 against the formula");
    assert_eq!(hits[0].document_id, "a", "two matches of valve and one of seal");

    // A server reading only the rarest term's postings in full (a budget of one posting)
    // looks the other term up in the chunks that term found. Asked for two hits, it
    // answers from those chunks, with their whole BM25 scores; asked for ten, more than
    // they hold, it reads every posting and answers as above.
    let pruned_flags = [flags.clone(), vec!["--postgres-keyword-rare-postings".into(), "1".into()]].concat();
    let pruned =
        InProcessServer::start(&[ONNX, &pruned_flags.iter().map(String::as_str).collect::<Vec<_>>()].concat()).await;
    let mut pruned_client = search_client(&pruned.address).await;
    let scores = |hits: &[embedwire_proto::v1::SearchHit]| {
        hits.iter().map(|h| format!("{}={:.4}", h.document_id, h.keyword_score.unwrap())).collect::<Vec<_>>()
    };
    // The process's metrics are counted for both servers of this test.
    let calls = || async {
        let metrics = reqwest::get(format!("{}/metrics", pruned.address)).await.unwrap().text().await.unwrap();
        ["keyword search", "keyword search, every posting"].map(|operation| {
            let series =
                format!("embedwire_store_request_seconds_count{{store=\"postgres\",operation=\"{operation}\"}} ");
            metrics.lines().find_map(|line| line.strip_prefix(series.as_str())?.parse::<u64>().ok()).unwrap_or(0)
        })
    };
    let before = calls().await;
    let two = SearchRequest { top_k: Some(2), ..keyword("valve seals") };
    let hits = pruned_client.search(two).await.unwrap().into_inner().results.remove(0).hits;
    let exact: Vec<&str> = expected.split(',').collect();
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert_eq!(hits[0].document_id, "a", "{hits:?}");
    for score in scores(&hits) {
        assert!(exact.contains(&score.as_str()), "{score}: not its BM25 score, which is one of {exact:?}");
    }
    let after_two = calls().await;
    assert_eq!([after_two[0] - before[0], after_two[1] - before[1]], [1, 0], "the rare term's search sufficed");
    let hits = pruned_client.search(keyword("valve seals")).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(scores(&hits).join(","), expected, "ten asked: every posting, as the first server");
    let after_ten = calls().await;
    assert_eq!([after_ten[0] - after_two[0], after_ten[1] - after_two[1]], [1, 1], "too few: every posting read");
    pruned.stop().await.unwrap();

    // Replace and delete: the postings go with their chunks.
    let job = ingest_and_wait(&mut client, vec![document("a", "Now about gaskets only.")]).await;
    assert_eq!(job.status, JobStatus::Completed as i32, "{job:?}");
    client
        .delete_documents(DeleteDocumentsRequest { ids: vec!["b".into()], filter: None, ..Default::default() })
        .await
        .unwrap();
    assert_postings_match_chunks(&cluster, "bm25", "bm25", "after replace and delete");
    let hits = client.search(keyword("valve")).await.unwrap().into_inner().results.remove(0).hits;
    assert!(hits.is_empty(), "no chunk holds valve any more: {hits:?}");
    server.stop().await.unwrap();
}
