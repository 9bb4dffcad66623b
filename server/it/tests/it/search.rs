//! SearchService against the real model: ingest, jobs, search with citations,
//! filters, paging, vectors, upsert, delete, dedup, streaming, bad input.

use crate::common;

use common::{InProcessServer, ONNX, PSEUDO, TempDir, embed_request, max_abs_diff, rows};
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    Condition, DeleteDocumentsRequest, Document, EmbeddingDtype, Filter, GetDocumentsRequest, GetIndexStatsRequest,
    GetJobRequest, IngestRequest, IngestStreamRequest, JobStatus, SearchHit, SearchQuery, SearchRequest,
    SearchStreamRequest, StringSet, WatchJobRequest, condition, search_query,
};
use futures::StreamExt;
use tonic::Code;
use tonic::transport::Channel;

async fn search_client(server: &InProcessServer) -> SearchServiceClient<Channel> {
    let channel = Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap();
    SearchServiceClient::new(channel).max_decoding_message_size(64 << 20)
}

fn document(id: &str, text: &str, metadata: &[(&str, &str)]) -> Document {
    Document {
        id: id.to_string(),
        text: text.to_string(),
        metadata: metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    }
}

fn text_query(text: &str) -> SearchQuery {
    SearchQuery { query: Some(search_query::Query::Text(text.to_string())) }
}

fn search(queries: &[&str], top_k: u32) -> SearchRequest {
    SearchRequest { queries: queries.iter().map(|q| text_query(q)).collect(), top_k: Some(top_k), ..Default::default() }
}

fn equals(key: &str, value: &str) -> Condition {
    Condition { key: key.into(), test: Some(condition::Test::Equals(value.into())) }
}

/// Ingests and waits (through WatchJob) until the job ends; returns the final job.
async fn ingest_and_wait(
    client: &mut SearchServiceClient<Channel>,
    documents: Vec<Document>,
) -> embedwire_proto::v1::Job {
    let job = client.ingest(IngestRequest { documents, ..Default::default() }).await.unwrap().into_inner().job.unwrap();
    let mut updates = client
        .watch_job(WatchJobRequest { job_id: job.job_id.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(update) = updates.next().await {
        last = Some(update.unwrap().job.unwrap());
    }
    let last = last.expect("at least one update");
    assert!(last.finished_at.is_some());
    last
}

const CORPUS: [(&str, &str, &str, &str); 6] = [
    ("cats", "Cats are small domesticated felines that purr and chase mice.", "animals", "en"),
    ("dogs", "Dogs are loyal companions that bark and love to play fetch.", "animals", "en"),
    ("rust", "Rust is a systems programming language focused on memory safety.", "tech", "en"),
    ("grpc", "gRPC is a remote procedure call framework built on HTTP/2 and protobuf.", "tech", "en"),
    ("pasta", "Fresh pasta needs flour, eggs and a little salt.", "food", "en"),
    ("katzen", "Katzen sind kleine Haustiere, die schnurren.", "animals", "de"),
];

async fn corpus_server(
    flags: &[&str],
    data: &TempDir,
) -> (InProcessServer, SearchServiceClient<Channel>, embedwire_proto::v1::Job) {
    let data_dir = data.flag();
    let server = InProcessServer::start(&[flags, &["--data-dir", &data_dir]].concat()).await;
    let mut client = search_client(&server).await;
    let documents =
        CORPUS.iter().map(|(id, text, topic, lang)| document(id, text, &[("topic", topic), ("lang", lang)])).collect();
    let job = ingest_and_wait(&mut client, documents).await;
    assert_eq!(job.status, JobStatus::Completed as i32, "{job:?}");
    assert_eq!((job.total_documents, job.processed_documents, job.failed_documents), (6, 6, 0));
    (server, client, job)
}

fn ids(hits: &[SearchHit]) -> Vec<&str> {
    hits.iter().map(|h| h.document_id.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn search_finds_relevant_chunks_with_citations_and_exact_scores() {
    let data = TempDir::new("citations");
    let (server, mut client, _) = corpus_server(ONNX, &data).await;
    let response = client
        .search(search(&["which pet purrs?", "a programming language that is memory safe"], 3))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.results.len(), 2);
    let (pets, langs) = (&response.results[0].hits, &response.results[1].hits);
    assert_eq!(pets[0].document_id, "cats");
    assert_eq!(langs[0].document_id, "rust");
    assert_eq!(pets.len(), 3);
    assert!(pets.windows(2).all(|w| w[0].score >= w[1].score), "sorted by score");

    // The citation slices the stored text; the score is the cosine with Embed's vectors.
    let hit = &pets[0];
    let chunk = hit.chunk.unwrap();
    let stored = client
        .get_documents(GetDocumentsRequest { ids: vec!["cats".into()], ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let text: String = stored.documents[0]
        .text
        .chars()
        .skip(chunk.start_char as usize)
        .take((chunk.end_char - chunk.start_char) as usize)
        .collect();
    assert_eq!(text, hit.text);
    assert_eq!(hit.metadata["topic"], "animals");
    let mut embed = server.client().await;
    let vectors = rows(&embed.embed(embed_request(&["which pet purrs?", &hit.text])).await.unwrap().into_inner());
    let cosine: f32 = vectors[0].iter().zip(&vectors[1]).map(|(a, b)| a * b).sum();
    assert!((cosine - hit.score).abs() < 1e-5, "score {} vs cosine {cosine}", hit.score);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_int8_model_finds_the_same_answers() {
    let data = TempDir::new("int8");
    let (server, mut client, _) = corpus_server(&[ONNX, &["--precision", "int8"]].concat(), &data).await;
    let questions = ["which pet purrs?", "a programming language that is memory safe", "how do I make pasta?"];
    let response = client.search(search(&questions, 1)).await.unwrap();
    assert_eq!(response.metadata().get("x-embedwire-precision").unwrap(), "int8");
    let top: Vec<&str> = response.get_ref().results.iter().map(|result| result.hits[0].document_id.as_str()).collect();
    assert_eq!(top, ["cats", "rust", "pasta"]);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn filters_paging_threshold_and_vectors() {
    let data = TempDir::new("filters");
    let (server, mut client, _) = corpus_server(ONNX, &data).await;
    let query = "animals and pets";
    let all = client.search(search(&[query], 6)).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(all.len(), 6);

    let only = |filter: Filter| SearchRequest { filter: Some(filter), ..search(&[query], 6) };
    let must = client.search(only(Filter { must: vec![equals("topic", "animals")], ..Default::default() })).await;
    let must = must.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(must.len(), 3);
    assert!(must.iter().all(|h| h.metadata["topic"] == "animals"));
    let any_of = Condition {
        key: "topic".into(),
        test: Some(condition::Test::AnyOf(StringSet { values: vec!["food".into(), "tech".into()] })),
    };
    let combined = Filter { should: vec![any_of], must_not: vec![equals("lang", "de")], ..Default::default() };
    let hits = client.search(only(combined)).await.unwrap().into_inner().results.remove(0).hits;
    let mut found = ids(&hits);
    found.sort();
    assert_eq!(found, vec!["grpc", "pasta", "rust"]);
    let no_german =
        Filter { must: vec![equals("topic", "animals")], must_not: vec![equals("lang", "de")], ..Default::default() };
    let hits = client.search(only(no_german)).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(hits.len(), 2);

    // offset pages through the same order; the threshold cuts the tail.
    let page = client.search(SearchRequest { offset: 2, ..search(&[query], 2) }).await.unwrap().into_inner();
    assert_eq!(ids(&page.results[0].hits), ids(&all[2..4]));
    let threshold = (all[1].score + all[2].score) / 2.0;
    let above = client.search(SearchRequest { score_threshold: Some(threshold), ..search(&[query], 6) }).await;
    assert_eq!(ids(&above.unwrap().into_inner().results[0].hits), ids(&all[..2]));

    // Switches: no text, no metadata, vectors as float32 and int8.
    let lean = SearchRequest {
        include_text: Some(false),
        include_metadata: Some(false),
        include_vectors: true,
        ..search(&[query], 1)
    };
    let hit = client.search(lean).await.unwrap().into_inner().results.remove(0).hits.remove(0);
    assert!(hit.text.is_empty() && hit.metadata.is_empty());
    let vector = embedwire_proto::vectors::f32_from_le_bytes(&hit.vector);
    let expected = rows(&server.client().await.embed(embed_request(&[&all[0].text])).await.unwrap().into_inner());
    assert!(max_abs_diff(&vector, &expected[0]) < 1e-5);
    let int8 =
        SearchRequest { include_vectors: true, vector_dtype: EmbeddingDtype::Int8 as i32, ..search(&[query], 1) };
    let hit = client.search(int8).await.unwrap().into_inner().results.remove(0).hits.remove(0);
    assert_eq!(hit.vector.len(), 384);
    let dequantized: Vec<f32> = hit.vector.iter().map(|q| (*q as i8) as f32 * hit.vector_scale).collect();
    assert!(max_abs_diff(&dequantized, &expected[0]) < 0.01);

    // A query vector works like its text.
    let by_vector = SearchRequest {
        queries: vec![SearchQuery {
            query: Some(search_query::Query::Vector(embedwire_proto::vectors::f32_to_le_bytes(&expected[0]).into())),
        }],
        top_k: Some(1),
        ..Default::default()
    };
    let hit = client.search(by_vector).await.unwrap().into_inner().results.remove(0).hits.remove(0);
    assert_eq!(hit.document_id, all[0].document_id);
    assert!((hit.score - 1.0).abs() < 1e-5);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn upsert_delete_get_and_stats() {
    let data = TempDir::new("upsert");
    let (server, mut client, _) = corpus_server(ONNX, &data).await;
    let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
    assert_eq!((stats.document_count, stats.chunk_count, stats.pending_documents), (6, 6, 0));
    assert_eq!(stats.index_kind, "exact");

    // Re-ingesting an id replaces it.
    let job = ingest_and_wait(
        &mut client,
        vec![document("cats", "Volcanoes erupt molten lava and ash.", &[("topic", "geo")])],
    )
    .await;
    assert_eq!(job.status, JobStatus::Completed as i32);
    let hits = client.search(search(&["which pet purrs?"], 6)).await.unwrap().into_inner().results.remove(0).hits;
    assert!(!hits.iter().any(|h| h.text.contains("purr")), "the old version is gone");
    let lava = client.search(search(&["lava"], 1)).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!((lava[0].document_id.as_str(), lava[0].metadata["topic"].as_str()), ("cats", "geo"));
    let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
    assert_eq!((stats.document_count, stats.chunk_count), (6, 6));

    // Delete by id and by filter; Get reports what is missing.
    let deleted = client
        .delete_documents(DeleteDocumentsRequest {
            ids: vec!["dogs".into(), "nope".into()],
            filter: None,
            ..Default::default()
        })
        .await;
    assert_eq!(deleted.unwrap().into_inner().deleted_count, 1);
    let by_filter = DeleteDocumentsRequest {
        ids: vec![],
        filter: Some(Filter { must: vec![equals("topic", "tech")], ..Default::default() }),
        ..Default::default()
    };
    assert_eq!(client.delete_documents(by_filter).await.unwrap().into_inner().deleted_count, 2);
    let got = client
        .get_documents(GetDocumentsRequest {
            ids: vec!["cats".into(), "rust".into(), "pasta".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.documents.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), vec!["cats", "pasta"]);
    assert_eq!(got.missing_ids, vec!["rust"]);
    let hits = client.search(search(&["programming"], 6)).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(hits.len(), 3);
    assert!(!hits.iter().any(|h| ["dogs", "rust", "grpc"].contains(&h.document_id.as_str())));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn long_documents_are_chunked_with_overlap_and_identical_chunks_share_vectors() {
    let data = TempDir::new("chunks");
    let data_dir = data.flag();
    let flags = [ONNX, &["--data-dir", &data_dir, "--chunk-tokens", "40", "--chunk-overlap-tokens", "8"]].concat();
    let server = InProcessServer::start(&flags).await;
    let mut client = search_client(&server).await;
    let sentences = common::sentences(30, 10).join(". ");
    let paragraph = "The same paragraph appears in two documents and is embedded only once.";
    let documents = vec![
        document("long", &format!("{sentences}\n\n  {paragraph}"), &[]),
        document("copy-a", paragraph, &[]),
        document("copy-b", &format!("  {paragraph}  "), &[]),
    ];
    let job = ingest_and_wait(&mut client, documents).await;
    assert_eq!(job.status, JobStatus::Completed as i32);
    let got = client
        .get_documents(GetDocumentsRequest { ids: vec!["long".into(), "copy-b".into()], ..Default::default() })
        .await
        .unwrap();
    let got = got.into_inner();
    let long = &got.documents[0];
    assert!(long.chunks.len() >= 8, "{} chunks", long.chunks.len());
    assert!(!long.text.contains("  ") && !long.text.contains('\n'), "whitespace is normalized");
    assert_eq!(long.chunks[0].start_char, 0);
    assert_eq!(long.chunks.last().unwrap().end_char as usize, long.text.chars().count());
    for pair in long.chunks.windows(2) {
        assert!(pair[1].start_char < pair[0].end_char, "consecutive chunks overlap: {pair:?}");
    }
    assert_eq!(got.documents[1].text, paragraph, "surrounding whitespace is trimmed");

    let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
    assert_eq!(stats.chunk_count, long.chunks.len() as u64 + 2);
    assert_eq!(stats.unique_vector_count, stats.chunk_count - 1, "copy-a and copy-b share one vector");

    // Re-ingesting the same corpus embeds nothing new.
    let sequences_before = server.engine.stats().sequences.load(std::sync::atomic::Ordering::SeqCst);
    let again = vec![document("copy-c", paragraph, &[])];
    ingest_and_wait(&mut client, again).await;
    let sequences_after = server.engine.stats().sequences.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(sequences_before, sequences_after, "an identical chunk is not embedded again");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn ingest_stream_loads_many_documents_and_search_stream_pages_results() {
    let data = TempDir::new("stream");
    let data_dir = data.flag();
    let server = InProcessServer::start(&[PSEUDO, &["--data-dir", &data_dir]].concat()).await;
    let mut client = search_client(&server).await;
    let messages = (0..50).map(|m| IngestStreamRequest {
        documents: (0..100).map(|d| document(&format!("d{m}-{d}"), &format!("document {m} {d} body"), &[])).collect(),
        ..Default::default()
    });
    let summary = client.ingest_stream(futures::stream::iter(messages)).await.unwrap().into_inner();
    assert_eq!(summary.received_documents, 5000);
    let job = summary.job.unwrap();
    assert_eq!(job.total_documents, 5000);
    let mut updates = client
        .watch_job(WatchJobRequest { job_id: job.job_id.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    while updates.next().await.is_some() {}
    let job = client
        .get_job(GetJobRequest { job_id: job.job_id, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!((job.status, job.processed_documents), (JobStatus::Completed as i32, 5000));

    let request = SearchStreamRequest { search: Some(search(&["document 7 7 body"], 2500)), page_size: 1000 };
    let pages: Vec<_> = client.search_stream(request).await.unwrap().into_inner().collect().await;
    assert_eq!(pages.iter().map(|p| p.as_ref().unwrap().hits.len()).collect::<Vec<_>>(), vec![1000, 1000, 500]);
    let first = &pages[0].as_ref().unwrap().hits[0];
    assert_eq!((first.document_id.as_str(), first.score > 0.999), ("d7-7", true));
    let scores: Vec<f32> = pages.iter().flat_map(|p| p.as_ref().unwrap().hits.iter().map(|h| h.score)).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "pages continue one order");
    server.stop().await.unwrap();
}

fn expect<T>(result: Result<T, tonic::Status>, code: Code, mentions: &str) {
    let Err(status) = result else { panic!("must fail with {code:?} mentioning {mentions:?}") };
    assert_eq!(status.code(), code, "{}", status.message());
    assert!(status.message().contains(mentions), "{:?} should mention {mentions:?}", status.message());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_search_and_ingest_requests_name_the_field() {
    let data = TempDir::new("bad");
    let data_dir = data.flag();
    let flags =
        [PSEUDO, &["--data-dir", &data_dir, "--max-documents-per-request", "3", "--max-metadata-bytes", "20"]].concat();
    let server = InProcessServer::start(&flags).await;
    let mut client = search_client(&server).await;
    expect(
        client.get_job(GetJobRequest { job_id: "nope".into(), ..Default::default() }).await,
        Code::NotFound,
        "job nope",
    );
    expect(
        client.watch_job(WatchJobRequest { job_id: "nope".into(), ..Default::default() }).await.map(|_| ()),
        Code::NotFound,
        "job nope",
    );
    let ingest = |documents: Vec<Document>| IngestRequest { documents, ..Default::default() };
    expect(client.ingest(ingest(vec![])).await, Code::InvalidArgument, "documents");
    expect(
        client.ingest(ingest(vec![document("a", " \n ", &[])])).await,
        Code::InvalidArgument,
        "documents[0].text: is empty",
    );
    expect(client.ingest(ingest(vec![document("a", "x", &[]); 4])).await, Code::InvalidArgument, "limit of 3");
    let big = document("a", "x", &[("key", "a value much longer than twenty bytes")]);
    expect(client.ingest(ingest(vec![big])).await, Code::InvalidArgument, "documents[0].metadata");
    expect(client.search(search(&["x"], 0)).await, Code::InvalidArgument, "top_k");
    expect(client.search(search(&["x"], 1001)).await, Code::InvalidArgument, "top_k");
    expect(client.search(SearchRequest::default()).await, Code::InvalidArgument, "queries");
    expect(client.search(search(&[" "], 1)).await, Code::InvalidArgument, "queries[0].text");
    let empty_set = Filter {
        must: vec![Condition { key: "k".into(), test: Some(condition::Test::AnyOf(StringSet { values: vec![] })) }],
        ..Default::default()
    };
    expect(
        client.search(SearchRequest { filter: Some(empty_set), ..search(&["x"], 1) }).await,
        Code::InvalidArgument,
        "filter.must[0].any_of",
    );
    let no_test = Filter { must_not: vec![Condition { key: "k".into(), test: None }], ..Default::default() };
    expect(
        client.search(SearchRequest { filter: Some(no_test), ..search(&["x"], 1) }).await,
        Code::InvalidArgument,
        "filter.must_not[0]",
    );
    let short_vector = SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Vector(vec![0u8; 12].into())) }],
        ..Default::default()
    };
    expect(client.search(short_vector).await, Code::InvalidArgument, "queries[0].vector: has 3 values");
    // Rerank reads texts: a vector query cannot be reranked (without a cross-encoder,
    // rerank on a text query is the bi-encoder's: rerank_search.rs).
    let vector_rerank = SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Vector(vec![0u8; 384 * 4].into())) }],
        rerank: Some(true),
        ..Default::default()
    };
    expect(client.search(vector_rerank).await, Code::InvalidArgument, "rerank: needs text queries");
    expect(client.delete_documents(DeleteDocumentsRequest::default()).await, Code::InvalidArgument, "ids");
    // Still serving.
    let job = ingest_and_wait(&mut client, vec![document("ok", "fine", &[])]).await;
    assert_eq!(job.status, JobStatus::Completed as i32);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn documents_and_jobs_survive_a_restart() {
    let data = TempDir::new("restart");
    let (server, mut client, job) = corpus_server(ONNX, &data).await;
    let before = client.search(search(&["which pet purrs?"], 3)).await.unwrap().into_inner().results.remove(0).hits;
    server.stop().await.unwrap();

    let data_dir = data.flag();
    let server = InProcessServer::start(&[ONNX, &["--data-dir", &data_dir]].concat()).await;
    let mut client = search_client(&server).await;
    let after = client.search(search(&["which pet purrs?"], 3)).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(ids(&before), ids(&after));
    assert_eq!(before[0].score, after[0].score);
    let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.unwrap().into_inner();
    assert_eq!(stats.document_count, 6);
    let job_after = client
        .get_job(GetJobRequest { job_id: job.job_id.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!(job_after, job, "the finished job is remembered as it was");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn searches_keep_answering_while_a_large_ingest_runs() {
    let data = TempDir::new("concurrent");
    let (server, mut client, _) = corpus_server(ONNX, &data).await;
    let texts = common::sentences(300, 150);
    let documents = texts.iter().enumerate().map(|(i, t)| document(&format!("big-{i}"), t, &[])).collect();
    let job = client.ingest(IngestRequest { documents, ..Default::default() }).await.unwrap().into_inner().job.unwrap();

    let mut latencies = Vec::new();
    loop {
        let started = std::time::Instant::now();
        let hits = client.search(search(&["which pet purrs?"], 3)).await.expect("search answers during ingest");
        latencies.push(started.elapsed());
        assert_eq!(hits.into_inner().results[0].hits.len(), 3);
        let now = client
            .get_job(GetJobRequest { job_id: job.job_id.clone(), ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .job
            .unwrap();
        if now.finished_at.is_some() {
            assert_eq!(now.processed_documents, 300);
            break;
        }
    }
    latencies.sort();
    let (p50, max) = (latencies[latencies.len() / 2], *latencies.last().unwrap());
    eprintln!("{} searches during the ingest: p50 {p50:?}, max {max:?}", latencies.len());
    assert!(latencies.len() >= 5, "searches were starved: {} in the whole ingest", latencies.len());
    // Generous: a liveness bound (one bulk batch ahead at most), not a speed target;
    // bench/ measures the real figures.
    assert!(max < std::time::Duration::from_secs(10), "a search waited {max:?}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_document_that_cannot_be_indexed_fails_its_job_and_nothing_else() {
    let data = TempDir::new("failing");
    let (server, mut client, _) = corpus_server(ONNX, &data).await;
    // Zero-width spaces are not whitespace (the text is not empty) but the tokenizer
    // drops them: nothing is left to embed.
    let invisible = document("invisible", "\u{200B}\u{200B}\u{200B}", &[]);
    let job =
        ingest_and_wait(&mut client, vec![document("visible", "A perfectly fine document.", &[]), invisible]).await;
    assert_eq!(job.status, JobStatus::Failed as i32);
    assert_eq!((job.processed_documents, job.failed_documents), (1, 1));
    assert!(job.error.contains("invisible"), "the reason names the document: {}", job.error);
    let got = client
        .get_documents(GetDocumentsRequest { ids: vec!["visible".into(), "invisible".into()], ..Default::default() })
        .await;
    assert_eq!(got.unwrap().into_inner().missing_ids, vec!["invisible"]);
    // Other jobs go on.
    let next = ingest_and_wait(&mut client, vec![document("later", "Another fine document.", &[])]).await;
    assert_eq!(next.status, JobStatus::Completed as i32);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn keyword_and_hybrid_search_on_the_embedded_store() {
    common::hybrid_contract::keyword_and_hybrid_search(Vec::new(), "embedded").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn grouped_by_document_on_the_embedded_store() {
    common::grouping_contract::grouped_by_document(Vec::new(), "embedded").await;
}
