//! Keyword and hybrid search, the same cases for every store (the embedded store in
//! `it/search.rs`, PostgreSQL and Weaviate against their real clusters): a rare exact
//! token ranks first, replaced and deleted documents leave the keyword side too, every
//! search option works in every mode, and bad input is refused naming the field.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use embedwire_proto::v1::{
    DeleteDocumentsRequest, Document, Filter, Fusion, QueryResult, SearchHit, SearchMode, SearchRequest,
    SearchStreamRequest, search_service_client::SearchServiceClient,
};
use tonic::Code;
use tonic::transport::Channel;

use super::store_contract::{condition_equals, ingest_and_wait, search_client, text_query, until_every_replica};
use super::{InProcessServer, ONNX};

/// The part number only one chunk holds.
const PART: &str = "XJ-4471-B";

fn document(id: &str, text: &str, shelf: &str) -> Document {
    Document {
        id: id.into(),
        text: text.into(),
        metadata: BTreeMap::from([("shelf".to_string(), shelf.to_string())]).into_iter().collect(),
    }
}

/// Paragraphs about pumps and valves: the part number's chunk is not the closest in
/// meaning to a question about the part, so only its exact token finds it.
fn catalogue() -> Vec<Document> {
    let mut documents = vec![
        document(
            "manual-valve",
            &format!("Replacement gasket {PART} fits the intake flange of older units. Torque the bolts evenly."),
            "parts",
        ),
        document("pump-a", "The centrifugal pump moves water by spinning an impeller inside a volute casing.", "pumps"),
        document(
            "pump-b",
            "Priming the pump removes trapped air so that suction can draw water into the inlet.",
            "pumps",
        ),
        document("valve-a", "A check valve lets fluid flow one way and closes when the flow reverses.", "valves"),
        document(
            "valve-b",
            "Gate valves open fully to give an unobstructed path; they are not for throttling.",
            "valves",
        ),
        document("seal-a", "Mechanical seals keep the pumped liquid from leaking along the rotating shaft.", "parts"),
    ];
    for i in 0..30 {
        documents.push(document(
            &format!("note-{i}"),
            &format!(
                "Maintenance note {i}: inspect the pump housing, the valves and the seals every {} hours.",
                100 + i
            ),
            "notes",
        ));
    }
    documents
}

fn request(query: &str, mode: SearchMode) -> SearchRequest {
    SearchRequest {
        queries: vec![text_query(query)],
        top_k: Some(5),
        mode: mode as i32,
        rerank: Some(false),
        ..Default::default()
    }
}

async fn search(
    client: &mut SearchServiceClient<Channel>,
    request: SearchRequest,
) -> Result<Vec<QueryResult>, tonic::Status> {
    client.search(request).await.map(|r| r.into_inner().results)
}

fn ids(hits: &[SearchHit]) -> Vec<&str> {
    hits.iter().map(|h| h.document_id.as_str()).collect()
}

/// Waits until every one of the catalogue's documents is found by vector and by
/// keyword search on every replica.
async fn until_catalogue_searchable(client: &mut SearchServiceClient<Channel>, kind: &str) {
    let everyone = catalogue().len();
    let all_found = |hits: &[SearchHit]| hits.iter().map(|h| &h.document_id).collect::<HashSet<_>>().len() == everyone;
    for mode in [SearchMode::Vector, SearchMode::Keyword] {
        // Every document holds one of these words (stemmed: "valves", "seals").
        let mut every_document = request("pump valve seal gasket", mode);
        every_document.top_k = Some(2 * everyone as u32);
        let what = format!("{kind} {mode:?}: all {everyone} documents");
        until_every_replica(client, every_document, &what, |hits: &[SearchHit]| all_found(hits)).await;
    }
}

/// Runs every keyword and hybrid case on a server started with `flags` (none: the
/// embedded store in a fresh data directory).
pub async fn keyword_and_hybrid_search(flags: Vec<String>, kind: &str) {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = InProcessServer::start(&[ONNX, &flags].concat()).await;
    let mut client = search_client(&server.address).await;
    let job = ingest_and_wait(&mut client, catalogue()).await;
    assert_eq!(job.processed_documents, 36, "{kind}: {job:?}");
    until_catalogue_searchable(&mut client, kind).await;

    // The rare token ranks first by keyword and in hybrid; keyword hits carry only a
    // keyword score, hybrid hits the sides that found them.
    let keyword = search(&mut client, request(PART, SearchMode::Keyword)).await.unwrap().remove(0).hits;
    assert_eq!(ids(&keyword), ["manual-valve"], "{kind}: only one chunk holds the token");
    assert!(
        keyword[0].keyword_score.is_some_and(|s| s > 0.0) && keyword[0].vector_score.is_none(),
        "{kind}: {keyword:?}"
    );
    assert_eq!(keyword[0].score, keyword[0].keyword_score.unwrap());
    // Words match by their stem in every store ("gaskets" finds "gasket", "replacing"
    // finds "Replacement"), and only that chunk has them.
    let stemmed = search(&mut client, request("replacing gaskets", SearchMode::Keyword)).await.unwrap().remove(0).hits;
    assert_eq!(ids(&stemmed), ["manual-valve"], "{kind}: stemmed words match");
    let question = format!("which part number is {PART}");
    let hybrid = search(&mut client, request(&question, SearchMode::Hybrid)).await.unwrap().remove(0).hits;
    assert_eq!(hybrid[0].document_id, "manual-valve", "{kind}: {:?}", ids(&hybrid));
    assert!(hybrid[0].keyword_score.is_some(), "{kind}: {hybrid:?}");
    assert!(hybrid.iter().all(|h| h.vector_score.is_some() || h.keyword_score.is_some()));
    assert!(hybrid.windows(2).all(|w| w[0].score >= w[1].score), "{kind}: fused order");
    let vector = search(&mut client, request(&question, SearchMode::Vector)).await.unwrap().remove(0).hits;
    assert!(vector.iter().all(|h| h.vector_score == Some(h.score) && h.keyword_score.is_none()));
    // Hybrid hits get their text and metadata after fusion, whichever side found them:
    // the same as found by vector or by keyword alone.
    assert!(hybrid[0].text.contains(PART) && hybrid[0].metadata["shelf"] == keyword[0].metadata["shelf"], "{kind}");
    assert!(hybrid.iter().any(|h| h.keyword_score.is_none()), "{kind}: a hit of the vector side alone: {hybrid:?}");
    let by_keyword = search(&mut client, request(&question, SearchMode::Keyword)).await.unwrap().remove(0).hits;
    for hit in &hybrid {
        assert!(!hit.text.is_empty() && hit.metadata.contains_key("shelf"), "{kind}: {hit:?}");
        let same_chunk = |other: &&SearchHit| (&other.document_id, other.chunk) == (&hit.document_id, hit.chunk);
        for same in vector.iter().find(same_chunk).into_iter().chain(by_keyword.iter().find(same_chunk)) {
            assert_eq!((&hit.text, &hit.metadata), (&same.text, &same.metadata), "{kind}: {}", hit.document_id);
        }
    }
    let bare = SearchRequest {
        include_text: Some(false),
        include_metadata: Some(false),
        ..request(&question, SearchMode::Hybrid)
    };
    let bare = search(&mut client, bare).await.unwrap().remove(0).hits;
    assert!(bare.iter().all(|h| h.text.is_empty() && h.metadata.is_empty()), "{kind}: {bare:?}");

    // Both fusions and the ends of alpha: alpha 1 is the vector ranking.
    for fusion in [Fusion::ReciprocalRank, Fusion::RelativeScore] {
        let mut fused = request(&question, SearchMode::Hybrid);
        fused.fusion = fusion as i32;
        fused.alpha = Some(0.0);
        let by_keyword = search(&mut client, fused.clone()).await.unwrap().remove(0).hits;
        assert_eq!(by_keyword[0].document_id, "manual-valve", "{kind} {fusion:?}");
        fused.alpha = Some(1.0);
        let by_vector = search(&mut client, fused).await.unwrap().remove(0).hits;
        assert_eq!(ids(&by_vector), ids(&vector), "{kind} {fusion:?}: alpha 1 is the vector ranking");
    }

    // Only stop words and punctuation: nothing by keyword, the vector hits in hybrid.
    let stop_words = "the of and, to a -- in!";
    assert!(search(&mut client, request(stop_words, SearchMode::Keyword)).await.unwrap()[0].hits.is_empty(), "{kind}");
    let hybrid = search(&mut client, request(stop_words, SearchMode::Hybrid)).await.unwrap().remove(0).hits;
    let vector = search(&mut client, request(stop_words, SearchMode::Vector)).await.unwrap().remove(0).hits;
    assert_eq!(ids(&hybrid), ids(&vector), "{kind}: hybrid without keyword terms is the vector ranking");

    // Filters, offset, several queries and the stream work in keyword and hybrid mode.
    for mode in [SearchMode::Keyword, SearchMode::Hybrid] {
        let mut filtered = request("pump valves seals", mode);
        filtered.filter = Some(Filter { must: vec![condition_equals("shelf", "valves")], ..Default::default() });
        let hits = search(&mut client, filtered).await.unwrap().remove(0).hits;
        assert!(
            !hits.is_empty() && hits.iter().all(|h| h.document_id.starts_with("valve-")),
            "{kind} {mode:?}: {hits:?}"
        );

        let mut page = request("maintenance note inspect pump housing", mode);
        page.top_k = Some(6);
        let whole = search(&mut client, page.clone()).await.unwrap().remove(0).hits;
        page.offset = 3;
        page.top_k = Some(3);
        let second = search(&mut client, page).await.unwrap().remove(0).hits;
        // The same ranking paged: equal scores (chunks that tie may come in either order).
        let scores = |hits: &[SearchHit]| hits.iter().map(|h| (h.score * 1e4).round() as i64).collect::<Vec<_>>();
        assert_eq!(scores(&second), scores(&whole[3..]), "{kind} {mode:?}: offset pages the same ranking");

        let mut two = request(PART, mode);
        two.queries.push(text_query("gate valves throttling"));
        let results = search(&mut client, two.clone()).await.unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].hits[0].document_id, "manual-valve", "{kind} {mode:?}");
        assert_eq!(results[1].hits[0].document_id, "valve-b", "{kind} {mode:?}");

        let mut stream =
            client.search_stream(SearchStreamRequest { search: Some(two), page_size: 2 }).await.unwrap().into_inner();
        let mut streamed: Vec<Vec<SearchHit>> = vec![Vec::new(), Vec::new()];
        while let Some(page) = stream.message().await.unwrap() {
            streamed[page.query_index as usize].extend(page.hits);
        }
        // The same ranking: the same best hit and the same scores in order (the notes tie
        // on their shared words, and a store may break ties either way from call to call).
        for (streamed, answered) in streamed.iter().zip(&results) {
            assert_eq!(streamed[0].document_id, answered.hits[0].document_id, "{kind} {mode:?}");
            assert_eq!(scores(streamed), scores(&answered.hits), "{kind} {mode:?}: the stream answers as Search");
        }
    }

    // Rerank (the embedding model as a bi-encoder here) reorders the fused or keyword
    // candidates by its score.
    for mode in [SearchMode::Keyword, SearchMode::Hybrid] {
        let mut reranked = request("pump water impeller", mode);
        reranked.rerank = Some(true);
        let hits = search(&mut client, reranked).await.unwrap().remove(0).hits;
        assert!(!hits.is_empty() && hits.iter().all(|h| h.rerank_score.is_some()), "{kind} {mode:?}: {hits:?}");
        assert!(hits.windows(2).all(|w| w[0].rerank_score >= w[1].rerank_score), "{kind} {mode:?}: rerank order");
    }

    // The threshold applies to the mode's score: BM25 in keyword mode.
    let mut high = request(PART, SearchMode::Keyword);
    high.score_threshold = Some(keyword[0].score + 1.0);
    assert!(
        search(&mut client, high).await.unwrap()[0].hits.is_empty(),
        "{kind}: the BM25 score is below the threshold"
    );

    // Bad input names the field.
    let refused = |result: Result<_, tonic::Status>, field: &str| {
        let status = result.expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{kind}: {status:?}");
        assert!(status.message().contains(field), "{kind}: {field}: {}", status.message());
    };
    let mut bad = request(PART, SearchMode::Hybrid);
    bad.mode = 17;
    refused(search(&mut client, bad).await, "mode");
    let mut bad = request(PART, SearchMode::Hybrid);
    bad.fusion = 9;
    refused(search(&mut client, bad).await, "fusion");
    for alpha in [1.5, -0.1, f32::NAN] {
        let mut bad = request(PART, SearchMode::Hybrid);
        bad.alpha = Some(alpha);
        refused(search(&mut client, bad).await, "alpha");
    }
    let mut vector_query = request(PART, SearchMode::Keyword);
    vector_query.queries = vec![embedwire_proto::v1::SearchQuery {
        query: Some(embedwire_proto::v1::search_query::Query::Vector(vec![0u8; 384 * 4].into())),
    }];
    refused(search(&mut client, vector_query).await, "queries[0]");

    // A 100,000-character query costs a bounded time: answered, not stalled; a longer
    // one is refused naming the field, in every mode.
    let words: String = (0..17_000).map(|i| format!("w{i} ")).collect();
    let long = format!("{PART} {}", &words[..100_000 - PART.len() - 1]);
    assert_eq!(long.chars().count(), 100_000);
    for mode in [SearchMode::Keyword, SearchMode::Hybrid, SearchMode::Vector] {
        let started = Instant::now();
        let answer = search(&mut client, request(&long, mode)).await;
        assert!(answer.is_ok(), "{kind} {mode:?}: {answer:?}");
        assert!(started.elapsed() < Duration::from_secs(20), "{kind} {mode:?}: {:?}", started.elapsed());
        refused(search(&mut client, request(&format!("{long} x"), mode)).await, "queries[0].text");
    }
    let answer = search(&mut client, request(&long, SearchMode::Keyword)).await.unwrap();
    assert_eq!(answer[0].hits[0].document_id, "manual-valve", "{kind}: the first terms are searched");

    // A replaced document loses its old words, a deleted one leaves the keyword side.
    let replaced = document("manual-valve", "Replacement gasket fits the intake flange of older units.", "parts");
    ingest_and_wait(&mut client, vec![replaced]).await;
    let what = format!("{kind}: the replaced text gone from the keyword index");
    let gone = |after: &[SearchHit]| after.is_empty();
    until_every_replica(&mut client, request(PART, SearchMode::Keyword), &what, gone).await;
    let before =
        search(&mut client, request("gate valves throttling", SearchMode::Keyword)).await.unwrap().remove(0).hits;
    assert_eq!(before[0].document_id, "valve-b");
    client
        .delete_documents(DeleteDocumentsRequest { ids: vec!["valve-b".into()], filter: None, ..Default::default() })
        .await
        .unwrap();
    for mode in [SearchMode::Keyword, SearchMode::Hybrid] {
        let gone = |hits: &[SearchHit]| hits.iter().all(|h| h.document_id != "valve-b");
        let what = format!("{kind} {mode:?}: valve-b deleted");
        until_every_replica(&mut client, request("gate valves throttling", mode), &what, gone).await;
    }
}
