//! RerankService over gRPC: on the default install (no cross-encoder) the embedding
//! model scores (bi-encoder), and its scores are the cosine of Embed's own vectors;
//! with --rerank-model-dir the cross-encoder scores. Options, the stream, every error.

use crate::common;

use std::time::Duration;

use common::{InProcessServer, ONNX, TempDir, embed_request, rows, venv_python};
use embedwire_proto::v1::rerank_service_client::RerankServiceClient;
use embedwire_proto::v1::{
    InfoRequest, RerankRequest, RerankResponse, RerankStreamRequest, TruncationDirection, rerank_stream_response,
};
use tonic::Code;
use tonic::transport::Channel;

const QUERY: &str = "What is the capital of France?";
const TEXTS: [&str; 4] = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital and most populous city of France.",
    "Berlin is the capital of Germany.",
    "How do I reset my password?",
];

fn request(query: &str, texts: &[&str]) -> RerankRequest {
    RerankRequest { query: query.into(), texts: texts.iter().map(|t| t.to_string()).collect(), ..Default::default() }
}

async fn rerank_client(server: &InProcessServer) -> RerankServiceClient<Channel> {
    RerankServiceClient::new(Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap())
}

fn order(response: &RerankResponse) -> Vec<u32> {
    response.ranks.iter().map(|r| r.index).collect()
}

/// A text of about `words` words, far over the model's 256 tokens for 2000.
fn long_text(words: usize) -> String {
    (0..words).map(|i| format!("word{}", i % 50)).collect::<Vec<_>>().join(" ")
}

#[tokio::test(flavor = "multi_thread")]
async fn bi_encoder_rerank_scores_are_the_cosine_of_embed_vectors() {
    let server = InProcessServer::start(&[ONNX, &["--max-rerank-texts", "6"]].concat()).await;
    let mut embed = server.client().await;
    let mut client = rerank_client(&server).await;

    let info = embed.info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.rerank_scorer, "bi-encoder:sentence-transformers/all-MiniLM-L6-v2");
    assert_eq!(info.limits.unwrap().max_rerank_texts, 6);

    let response = client.rerank(request(QUERY, &TEXTS)).await.unwrap();
    for header in ["x-embedwire-queue-ms", "x-embedwire-inference-ms", "x-embedwire-total-ms"] {
        assert!(response.metadata().get(header).is_some(), "{header}");
    }
    let response = response.into_inner();
    assert_eq!(response.scorer, "bi-encoder:sentence-transformers/all-MiniLM-L6-v2");
    assert_eq!(response.model, "sentence-transformers/all-MiniLM-L6-v2");
    assert_eq!(response.ranks.len(), 4);
    assert_eq!(response.ranks[0].index, 1, "Paris answers the query: {:?}", response.ranks);
    assert!(response.ranks.windows(2).all(|w| w[0].score >= w[1].score), "best first");
    assert!(response.ranks.iter().all(|r| r.text.is_none()), "no text unless asked");

    // Each score is the cosine of the query's and the text's Embed vectors.
    let mut inputs = vec![QUERY];
    inputs.extend(TEXTS);
    let vectors = rows(&embed.embed(embed_request(&inputs)).await.unwrap().into_inner());
    for rank in &response.ranks {
        let cosine: f32 = vectors[0].iter().zip(&vectors[rank.index as usize + 1]).map(|(a, b)| a * b).sum();
        assert!((rank.score - cosine).abs() < 1e-5, "text {}: {} vs cosine {cosine}", rank.index, rank.score);
    }
    let metadata = response.metadata.unwrap();
    let usage = response.usage.unwrap();
    assert!(metadata.compute_tokens >= 20 && usage.total_tokens == metadata.compute_tokens);
    assert_eq!(metadata.compute_chars as usize, QUERY.len() * 4 + TEXTS.iter().map(|t| t.len()).sum::<usize>());
    assert!(metadata.total_time_ns >= metadata.inference_time_ns && metadata.inference_time_ns > 0);

    // top_n, return_text; raw_scores changes nothing for a cosine.
    let top = client
        .rerank(RerankRequest { top_n: Some(2), return_text: true, ..request(QUERY, &TEXTS) })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(order(&top), order(&response)[..2]);
    for rank in &top.ranks {
        assert_eq!(rank.text.as_deref(), Some(TEXTS[rank.index as usize]));
    }
    let raw = client.rerank(RerankRequest { raw_scores: true, ..request(QUERY, &TEXTS) }).await.unwrap().into_inner();
    assert_eq!(order(&raw), order(&response));

    // Truncation: on by default; off, an over-long text is refused by name; cutting
    // from the left keeps another part of the text, so it scores differently.
    let long = long_text(2000);
    let with_long = [TEXTS[1], long.as_str()];
    let cut = client.rerank(request(QUERY, &with_long)).await.unwrap().into_inner();
    assert_eq!(cut.ranks.len(), 2);
    let refused =
        client.rerank(RerankRequest { truncate: Some(false), ..request(QUERY, &with_long) }).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().starts_with("texts[1]: "), "{}", refused.message());
    let long_query =
        client.rerank(RerankRequest { truncate: Some(false), ..request(&long, &TEXTS[..1]) }).await.unwrap_err();
    assert!(long_query.message().starts_with("query: "), "{}", long_query.message());
    let mixed = format!("{} {}", long_text(400), "Paris is the capital and most populous city of France.");
    let right = client.rerank(request(QUERY, &[&mixed])).await.unwrap().into_inner().ranks[0].score;
    let left = client
        .rerank(RerankRequest { truncation_direction: TruncationDirection::Left as i32, ..request(QUERY, &[&mixed]) })
        .await
        .unwrap()
        .into_inner()
        .ranks[0]
        .score;
    assert!(left > right + 0.01, "the kept end mentions Paris: left {left}, right {right}");

    // Every error names its field.
    let cases: Vec<(RerankRequest, Code, &str)> = vec![
        (request(" ", &TEXTS), Code::InvalidArgument, "query: "),
        (request(QUERY, &[]), Code::InvalidArgument, "texts: "),
        (request(QUERY, &["fine", ""]), Code::InvalidArgument, "texts[1]: "),
        (request(QUERY, &["a", "b", "c", "d", "e", "f", "g"]), Code::OutOfRange, "texts: "),
        (
            RerankRequest { truncation_direction: 9, ..request(QUERY, &TEXTS) },
            Code::InvalidArgument,
            "truncation_direction: ",
        ),
    ];
    for (bad, code, prefix) in cases {
        let status = client.rerank(bad).await.unwrap_err();
        assert_eq!(status.code(), code, "{}", status.message());
        assert!(status.message().starts_with(prefix), "{}", status.message());
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn rerank_stream_answers_in_order_with_errors_in_band() {
    let server = InProcessServer::start(ONNX).await;
    let mut client = rerank_client(&server).await;
    let messages = vec![
        RerankStreamRequest { request_id: "a".into(), request: Some(request(QUERY, &TEXTS)) },
        RerankStreamRequest { request_id: "b".into(), request: Some(request(QUERY, &[])) },
        RerankStreamRequest { request_id: "c".into(), request: Some(request("a forgotten password", &TEXTS)) },
    ];
    let mut answers = client.rerank_stream(futures::stream::iter(messages)).await.unwrap().into_inner();
    let mut seen = Vec::new();
    while let Some(answer) = answers.message().await.unwrap() {
        match answer.result.unwrap() {
            rerank_stream_response::Result::Response(response) => seen.push((answer.request_id, Some(response))),
            rerank_stream_response::Result::Error(error) => {
                assert_eq!(error.code, Code::InvalidArgument as i32);
                assert!(error.message.starts_with("texts: "), "{}", error.message);
                seen.push((answer.request_id, None));
            }
        }
    }
    let ids: Vec<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(seen[0].1.as_ref().unwrap().ranks[0].index, 1);
    assert!(seen[1].1.is_none());
    assert_eq!(seen[2].1.as_ref().unwrap().ranks[0].index, 3, "the password text answers the second query");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_calls_past_the_in_flight_bound_are_resource_exhausted() {
    let server =
        InProcessServer::start(&[ONNX, &["--max-in-flight-inputs", "16", "--max-inputs-per-request", "16"]].concat())
            .await;
    let client = rerank_client(&server).await;
    let texts: Vec<String> = (0..10).map(|i| format!("candidate passage number {i} about the weather")).collect();
    let calls = (0..8).map(|_| {
        let mut client = client.clone();
        let request = RerankRequest { query: QUERY.into(), texts: texts.clone(), ..Default::default() };
        async move { client.rerank(request).await }
    });
    let results = futures::future::join_all(calls).await;
    let refused: Vec<&tonic::Status> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(results.iter().any(|r| r.is_ok()), "some calls are served");
    assert!(!refused.is_empty(), "8 calls of 10 pairs cannot all fit 16 in flight");
    for status in refused {
        assert_eq!(status.code(), Code::ResourceExhausted, "{}", status.message());
    }
    // The server keeps serving once the burst is over.
    let mut client = client;
    assert!(client.rerank(request(QUERY, &TEXTS)).await.is_ok());
    server.stop().await.unwrap();
}

/// A tiny random cross-encoder built by scripts/model/make_tiny_cross_encoder.py in a
/// fresh directory named after `name`.
fn tiny_cross_encoder(name: &str) -> TempDir {
    let model = TempDir::new(name);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/model/make_tiny_cross_encoder.py");
    let output = std::process::Command::new(venv_python()).arg(&script).arg(&model.0).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    model
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_cross_encoder_scores_are_probabilities_or_logits() {
    let model = tiny_cross_encoder("rerank-rpc-model");
    let model_dir = model.flag();
    let flags = [ONNX, &["--rerank-model-dir", &model_dir, "--rerank-model-id", "tiny-ce"]].concat();
    let server = InProcessServer::start(&flags).await;
    let mut embed = server.client().await;
    assert_eq!(embed.info(InfoRequest {}).await.unwrap().into_inner().rerank_scorer, "cross-encoder:tiny-ce");
    let mut client = rerank_client(&server).await;
    let calibrated = client.rerank(request(QUERY, &TEXTS)).await.unwrap().into_inner();
    assert_eq!(calibrated.scorer, "cross-encoder:tiny-ce");
    let raw = client.rerank(RerankRequest { raw_scores: true, ..request(QUERY, &TEXTS) }).await.unwrap().into_inner();
    assert_eq!(order(&raw), order(&calibrated));
    for (p, logit) in calibrated.ranks.iter().zip(&raw.ranks) {
        assert!((0.0..=1.0).contains(&p.score));
        assert!((p.score - 1.0 / (1.0 + (-logit.score).exp())).abs() < 1e-6);
    }
    assert!(raw.ranks.iter().any(|r| !(0.0..=1.0).contains(&r.score)), "logits are not probabilities: {raw:?}");
    // The tiny model takes 64 tokens a pair: truncation off refuses a longer one.
    let long = long_text(100);
    let status =
        client.rerank(RerankRequest { truncate: Some(false), ..request(QUERY, &[TEXTS[0], &long]) }).await.unwrap_err();
    assert!(status.code() == Code::InvalidArgument && status.message().starts_with("texts[1]: "), "{status:?}");
    // A deadline shorter than the call is honoured: the caller gets DEADLINE_EXCEEDED
    // or CANCELLED, and the server goes on serving.
    let mut hurried = tonic::Request::new(RerankRequest {
        texts: (0..200).map(|i| format!("{} {i}", long_text(40))).collect(),
        ..request(QUERY, &[])
    });
    hurried.set_timeout(Duration::from_millis(1));
    let late = client.rerank(hurried).await.unwrap_err();
    assert!(matches!(late.code(), Code::DeadlineExceeded | Code::Cancelled), "{late:?}");
    assert!(client.rerank(request(QUERY, &TEXTS)).await.is_ok());

    // /metrics: calls, pairs, the cross-encoder's batches and the calls' latency.
    let page = reqwest::get(format!("{}/metrics", server.address)).await.unwrap().text().await.unwrap();
    let value = |name: &str| -> f64 {
        let line = page.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '));
        line.unwrap_or_else(|| panic!("{name} missing:\n{page}")).rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("embedwire_rerank_requests_total") >= 4.0);
    assert!(value("embedwire_rerank_pairs_total") >= 3.0 * TEXTS.len() as f64);
    assert!(value("embedwire_rerank_batches_total") >= 3.0);
    assert!(value("embedwire_rerank_batch_size_count") >= 3.0 && value("embedwire_rerank_batch_size_sum") >= 12.0);
    assert!(value("embedwire_rerank_request_seconds_count") >= 3.0);
    assert!(value("embedwire_rerank_inference_seconds_count") >= 3.0);
    assert!(page.contains("embedwire_rerank_pairs_per_request_bucket"));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_loop_client_of_32_callers_is_never_refused_by_the_cross_encoder() {
    let model = tiny_cross_encoder("rerank-closed-loop-model");
    let server = InProcessServer::start(&[ONNX, &["--rerank-model-dir", &model.flag()]].concat()).await;
    let client = rerank_client(&server).await;
    // 32 callers, each waiting for its answer before the next call: at most 32 calls
    // in flight, under the default bound of 64. The old time-based default (8 x one
    // 20-pair call's model time queued ahead) refused such a client on its first burst.
    let texts: Vec<String> = (0..20).map(|i| format!("{} {i}", long_text(40))).collect();
    let callers = (0..32).map(|_| {
        let (mut client, texts) = (client.clone(), texts.clone());
        async move {
            for _ in 0..3 {
                let call = RerankRequest { query: QUERY.into(), texts: texts.clone(), ..Default::default() };
                client.rerank(call).await?;
            }
            Ok::<_, tonic::Status>(())
        }
    });
    for result in futures::future::join_all(callers).await {
        result.unwrap();
    }
    let page = reqwest::get(format!("{}/metrics", server.address)).await.unwrap().text().await.unwrap();
    assert!(page.contains("embedwire_rerank_admission_max_calls 64"), "{page}");
    assert!(page.contains("embedwire_rerank_interactive_calls 0"), "answered calls leave the count: {page}");
    server.stop().await.unwrap();
}
