//! End to end: a server started with --rerank-model-dir orders search hits by the
//! cross-encoder's scores (as its RerankService gives them for the same texts), and
//! without reranking by cosine similarity; a server without one reranks on request
//! with the embedding model.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{InProcessServer, PSEUDO, TempDir, venv_python};
use embedwire_proto::v1::rerank_service_client::RerankServiceClient;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    Document, IngestRequest, RerankRequest, SearchHit, SearchQuery, SearchRequest, WatchJobRequest, search_query,
};
use futures::StreamExt;
use tonic::transport::Channel;

fn make_tiny_cross_encoder(dir: &Path) -> (String, Vec<String>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/model/make_tiny_cross_encoder.py");
    let output = Command::new(venv_python()).arg(&script).arg(dir).output().expect("run make_tiny_cross_encoder.py");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let passages = json["passages"].as_array().unwrap().iter().map(|p| p["text"].as_str().unwrap().to_string());
    (json["query"].as_str().unwrap().to_string(), passages.collect())
}

fn search(query: &str, top_k: u32, rerank: Option<bool>) -> SearchRequest {
    SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Text(query.to_string())) }],
        top_k: Some(top_k),
        rerank,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reranked_hits_follow_the_cross_encoder() {
    let model = TempDir::new("rerank-model");
    let (query, passages) = make_tiny_cross_encoder(&model.0);
    let model_dir = model.flag();
    let flags = [PSEUDO, &["--rerank-model-dir", &model_dir, "--rerank-candidates", "8"]].concat();
    let server = InProcessServer::start(&flags).await;
    let channel = Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap();
    let mut client = SearchServiceClient::new(channel);
    ingest_all(&mut client, &passages).await;

    // Without reranking: cosine order, no rerank scores.
    let plain = client.search(search(&query, 8, Some(false))).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(plain.len(), 8);
    assert!(plain.windows(2).all(|w| w[0].score >= w[1].score));
    assert!(plain.iter().all(|h| h.rerank_score.is_none()));

    // The server's RerankService scores the stored chunk texts.
    let mut rerank =
        RerankServiceClient::new(Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap());
    let texts: Vec<String> = plain.iter().map(|h| h.text.clone()).collect();
    let ranks = rerank
        .rerank(RerankRequest { query: query.clone(), texts, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .ranks;
    let expected: Vec<(&str, f32)> =
        ranks.iter().map(|r| (plain[r.index as usize].document_id.as_str(), r.score)).collect();
    let expected_ids: Vec<&str> = expected.iter().map(|(id, _)| *id).collect();
    let cosine_ids: Vec<&str> = plain.iter().map(|h| h.document_id.as_str()).collect();
    assert_ne!(
        expected_ids, cosine_ids,
        "the fixture must order differently from cosine for this test to mean anything"
    );

    // Reranking is on by default when the server has a cross-encoder.
    let reranked = client.search(search(&query, 8, None)).await.unwrap().into_inner().results.remove(0).hits;
    let reranked_ids: Vec<&str> = reranked.iter().map(|h| h.document_id.as_str()).collect();
    assert_eq!(reranked_ids, expected_ids);
    for (hit, (_, score)) in reranked.iter().zip(&expected) {
        assert!((hit.rerank_score.unwrap() - score).abs() < 1e-4);
    }
    // top_k cuts the reranked order, not the cosine one.
    let top3 = client.search(search(&query, 3, Some(true))).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(top3.iter().map(|h| h.document_id.as_str()).collect::<Vec<_>>(), expected_ids[..3]);
    server.stop().await.unwrap();
}

/// Ingests `texts` as documents p0, p1, ... and waits for the job.
async fn ingest_all(client: &mut SearchServiceClient<Channel>, texts: &[String]) {
    let documents: Vec<Document> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| Document { id: format!("p{i}"), text: text.clone(), ..Default::default() })
        .collect();
    let job = client.ingest(IngestRequest { documents, ..Default::default() }).await.unwrap().into_inner().job.unwrap();
    let mut updates =
        client.watch_job(WatchJobRequest { job_id: job.job_id, ..Default::default() }).await.unwrap().into_inner();
    while updates.next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_cross_encoder_rerank_on_request_uses_the_embedding_model() {
    let texts: Vec<String> = ["apples and pears", "a red bicycle", "the capital of France", "rust borrow checker"]
        .iter()
        .map(|t| t.to_string())
        .collect();
    let server = InProcessServer::start(PSEUDO).await;
    let channel = Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap();
    let mut client = SearchServiceClient::new(channel);
    ingest_all(&mut client, &texts).await;
    let hits = |response: tonic::Response<embedwire_proto::v1::SearchResponse>| -> Vec<SearchHit> {
        response.into_inner().results.remove(0).hits
    };
    // Not by default: a bi-encoder would repeat the search's own scores.
    let plain = hits(client.search(search("capital city", 4, None)).await.unwrap());
    assert!(plain.iter().all(|h| h.rerank_score.is_none()));
    // On request: each chunk's text embedded again and scored by cosine, which for a
    // whole-document chunk is the stored vector's score.
    let reranked = hits(client.search(search("capital city", 4, Some(true))).await.unwrap());
    assert_eq!(reranked.len(), 4);
    for hit in &reranked {
        let rerank_score = hit.rerank_score.expect("reranked");
        assert!((rerank_score - hit.score).abs() < 1e-4, "{}: {rerank_score} vs {}", hit.document_id, hit.score);
    }
    server.stop().await.unwrap();
}
