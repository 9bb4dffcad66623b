//! The served model matches sentence-transformers: identical token ids and vectors
//! within 1e-5 per component for every reference text, alone and batched together
//! (which exercises padding to the longest text of a batch and masked pooling, and a
//! batch run as parts side by side on sessions sharing the weights).

use crate::common;

use common::{InProcessServer, ONNX, embed_request, max_abs_diff, reference_items, rows};
use embedwire_proto::v1::TokenizeRequest;

const TOLERANCE: f32 = 1e-5;

#[tokio::test(flavor = "multi_thread")]
async fn tokenization_and_embeddings_match_sentence_transformers() {
    // 32 concurrent calls at once on 2 cores wait longer than the default (derived)
    // queue-time bound; this test is about the vectors, not admission.
    // Two parts per large batch (the default on 2 cores), said so: the parts' sessions,
    // which share the whole model's weights, must give the same vectors.
    let server = InProcessServer::start(&[ONNX, &["--max-queue-ms", "0", "--batch-parts", "2"]].concat()).await;
    let mut client = server.client().await;
    // The parts' sessions load after SERVING.
    common::wait_for_batch_part_sessions(&server.address, 2).await;
    let items = reference_items();
    assert_eq!(items.len(), 32);
    let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();

    let tokenized = client
        .tokenize(TokenizeRequest { inputs: texts.iter().map(|t| t.to_string()).collect(), truncate: None })
        .await
        .unwrap()
        .into_inner()
        .tokenized;
    for (item, tokens) in items.iter().zip(&tokenized) {
        assert_eq!(tokens.ids, item.input_ids, "token ids of {:?}", item.text);
    }
    assert!(tokenized.iter().any(|t| t.truncated), "the reference has texts past 256 tokens");

    // All 32 in one call: they share batches padded to the longest.
    let batched = client.embed(embed_request(&texts)).await.unwrap().into_inner();
    assert_eq!(batched.token_counts, items.iter().map(|i| i.input_ids.len() as u32).collect::<Vec<_>>());
    for (item, row) in items.iter().zip(rows(&batched)) {
        let diff = max_abs_diff(&row, &item.embedding);
        assert!(diff <= TOLERANCE, "batched {:?}: max abs diff {diff}", item.text);
    }
    let metrics = reqwest::get(format!("{}/metrics", server.address)).await.unwrap().text().await.unwrap();
    let split = metrics.lines().find(|l| l.starts_with("embedwire_split_batches")).and_then(|l| l.rsplit(' ').next());
    assert!(split.is_some_and(|n| n.parse::<f64>().unwrap() >= 1.0), "no batch of the 32 ran as parts: {split:?}");

    // Each alone, concurrently: the batcher mixes them with each other instead.
    let singles = futures::future::join_all(items.iter().map(|item| {
        let mut client = client.clone();
        async move { client.embed(embed_request(&[&item.text])).await.unwrap().into_inner() }
    }))
    .await;
    for (item, response) in items.iter().zip(&singles) {
        let diff = max_abs_diff(&rows(response)[0], &item.embedding);
        assert!(diff <= TOLERANCE, "single {:?}: max abs diff {diff}", item.text);
    }
    server.stop().await.unwrap();
}
