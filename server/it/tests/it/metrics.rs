//! /metrics moves as requests are made: gRPC calls by method and code with latency,
//! model batches (size, tokens, inference time, queue wait), ingested documents; and
//! deadlines (grpc-timeout) end calls with DEADLINE_EXCEEDED without hurting the server;
//! the model gives its memory back once idle after an ingest of long texts.

use crate::common;

use std::time::Duration;

use common::{InProcessServer, ONNX, embed_request, rows, sentences};
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{Document, IngestRequest};
use tonic::Code;

async fn metrics_page(address: &str) -> String {
    reqwest::get(format!("{address}/metrics")).await.unwrap().text().await.unwrap()
}

/// The value of the first series starting with `prefix` (0 when absent).
fn value(page: &str, prefix: &str) -> f64 {
    page.lines().find(|l| l.starts_with(prefix)).map_or(0.0, |l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_calls_batches_and_ingest() {
    let server = InProcessServer::start(ONNX).await;
    let before = metrics_page(&server.address).await;
    let mut client = server.client().await;
    let texts = sentences(8, 12);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    for _ in 0..3 {
        let response = client.embed(embed_request(&refs)).await.unwrap();
        // Each answer says where its time went.
        let ms = |name: &str| -> f64 { response.metadata().get(name).unwrap().to_str().unwrap().parse().unwrap() };
        assert!(ms("x-embedwire-inference-ms") > 0.0, "model time reported");
        assert!(ms("x-embedwire-queue-ms") >= 0.0);
        assert!(ms("x-embedwire-total-ms") >= ms("x-embedwire-inference-ms"), "the whole call includes its model time");
    }
    let http_answer = reqwest::Client::new()
        .post(format!("{}/v1/embeddings", server.address))
        .json(&serde_json::json!({"input": "timed"}))
        .send()
        .await
        .unwrap();
    assert!(http_answer.headers().contains_key("x-embedwire-inference-ms"), "HTTP answers carry the timing too");
    let bad = client.embed(embed_request(&["fine", ""])).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let channel = tonic::transport::Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap();
    let mut search = SearchServiceClient::new(channel);
    let documents =
        (0..5).map(|i| Document { id: format!("d{i}"), text: texts[i].clone(), ..Default::default() }).collect();
    let job = search.ingest(IngestRequest { documents, ..Default::default() }).await.unwrap().into_inner().job.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let page = metrics_page(&server.address).await;
        if value(&page, "embedwire_ingested_documents_total") - value(&before, "embedwire_ingested_documents_total")
            >= 5.0
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "job {} never counted", job.job_id);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = metrics_page(&server.address).await;
    let delta = |prefix: &str| value(&after, prefix) - value(&before, prefix);
    assert_eq!(
        delta(r#"embedwire_grpc_requests_total{method="/embedwire.v1.EmbedService/Embed",code="Ok"}"#),
        3.0,
        "{after}"
    );
    assert_eq!(
        delta(r#"embedwire_grpc_requests_total{method="/embedwire.v1.EmbedService/Embed",code="InvalidArgument"}"#),
        1.0
    );
    assert_eq!(delta(r#"embedwire_grpc_requests_total{method="/embedwire.v1.SearchService/Ingest",code="Ok"}"#), 1.0);
    assert!(
        delta(r#"embedwire_grpc_request_duration_seconds_count{method="/embedwire.v1.EmbedService/Embed"}"#) >= 4.0
    );
    assert!(delta("embedwire_batch_size_count") >= 1.0, "batches observed");
    assert!(delta("embedwire_batch_size_sum") >= 29.0, "24 embedded + 5 ingested sequences");
    assert!(delta("embedwire_batch_tokens_sum") > 0.0);
    assert!(delta("embedwire_inference_seconds_sum") > 0.0, "model time recorded");
    assert!(delta("embedwire_queue_wait_seconds_count") >= 29.0);
    assert!(after.contains("\nembedwire_queue_depth "), "queue depth gauge present");
    assert_eq!(value(&after, "embedwire_index_documents "), 5.0);
    assert!(!after.contains("# EOF"), "the classic text format has no end marker");
    // Prometheus asks for OpenMetrics: there `# TYPE x counter` types the `x_total`
    // samples, and the page ends with `# EOF`.
    let openmetrics = reqwest::Client::new()
        .get(format!("{}/metrics", server.address))
        .header("accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
        .send()
        .await
        .unwrap();
    let content_type = openmetrics.headers()["content-type"].to_str().unwrap().to_string();
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    let page = openmetrics.text().await.unwrap();
    assert!(page.ends_with("\n# EOF\n"), "{page}");
    assert!(page.contains("# TYPE embedwire_embed_requests counter\nembedwire_embed_requests_total "), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_are_honoured_end_to_end() {
    let server = InProcessServer::start(ONNX).await;
    let mut client = server.client().await;
    // Long texts: far more model work than the deadline allows.
    let texts = sentences(512, 180);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut request = tonic::Request::new(embed_request(&refs));
    request.set_timeout(Duration::from_millis(30));
    let started = std::time::Instant::now();
    let error = client.embed(request).await.unwrap_err();
    // tonic's server answers an expired grpc-timeout with CANCELLED ("Timeout
    // expired"); clients that time calls themselves report DEADLINE_EXCEEDED.
    assert!(matches!(error.code(), Code::DeadlineExceeded | Code::Cancelled), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "the answer came at the deadline, not after the work");
    // The abandoned inputs never reach the model (dropped in the queue, or never
    // queued), and the server goes on.
    client.embed(embed_request(&["still here"])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let page = metrics_page(&server.address).await;
    let embedded = value(&page, "embedwire_model_sequences_total");
    assert!(embedded < 256.0, "most of the expired call's 512 inputs were not embedded ({embedded} sequences ran)");
}

/// The sessions that run a large batch as parts side by side load after the server
/// serves (they doubled its time to SERVING); /metrics says when they are loaded, and
/// from then on large batches split.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_batches_split_once_the_part_sessions_have_loaded_after_start() {
    let server = InProcessServer::start(&[ONNX[0], ONNX[1], "--batch-parts", "2"]).await;
    let mut client = server.client().await;
    common::wait_for_batch_part_sessions(&server.address, 2).await;
    let texts = sentences(16, 12);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // One batch of 16: large enough to split, and the first to split runs as parts.
    let vectors = rows(&client.embed(embed_request(&refs)).await.unwrap().into_inner());
    assert_eq!(vectors.len(), 16);
    let page = metrics_page(&server.address).await;
    assert_eq!(value(&page, "embedwire_split_batches_total"), 1.0, "{page}");
    let whole = InProcessServer::start(&[ONNX[0], ONNX[1], "--batch-parts", "1"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(value(&metrics_page(&whole.address).await, "embedwire_batch_part_sessions "), 0.0, "none to load");
}

/// Long chunks grow ONNX Runtime's arena; once the ingest is over and the model idles,
/// it gives the arena back (counted on /metrics), and answers as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_model_gives_its_memory_back_after_an_ingest_of_long_texts() {
    let server = InProcessServer::start(ONNX).await;
    let mut client = server.client().await;
    let short = ["one short sentence"];
    let before = client.embed(embed_request(&short)).await.unwrap().into_inner();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let releases = |page: &str| value(page, "embedwire_model_idle_memory_releases_total");
    assert_eq!(releases(&metrics_page(&server.address).await), 0.0, "a short text leaves nothing to give back");

    let channel = tonic::transport::Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap();
    let mut search = SearchServiceClient::new(channel);
    // Each document about 200 tokens: full-length chunks, batched several at a time.
    let documents = (0..16)
        .map(|i| {
            let text = format!("Document {i}. {}", sentences(14, 12).join(" "));
            Document { id: format!("long-{i}"), text, ..Default::default() }
        })
        .collect();
    search.ingest(IngestRequest { documents, ..Default::default() }).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let page = metrics_page(&server.address).await;
        if value(&page, "embedwire_ingested_documents_total") >= 16.0 && releases(&page) >= 1.0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no release after the ingest:\n{page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = client.embed(embed_request(&short)).await.unwrap().into_inner();
    let (before, after) = (rows(&before).remove(0), rows(&after).remove(0));
    let most = before.iter().zip(&after).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(most < 1e-5, "the same vector after the arena shrank: differs by {most}");
}
