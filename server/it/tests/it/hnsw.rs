//! `--index hnsw` picks its search width by measured recall (`--hnsw-target-recall`,
//! 0.99 by default): Info, GetIndexStats and /metrics show the width and the recall
//! measured on the index's own vectors, then, once it has answered 200 queries, on
//! those; a picked width finds what exact search finds;
//! `--hnsw-ef-search` fixes the width instead; the exact index reports none of it.

use crate::common;

use std::time::{Duration, Instant};

use common::store_contract::{ingest_and_wait, search_client, text_query};
use common::{InProcessServer, PSEUDO};
use embedwire_proto::v1::{Document, GetIndexStatsRequest, HnswSearch, InfoRequest, RecallProbe, SearchRequest};

/// Enough one-chunk documents for a pick (the server measures from 1,000 vectors on).
const DOCUMENTS: usize = 1_500;

/// Ingests the documents in calls of at most 1,000 (the server's limit per request).
async fn ingest_all(address: &str) {
    let mut client = search_client(address).await;
    let mut all = documents();
    while !all.is_empty() {
        let rest = all.split_off(all.len().min(1_000));
        ingest_and_wait(&mut client, all).await;
        all = rest;
    }
}

fn documents() -> Vec<Document> {
    (0..DOCUMENTS)
        .map(|i| Document {
            id: format!("doc-{i}"),
            text: format!("note {i} about topic {} and part {}", i % 37, i * 7919 % 1000),
            ..Default::default()
        })
        .collect()
}

async fn hnsw_of_stats(address: &str) -> Option<HnswSearch> {
    search_client(address).await.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner().hnsw
}

async fn metrics_page(address: &str) -> String {
    reqwest::get(format!("{address}/metrics")).await.unwrap().text().await.unwrap()
}

/// The top hit ids of a few queries.
async fn top_hits(address: &str) -> Vec<Vec<String>> {
    let mut client = search_client(address).await;
    let mut all = Vec::new();
    for text in ["topic 3 part 12", "note about topic 30", "part 999", "note 1200"] {
        let request = SearchRequest { queries: vec![text_query(text)], top_k: Some(10), ..Default::default() };
        let results = client.search(request).await.unwrap().into_inner().results;
        all.push(results[0].hits.iter().map(|hit| hit.document_id.clone()).collect());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_width_is_picked_by_measured_recall_and_reported() {
    let hnsw = InProcessServer::start(&[PSEUDO, &["--index", "hnsw"]].concat()).await;
    let exact = InProcessServer::start(PSEUDO).await;
    for server in [&hnsw, &exact] {
        ingest_all(&server.address).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let picked = loop {
        let stats = hnsw_of_stats(&hnsw.address).await.expect("an hnsw index reports its search");
        assert_eq!(stats.target_recall, 0.99, "{stats:?}");
        if stats.estimated_recall > 0.0 {
            break stats;
        }
        assert!(Instant::now() < deadline, "no pick after 60 s: {stats:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(picked.estimated_recall >= 0.99 || picked.ef_search == 1024, "{picked:?}");
    assert!(picked.measured_at_vectors >= 1_000, "{picked:?}");
    assert_eq!(picked.probe(), RecallProbe::StoredVectors, "{picked:?}");
    assert!(metrics_page(&hnsw.address).await.contains("embedwire_hnsw_recall_measured_on_queries 0"));

    // 200 answered queries: the width is picked again, on them.
    let mut client = search_client(&hnsw.address).await;
    for call in 0..20 {
        let queries = (0..10).map(|i| text_query(&format!("topic {} part {}", call * 10 + i, i * 97))).collect();
        client.search(SearchRequest { queries, top_k: Some(10), ..Default::default() }).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let picked = loop {
        let stats = hnsw_of_stats(&hnsw.address).await.unwrap();
        if stats.probe() == RecallProbe::RecentQueries {
            break stats;
        }
        assert!(Instant::now() < deadline, "no pick on the answered queries: {stats:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(picked.estimated_recall >= 0.99 || picked.ef_search == 1024, "{picked:?}");

    // Info and /metrics say the same.
    let info = hnsw.client().await.info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.store.unwrap().hnsw, Some(picked), "Info");
    let page = metrics_page(&hnsw.address).await;
    assert!(page.contains(&format!("embedwire_hnsw_ef_search {}", picked.ef_search)), "{page}");
    assert!(page.contains("embedwire_hnsw_estimated_recall "), "{page}");
    assert!(page.contains("embedwire_hnsw_recall_measured_on_queries 1"), "{page}");

    // At the picked width the graph finds what exact search finds (up to the recall).
    let (approximate, truth) = (top_hits(&hnsw.address).await, top_hits(&exact.address).await);
    let (found, total) = approximate
        .iter()
        .zip(&truth)
        .fold((0, 0), |(found, total), (a, t)| (found + t.iter().filter(|id| a.contains(id)).count(), total + t.len()));
    assert!(found as f64 >= 0.95 * total as f64, "{found} of {total}: {approximate:?} vs {truth:?}");

    // The exact index reports no width.
    assert_eq!(hnsw_of_stats(&exact.address).await, None);
    assert!(!metrics_page(&exact.address).await.contains("embedwire_hnsw_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_search_width_is_kept_and_nothing_is_measured() {
    let server = InProcessServer::start(&[PSEUDO, &["--index", "hnsw", "--hnsw-ef-search", "40"]].concat()).await;
    ingest_all(&server.address).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stats = hnsw_of_stats(&server.address).await.unwrap();
    assert_eq!(stats, HnswSearch { ef_search: 40, ..Default::default() });
    let page = metrics_page(&server.address).await;
    assert!(page.contains("embedwire_hnsw_ef_search 40"), "{page}");
    assert!(!page.contains("embedwire_hnsw_estimated_recall"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_outside_zero_to_one_is_refused_at_start() {
    for bad in ["0", "1.5", "NaN"] {
        let error = common::start_error(common::server_bin(), &["--hnsw-target-recall", bad]).await;
        assert!(error.contains("--hnsw-target-recall"), "{bad}: {error}");
    }
}
