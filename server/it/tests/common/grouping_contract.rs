//! Hits grouped by document and highlights, the same cases for every store (the
//! embedded store in `it/search.rs`, PostgreSQL and Weaviate against their real
//! clusters): in every mode a grouped page holds top_k distinct documents even when
//! the best chunks crowd into a few long documents, pages of one ranking agree, each
//! document brings its best chunks, and the matching words are marked.

use std::collections::{BTreeMap, HashSet};

use embedwire_proto::v1::{
    Document, Filter, GroupBy, SearchHit, SearchMode, SearchRequest, SearchStreamRequest,
    search_service_client::SearchServiceClient,
};
use tonic::Code;
use tonic::transport::Channel;

use super::store_contract::{condition_equals, ingest_and_wait, search_client, text_query, until_replicas_agree};
use super::{InProcessServer, ONNX};

/// Small chunks, so that a long document has many.
const CHUNKING: [&str; 4] = ["--chunk-tokens", "24", "--chunk-overlap-tokens", "4"];
const LONG: usize = 4;
const SHORT: usize = 8;

fn document(id: &str, text: String, shelf: &str) -> Document {
    Document {
        id: id.into(),
        text,
        metadata: BTreeMap::from([("shelf".to_string(), shelf.to_string())]).into_iter().collect(),
    }
}

/// Four long manuals about valve and pump maintenance (a dozen chunks each, all closer
/// to the query than any short note) and eight short notes that mention a valve once.
fn library() -> Vec<Document> {
    let mut documents: Vec<Document> = (0..LONG)
        .map(|d| {
            let steps: Vec<String> = (0..12)
                .map(|i| {
                    // The manuals differ in how often they name the pump, so that no two
                    // rank the same (documents that tie may swap between pages).
                    format!(
                        "Valve maintenance for pump station {d}, step {i}: inspect the valve seat and the pump seal{}.",
                        " of the pump".repeat(d)
                    )
                })
                .collect();
            document(&format!("long-{d}"), steps.join(" "), "manuals")
        })
        .collect();
    let topics =
        ["garden hose", "bicycle tyre", "coffee machine", "radiator", "aquarium", "car engine", "boiler", "sink"];
    documents.extend(topics.iter().enumerate().map(|(i, topic)| {
        document(&format!("short-{i}"), format!("A note on the {topic}: its valve is small."), "notes")
    }));
    documents
}

const QUERY: &str = "valve maintenance of the pump";

fn grouped(mode: SearchMode, top_k: u32, offset: u32, group_size: Option<u32>) -> SearchRequest {
    SearchRequest {
        queries: vec![text_query(QUERY)],
        top_k: Some(top_k),
        offset,
        mode: mode as i32,
        rerank: Some(false),
        group_by: GroupBy::Document as i32,
        group_size,
        ..Default::default()
    }
}

async fn hits(client: &mut SearchServiceClient<Channel>, request: SearchRequest) -> Vec<SearchHit> {
    client.search(request).await.unwrap().into_inner().results.remove(0).hits
}

/// Documents in order of first appearance.
fn documents(hits: &[SearchHit]) -> Vec<String> {
    let mut seen = HashSet::new();
    hits.iter().filter(|h| seen.insert(h.document_id.clone())).map(|h| h.document_id.clone()).collect()
}

/// Each document's best score, in order of first appearance (documents that tie may
/// come in either order, as chunks that tie do).
fn document_scores(hits: &[SearchHit]) -> Vec<i64> {
    let mut seen = HashSet::new();
    hits.iter().filter(|h| seen.insert(h.document_id.clone())).map(|h| (h.score * 1e4).round() as i64).collect()
}

fn scores<'a>(hits: impl IntoIterator<Item = &'a SearchHit>) -> Vec<i64> {
    hits.into_iter().map(|h| (h.score * 1e4).round() as i64).collect()
}

pub async fn grouped_by_document(flags: Vec<String>, kind: &str) {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = InProcessServer::start(&[ONNX, &CHUNKING[..], &flags].concat()).await;
    let mut client = search_client(&server.address).await;
    let job = ingest_and_wait(&mut client, library()).await;
    assert_eq!(job.processed_documents as usize, LONG + SHORT, "{kind}: {job:?}");
    let all = (LONG + SHORT) as u32;
    // Every chunk on every replica before pages of one ranking are compared.
    for mode in [SearchMode::Vector, SearchMode::Keyword] {
        let every_chunk = SearchRequest { group_by: 0, top_k: Some(1000), ..grouped(mode, 0, 0, None) };
        until_replicas_agree(&mut client, every_chunk, &format!("{kind} {mode:?}: every chunk")).await;
    }

    for mode in [SearchMode::Vector, SearchMode::Keyword, SearchMode::Hybrid] {
        let context = format!("{kind} {mode:?}");
        // Ungrouped, the best chunks crowd into the long manuals.
        let ungrouped = SearchRequest { group_by: 0, top_k: Some(100), ..grouped(mode, 0, 0, None) };
        let chunks = hits(&mut client, ungrouped).await;
        assert!(chunks.len() > 3 * all as usize, "{context}: {} chunks", chunks.len());
        assert!(documents(&chunks[..3 * all as usize]).len() <= LONG, "{context}: the long manuals come first");

        // Grouped: every document once, although the first chunks asked for hold 4.
        let whole = hits(&mut client, grouped(mode, all, 0, None)).await;
        assert_eq!(whole.len(), all as usize, "{context}: {:?}", documents(&whole));
        assert_eq!(documents(&whole).len(), all as usize, "{context}: one hit per document");
        assert!(whole.windows(2).all(|w| w[0].score >= w[1].score), "{context}: best first");
        if mode != SearchMode::Hybrid {
            // Each document by its best chunk (hybrid's ungrouped page of 100 fuses
            // deeper lists, so its scores differ).
            assert_eq!(document_scores(&whole), document_scores(&chunks), "{context}: the ranking of documents");
        }

        // Pages of documents are pages of the one ranking.
        let mut paged = Vec::new();
        for offset in [0, 5, 10] {
            paged.extend(hits(&mut client, grouped(mode, 5, offset, None)).await);
        }
        assert_eq!(scores(&paged), scores(&whole), "{context}: pages");
        assert_eq!(documents(&paged).len(), all as usize, "{context}: pages");

        // Three chunks each, one after the other, the document's best first.
        let three = hits(&mut client, grouped(mode, 2, 0, Some(3))).await;
        assert_eq!(three.len(), 6, "{context}: {three:?}");
        let first: Vec<&SearchHit> = three.iter().take_while(|h| h.document_id == three[0].document_id).collect();
        assert_eq!(first.len(), 3, "{context}: adjacent");
        assert_eq!(documents(&three).len(), 2, "{context}");
        assert!(first.windows(2).all(|w| w[0].score >= w[1].score), "{context}: best first");
        if mode != SearchMode::Hybrid {
            let best = scores(chunks.iter().filter(|h| h.document_id == three[0].document_id).take(3));
            assert_eq!(scores(first.iter().copied()), best, "{context}: the document's best chunks");
        }

        // With a filter: the short notes only, each once.
        let mut notes = grouped(mode, all, 0, None);
        notes.filter = Some(Filter { must: vec![condition_equals("shelf", "notes")], ..Default::default() });
        let notes = hits(&mut client, notes).await;
        assert_eq!(documents(&notes).len(), SHORT, "{context}: {:?}", documents(&notes));
        assert!(notes.iter().all(|h| h.document_id.starts_with("short-")), "{context}");

        // The stream answers as Search.
        let mut stream = client
            .search_stream(SearchStreamRequest { search: Some(grouped(mode, all, 0, Some(2))), page_size: 3 })
            .await
            .unwrap()
            .into_inner();
        let mut streamed = Vec::new();
        while let Some(page) = stream.message().await.unwrap() {
            streamed.extend(page.hits.into_iter().map(|h| (h.document_id, h.chunk.unwrap().index)));
        }
        let answered: Vec<(String, u32)> = hits(&mut client, grouped(mode, all, 0, Some(2)))
            .await
            .into_iter()
            .map(|h| (h.document_id, h.chunk.unwrap().index))
            .collect();
        assert_eq!(streamed, answered, "{context}: the stream");

        // Reranked candidates are grouped by their rerank order.
        let reranked = SearchRequest { rerank: Some(true), ..grouped(mode, 6, 0, None) };
        let reranked = hits(&mut client, reranked).await;
        assert_eq!(documents(&reranked).len(), 6, "{context}: reranked");
        assert!(reranked.windows(2).all(|w| w[0].rerank_score >= w[1].rerank_score), "{context}: rerank order");

        // Highlights: the words "valve", "maintenance" and "pump", in document offsets.
        let highlighted = SearchRequest { highlight: true, ..grouped(mode, all, 0, None) };
        for hit in hits(&mut client, highlighted).await {
            assert!(!hit.highlights.is_empty(), "{context}: {hit:?}");
            let chunk = hit.chunk.unwrap();
            for span in &hit.highlights {
                assert!(chunk.start_char <= span.start_char && span.end_char <= chunk.end_char, "{context}");
                let word: String = hit
                    .text
                    .chars()
                    .skip((span.start_char - chunk.start_char) as usize)
                    .take((span.end_char - span.start_char) as usize)
                    .collect();
                assert!(
                    ["valve", "maintenance", "pump"].contains(&word.to_lowercase().as_str()),
                    "{context}: {word:?}"
                );
            }
        }
    }

    // Bad input names the field.
    for (request, field) in [
        (grouped(SearchMode::Vector, 3, 0, Some(0)), "group_size"),
        (grouped(SearchMode::Vector, 3, 0, Some(101)), "group_size"),
        (SearchRequest { group_by: 0, ..grouped(SearchMode::Vector, 3, 0, Some(2)) }, "group_size"),
        (SearchRequest { group_by: 9, ..grouped(SearchMode::Vector, 3, 0, None) }, "group_by"),
    ] {
        let status = client.search(request).await.expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{kind}: {status:?}");
        assert!(status.message().contains(field), "{kind}: {field}: {}", status.message());
    }
    server.stop().await.unwrap();
}
