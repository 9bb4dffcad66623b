//! EmbedStream: answers in request order, tagged by id; a bad request fails alone;
//! a client that stops reading stops the server from reading further.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{InProcessServer, ONNX, PSEUDO, rows, sentences};
use embedwire_proto::v1::{EmbedRequest, EmbedStreamRequest, embed_stream_response};
use futures::StreamExt;

fn stream_request(id: usize, request: EmbedRequest) -> EmbedStreamRequest {
    EmbedStreamRequest { request_id: format!("r{id}"), request: Some(request) }
}

/// Requests of 1 to 5 texts each; request 7 is invalid (no inputs).
fn varied_requests(count: usize) -> Vec<EmbedRequest> {
    let texts = sentences(count * 5, 8);
    (0..count)
        .map(|i| {
            let size = if i == 7 { 0 } else { 1 + i % 5 };
            EmbedRequest { inputs: texts[i * 5..i * 5 + size].to_vec(), ..Default::default() }
        })
        .collect()
}

async fn check_order_and_content(flags: &[&str], count: usize) {
    let server = InProcessServer::start(flags).await;
    let mut client = server.client().await;
    let requests = varied_requests(count);
    let outbound = futures::stream::iter(requests.clone().into_iter().enumerate().map(|(i, r)| stream_request(i, r)));
    let responses: Vec<_> = client.embed_stream(outbound).await.unwrap().into_inner().collect().await;
    assert_eq!(responses.len(), count);
    for (i, (response, request)) in responses.into_iter().zip(&requests).enumerate() {
        let response = response.expect("stream stays up");
        assert_eq!(response.request_id, format!("r{i}"));
        match response.result.unwrap() {
            embed_stream_response::Result::Response(embedded) => {
                let unary = client.embed(request.clone()).await.unwrap().into_inner();
                assert_eq!(rows(&embedded), rows(&unary), "request {i}");
            }
            embed_stream_response::Result::Error(error) => {
                assert_eq!(i, 7, "only request 7 is invalid");
                assert_eq!(error.code, tonic::Code::InvalidArgument as i32);
                assert!(error.message.contains("inputs"), "{}", error.message);
            }
        }
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn responses_come_in_request_order_on_the_pseudo_backend() {
    check_order_and_content(PSEUDO, 200).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn responses_come_in_request_order_on_the_real_model() {
    // Requests of different sizes finish in a different order inside the batcher.
    check_order_and_content(ONNX, 40).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_does_not_read_stops_the_server_reading() {
    const TOTAL: usize = 2000;
    let server = InProcessServer::start(PSEUDO).await;
    let mut client = server.client().await;
    // About 3 KB per request: the server's 1 MiB receive window holds a few hundred.
    let texts: Vec<String> = sentences(16, 30);
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = pulled.clone();
    let outbound = futures::stream::iter(0..TOTAL).map(move |i| {
        counter.fetch_add(1, Ordering::SeqCst);
        stream_request(i, EmbedRequest { inputs: texts.clone(), ..Default::default() })
    });
    let mut inbound = client.embed_stream(outbound).await.unwrap().into_inner();

    // Read nothing until the client's sends stall (no progress for half a second).
    let mut last = usize::MAX;
    while pulled.load(Ordering::SeqCst) != last {
        last = pulled.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("the client sent {last} of {TOTAL} requests before flow control stopped it");
    assert!(last < TOTAL / 2, "the client sent {last} of {TOTAL} requests although nothing was read");
    assert!(server.engine.stats().requests.load(Ordering::SeqCst) < (TOTAL / 2) as u64);

    // Reading again lets everything through, in order.
    let mut received = 0;
    while let Some(response) = inbound.next().await {
        assert_eq!(response.unwrap().request_id, format!("r{received}"));
        received += 1;
    }
    assert_eq!(received, TOTAL);
    server.stop().await.unwrap();
}
