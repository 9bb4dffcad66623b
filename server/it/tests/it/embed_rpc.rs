//! Embed's options, every dtype, Tokenize and Info, against the real model and the
//! pseudo backend.

use crate::common;

use common::{InProcessServer, ONNX, PSEUDO, embed_request, max_abs_diff, rows};
use embedwire_proto::v1::{EmbedRequest, EmbeddingDtype, InfoRequest, TokenizeRequest};
use embedwire_proto::vectors;

fn norm(row: &[f32]) -> f32 {
    row.iter().map(|v| v * v).sum::<f32>().sqrt()
}

#[tokio::test(flavor = "multi_thread")]
async fn options_dtypes_and_usage_on_the_real_model() {
    let server = InProcessServer::start(ONNX).await;
    let mut client = server.client().await;
    let texts = ["The cat sits outside", "A man is playing guitar", "embeddings travel as bytes"];

    let normalized = client.embed(embed_request(&texts)).await.unwrap().into_inner();
    assert_eq!((normalized.dim, normalized.count), (384, 3));
    assert_eq!(normalized.dtype, EmbeddingDtype::Float32 as i32);
    assert_eq!(normalized.embeddings.len(), 3 * 384 * 4);
    assert_eq!(normalized.model, "sentence-transformers/all-MiniLM-L6-v2");
    let usage = normalized.usage.unwrap();
    assert_eq!(usage.prompt_tokens, normalized.token_counts.iter().sum::<u32>());
    assert!(normalized.token_counts.iter().all(|&c| c >= 5));
    let unit_rows = rows(&normalized);
    for row in &unit_rows {
        assert!((norm(row) - 1.0).abs() < 1e-5);
    }

    // normalize=false: same direction, not unit length.
    let raw =
        client.embed(EmbedRequest { normalize: Some(false), ..embed_request(&texts) }).await.unwrap().into_inner();
    for (raw_row, unit_row) in rows(&raw).iter().zip(&unit_rows) {
        let n = norm(raw_row);
        assert!((n - 1.0).abs() > 1e-3, "unnormalized norm {n}");
        let rescaled: Vec<f32> = raw_row.iter().map(|v| v / n).collect();
        assert!(max_abs_diff(&rescaled, unit_row) < 1e-5);
    }

    // Compact dtypes decode close to float32; their sizes are as documented.
    for (dtype, tolerance) in
        [(EmbeddingDtype::Float16, 1e-3), (EmbeddingDtype::Int8, 0.01), (EmbeddingDtype::Float32List, 0.0)]
    {
        let response =
            client.embed(EmbedRequest { dtype: dtype as i32, ..embed_request(&texts) }).await.unwrap().into_inner();
        assert_eq!(response.dtype, dtype as i32);
        assert_eq!(response.embeddings.len(), 3 * vectors::bytes_per_row(dtype, 384));
        for (row, unit_row) in rows(&response).iter().zip(&unit_rows) {
            assert!(max_abs_diff(row, unit_row) <= tolerance, "{dtype:?}");
        }
    }
    let bits = client
        .embed(EmbedRequest { dtype: EmbeddingDtype::Ubinary as i32, ..embed_request(&texts) })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(bits.embeddings.len(), 3 * 48);
    let first_byte =
        unit_rows[0][..8].iter().enumerate().fold(0u8, |b, (i, v)| if *v > 0.0 { b | (0x80 >> i) } else { b });
    assert_eq!(bits.embeddings[0], first_byte);

    // dimensions: a renormalized prefix.
    let short =
        client.embed(EmbedRequest { dimensions: Some(64), ..embed_request(&texts) }).await.unwrap().into_inner();
    assert_eq!(short.dim, 64);
    for (row, unit_row) in rows(&short).iter().zip(&unit_rows) {
        assert!((norm(row) - 1.0).abs() < 1e-5);
        let prefix_norm = norm(&unit_row[..64]);
        let expected: Vec<f32> = unit_row[..64].iter().map(|v| v / prefix_norm).collect();
        assert!(max_abs_diff(row, &expected) < 1e-5);
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn tokenize_reports_truncation_and_info_describes_the_model() {
    let server = InProcessServer::start(ONNX).await;
    let mut client = server.client().await;
    let long_text = "word ".repeat(400);
    let tokenized = client
        .tokenize(TokenizeRequest { inputs: vec!["hello world".into(), long_text.clone()], truncate: None })
        .await
        .unwrap()
        .into_inner()
        .tokenized;
    assert_eq!(tokenized[0].ids, vec![101, 7592, 2088, 102]);
    assert!(!tokenized[0].truncated);
    assert_eq!((tokenized[1].count, tokenized[1].truncated, tokenized[1].untruncated_count), (256, true, 402));

    let info = client.info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.model, "sentence-transformers/all-MiniLM-L6-v2");
    assert_eq!(
        (info.dim, info.max_input_tokens, info.pooling.as_str(), info.backend.as_str()),
        (384, 256, "mean", "onnx")
    );
    assert_eq!(info.dtypes.len(), 5);
    let limits = info.limits.unwrap();
    assert_eq!(limits.max_inputs_per_request, 1024);
    assert_eq!(limits.max_request_bytes, 4 << 20);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn pseudo_backend_gives_deterministic_unit_vectors() {
    let server = InProcessServer::start(&[PSEUDO, &["--pseudo-dim", "16"]].concat()).await;
    let mut client = server.client().await;
    let first = rows(&client.embed(embed_request(&["alpha", "beta", "alpha"])).await.unwrap().into_inner());
    let again = rows(&client.embed(embed_request(&["alpha"])).await.unwrap().into_inner());
    assert_eq!(first[0].len(), 16);
    assert_eq!(first[0], first[2]);
    assert_eq!(first[0], again[0]);
    assert_ne!(first[0], first[1]);
    assert!(first.iter().all(|row| (norm(row) - 1.0).abs() < 1e-5));
    let info = client.info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!((info.backend.as_str(), info.dim), ("pseudo", 16));
    server.stop().await.unwrap();
}

/// Unary Embed is framed by hand (the vectors are not copied into tonic's buffer): its
/// answers must be what tonic's would be, its size limit must still hold, and what it
/// leaves to tonic (compressed requests) must still reach tonic.
#[tokio::test(flavor = "multi_thread")]
async fn hand_framed_embed_answers_hold_the_limits_and_leave_the_rest_to_tonic() {
    let args = [PSEUDO, &["--pseudo-dim", "64", "--max-response-bytes", "4096"]].concat();
    let server = InProcessServer::start(&args).await;
    let mut client = server.client().await;

    // 10 x 64 f32 = 2560 bytes of vectors: within the limit, and every field arrives.
    let texts: Vec<String> = (0..10).map(|i| format!("text number {i}")).collect();
    let request = EmbedRequest { inputs: texts.clone(), ..Default::default() };
    let response = client.embed(request).await.unwrap();
    assert!(response.metadata().get("x-embedwire-total-ms").is_some(), "timing metadata is kept");
    let reply = response.into_inner();
    assert_eq!((reply.count, reply.dim, reply.embeddings.len()), (10, 64, 10 * 64 * 4));
    assert_eq!(reply.token_counts.len(), 10);
    assert!(reply.usage.is_some_and(|usage| usage.total_tokens > 0));
    assert!(!reply.model.is_empty());
    let one = client.embed(embed_request(&["text number 3"])).await.unwrap().into_inner();
    assert_eq!(rows(&reply)[3], rows(&one)[0], "a row is the same alone and in a batch");

    // 20 x 64 f32 = 5120 bytes: over --max-response-bytes, refused naming the flag.
    let texts: Vec<String> = (0..20).map(|i| format!("text number {i}")).collect();
    let status = client.embed(EmbedRequest { inputs: texts, ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("--max-response-bytes"), "{}", status.message());

    // A gzip request goes to tonic's generated service, which does not accept gzip.
    let mut gzip = client.clone().send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let status = gzip.embed(embed_request(&["hello"])).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");

    // And the server still answers.
    assert_eq!(client.embed(embed_request(&["again"])).await.unwrap().into_inner().count, 1);
    server.stop().await.unwrap();
}

/// A hand-framed answer without vector bytes (FLOAT32_LIST) once ended with an empty
/// DATA frame; hyper's h2 client closes a connection after 100 of those (GOAWAY
/// ENHANCE_YOUR_CALM, reported as RESOURCE_EXHAUSTED), so the 101st call on one
/// connection failed.
#[tokio::test(flavor = "multi_thread")]
async fn many_float32_list_answers_share_one_connection() {
    let server = InProcessServer::start(&[PSEUDO, &["--pseudo-dim", "8"]].concat()).await;
    let mut client = server.client().await;
    for call in 0..250 {
        let request = EmbedRequest { dtype: EmbeddingDtype::Float32List as i32, ..embed_request(&["a", "b"]) };
        let reply = client.embed(request).await.unwrap_or_else(|status| panic!("call {call}: {status:?}"));
        assert_eq!((reply.get_ref().values.len(), reply.get_ref().embeddings.len()), (16, 0));
    }
    server.stop().await.unwrap();
}
