//! The library's Embed calls against a real server on the pseudo backend: bulk
//! order, zero-copy rows against the decoded bytes, options, and the server's
//! error messages.

use crate::common;

use common::{PSEUDO, address, client, start, texts};
use embedwire_client::{BulkOptions, Code, EmbedOptions, Error, WireDtype};
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::{EmbedRequest, EmbeddingDtype};

#[tokio::test]
async fn embed_many_returns_10k_vectors_in_input_order() {
    let server = start(PSEUDO).await;
    let client = client(&[&server]).await;
    let texts = texts(10_000);

    // Small batches, many in flight: batches finish out of order.
    let bulk = BulkOptions { batch_size: 37, max_concurrent_requests: 16 };
    let many = client.embed_many(&texts, bulk, &EmbedOptions::default()).await.unwrap();
    assert_eq!((many.len(), many.dim()), (10_000, 384));
    assert_eq!(many.as_slice().len(), 10_000 * 384, "one contiguous buffer");

    // The same texts in other, sequential batches: the pseudo model is deterministic
    // per text, so every row must match exactly.
    for (chunk_index, chunk) in texts.chunks(1000).enumerate() {
        let sequential = client.embed(chunk.iter().cloned()).await.unwrap();
        for (offset, row) in sequential.rows().enumerate() {
            let index = chunk_index * 1000 + offset;
            assert_eq!(many.row(index), row, "row {index}");
        }
    }
    // And a few one by one.
    for index in [0, 1, 36, 37, 4999, 9999] {
        let single = client.embed([texts[index].as_str()]).await.unwrap();
        assert_eq!(many.row(index), single.row(0), "row {index}");
    }
    // The check would catch a shuffle: neighbouring rows differ.
    assert_ne!(many.row(0), many.row(1));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn zero_copy_rows_equal_the_decoded_response_bytes() {
    let server = start(PSEUDO).await;
    let client = client(&[&server]).await;
    let mut raw = EmbedServiceClient::connect(address(&server)).await.unwrap();

    let mut zero_copy = 0;
    // Different counts move the bytes field to different offsets in the message.
    for count in 1..=40 {
        let inputs = texts(count);
        let embeddings = client.embed(inputs.iter().cloned()).await.unwrap();
        let response = raw.embed(EmbedRequest { inputs, ..Default::default() }).await.unwrap().into_inner();
        let decoded =
            embedwire_proto::vectors::decode_rows(&response.embeddings, &[], &[], count, 384, EmbeddingDtype::Float32)
                .unwrap();
        assert_eq!(embeddings.as_slice(), &decoded[..], "count {count}");
        assert_eq!(embeddings.rows().len(), count);
        for (i, row) in embeddings.rows().enumerate() {
            assert_eq!(row, &decoded[i * 384..(i + 1) * 384]);
            assert_eq!(row, embeddings.row(i));
        }
        let view = embeddings.view();
        assert_eq!(view.shape(), [count, 384]);
        assert_eq!(view.row(count - 1).to_vec(), embeddings.row(count - 1));
        zero_copy += usize::from(embeddings.is_zero_copy());
    }
    // Alignment depends on where the field lands in the receive buffer, so not every
    // response can be read in place; but some must be, or the zero-copy path is dead.
    assert!(zero_copy > 0, "no response was read in place out of 40");
    eprintln!("{zero_copy} of 40 responses read in place");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn options_reach_the_server() {
    let server = start(PSEUDO).await;
    let client = client(&[&server]).await;
    let inputs = ["the quick brown fox", "jumps over the lazy dog"];
    let full = client.embed(inputs).await.unwrap();
    let norm = |row: &[f32]| row.iter().map(|v| v * v).sum::<f32>().sqrt();
    assert!((norm(full.row(0)) - 1.0).abs() < 1e-4);

    let short = EmbedOptions { dimensions: Some(64), ..Default::default() };
    let short = client.embed_with(inputs, &short).await.unwrap();
    assert_eq!(short.dim(), 64);
    assert!((norm(short.row(1)) - 1.0).abs() < 1e-4, "renormalized after cutting");

    for dtype in [WireDtype::Int8, WireDtype::Float16, WireDtype::Float32List] {
        let options = EmbedOptions { dtype, ..Default::default() };
        let compact = client.embed_with(inputs, &options).await.unwrap();
        assert!(!compact.is_zero_copy(), "{dtype:?} is decoded");
        for (a, b) in compact.as_slice().iter().zip(full.as_slice()) {
            assert!((a - b).abs() < 0.01, "{dtype:?}: {a} vs {b}");
        }
    }
    // Options apply to every batch of embed_many.
    let cut = EmbedOptions { dimensions: Some(32), ..Default::default() };
    let one_per_call = BulkOptions { batch_size: 1, max_concurrent_requests: 2 };
    let many = client.embed_many(&inputs, one_per_call, &cut).await.unwrap();
    assert_eq!((many.len(), many.dim()), (2, 32));
    assert_eq!(many.row(1), client.embed_with(inputs, &cut).await.unwrap().row(1));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_bad_input_surfaces_the_servers_message_with_the_callers_index() {
    let server = start(PSEUDO).await;
    let client = client(&[&server]).await;

    let error = client.embed(["fine", ""]).await.unwrap_err();
    assert!(matches!(error, Error::Status { code: Code::InvalidArgument, .. }), "{error:?}");
    assert_eq!(error.to_string(), "INVALID_ARGUMENT: inputs[1]: is empty");

    let mut inputs = texts(100);
    inputs[70] = String::new();
    let bulk = BulkOptions { batch_size: 32, max_concurrent_requests: 4 };
    let error = client.embed_many(&inputs, bulk, &EmbedOptions::default()).await.unwrap_err();
    assert_eq!(error.to_string(), "INVALID_ARGUMENT: inputs[70]: is empty", "index in the whole input, not the batch");

    let none: [&str; 0] = [];
    assert!(client.embed_many(&none, bulk, &EmbedOptions::default()).await.unwrap().is_empty());
    let zero = BulkOptions { batch_size: 0, max_concurrent_requests: 1 };
    assert!(matches!(client.embed_many(&inputs, zero, &EmbedOptions::default()).await, Err(Error::InvalidRequest(_))));
    server.stop().await.unwrap();
}
