//! Every kind of bad request gets a clear status naming the problem, and the server
//! keeps serving afterwards.

use crate::common;

use common::{InProcessServer, PSEUDO, embed_request};
use embedwire_proto::v1::EmbedRequest;
use tonic::Code;

/// Sends `request`, expects `code` with a message containing `mentions`, then checks
/// that a good request still works.
async fn expect_rejected(server: &InProcessServer, request: EmbedRequest, code: Code, mentions: &str) {
    let mut client = server.client().await;
    let status = client.embed(request).await.expect_err("bad input must fail");
    assert_eq!(status.code(), code, "{}", status.message());
    assert!(status.message().contains(mentions), "message {:?} should mention {mentions:?}", status.message());
    let ok = client.embed(embed_request(&["still serving"])).await.expect("server keeps serving");
    assert_eq!(ok.into_inner().count, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_inputs_are_invalid_argument_naming_the_field() {
    let flags = [PSEUDO, &["--max-inputs-per-request", "8", "--max-input-chars", "1000"]].concat();
    let server = InProcessServer::start(&flags).await;
    expect_rejected(&server, embed_request(&[]), Code::InvalidArgument, "inputs: must contain at least one").await;
    expect_rejected(&server, embed_request(&["fine", ""]), Code::InvalidArgument, "inputs[1]: is empty").await;
    expect_rejected(&server, embed_request(&["fine", "  \n"]), Code::InvalidArgument, "inputs[1]: is empty").await;
    expect_rejected(
        &server,
        EmbedRequest { dtype: 17, ..embed_request(&["x"]) },
        Code::InvalidArgument,
        "dtype: unknown value 17",
    )
    .await;
    let nine = ["t"; 9];
    expect_rejected(&server, embed_request(&nine), Code::InvalidArgument, "limit of 8 per request").await;
    let huge = "x".repeat(1001);
    expect_rejected(
        &server,
        embed_request(&["ok", &huge]),
        Code::InvalidArgument,
        "inputs[1]: is longer than the limit of 1000",
    )
    .await;
    let long_text = "w ".repeat(300); // 300 tokens + [CLS] + [SEP], under the character limit
    expect_rejected(
        &server,
        EmbedRequest { truncate: Some(false), ..embed_request(&["short", &long_text]) },
        Code::InvalidArgument,
        "inputs[1]: has 302 tokens, more than the model's limit of 256",
    )
    .await;
    expect_rejected(
        &server,
        EmbedRequest { dimensions: Some(400), ..embed_request(&["x"]) },
        Code::InvalidArgument,
        "dimensions",
    )
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_message_is_resource_exhausted() {
    let server = InProcessServer::start(&[PSEUDO, &["--max-request-bytes", "10000"]].concat()).await;
    let big = "y".repeat(20_000);
    expect_rejected(&server, embed_request(&[&big]), Code::ResourceExhausted, "too large").await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn over_long_input_is_truncated_by_default() {
    let server = InProcessServer::start(PSEUDO).await;
    let long_text = "word ".repeat(300);
    let response = server.client().await.embed(embed_request(&[&long_text])).await.unwrap().into_inner();
    assert_eq!(response.token_counts, vec![256]);
    server.stop().await.unwrap();
}
