//! End to end: a server started with --rerank-model-dir orders search hits by the
//! cross-encoder's scores (checked against the same model loaded here), and without
//! reranking by cosine similarity.

mod common;

use std::path::Path;
use std::process::Command;

use clap::Parser;
use common::{InProcessServer, PSEUDO, TempDir, venv_python};
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{Document, IngestRequest, SearchQuery, SearchRequest, WatchJobRequest, search_query};
use embedwire_server::ServerConfig;
use embedwire_server::model::cross_encoder::CrossEncoder;
use embedwire_server::model::onnx::{OnnxSettings, init_runtime};
use embedwire_server::model::precision::PrecisionChoice;
use futures::StreamExt;
use tonic::transport::Channel;

fn make_tiny_cross_encoder(dir: &Path) -> (String, Vec<String>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/model/make_tiny_cross_encoder.py");
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
    let documents: Vec<Document> = passages
        .iter()
        .enumerate()
        .map(|(i, text)| Document { id: format!("p{i}"), text: text.clone(), ..Default::default() })
        .collect();
    let job = client.ingest(IngestRequest { documents }).await.unwrap().into_inner().job.unwrap();
    let mut updates = client.watch_job(WatchJobRequest { job_id: job.job_id }).await.unwrap().into_inner();
    while updates.next().await.is_some() {}

    // Without reranking: cosine order, no rerank scores.
    let plain = client.search(search(&query, 8, Some(false))).await.unwrap().into_inner().results.remove(0).hits;
    assert_eq!(plain.len(), 8);
    assert!(plain.windows(2).all(|w| w[0].score >= w[1].score));
    assert!(plain.iter().all(|h| h.rerank_score.is_none()));

    // The same model, loaded here, scores the stored chunk texts.
    let config = ServerConfig::parse_from(["embedwire-server"]);
    let environment = init_runtime(&config.ort_library()).unwrap();
    let mut encoder = CrossEncoder::load(
        environment,
        &model.0,
        OnnxSettings { intra_op_threads: 1, spin: false, arena: false },
        PrecisionChoice::Fp32,
    )
    .unwrap();
    let texts: Vec<&str> = plain.iter().map(|h| h.text.as_str()).collect();
    let scores = encoder.score(&query, &texts).unwrap();
    let mut expected: Vec<(&str, f32)> = plain.iter().map(|h| h.document_id.as_str()).zip(scores).collect();
    expected.sort_by(|a, b| b.1.total_cmp(&a.1));
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
