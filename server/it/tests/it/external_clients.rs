//! Real clients other than tonic against the real binary on the default model:
//! grpcurl through server reflection (no .proto file at hand) and a gRPC-web call
//! over HTTP/1.1, as a browser would make it.

use crate::common;

use std::path::PathBuf;

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use bytes::Bytes;
use common::{ServerProcess, embed_request, wait_serving};
use embedwire_proto::v1::EmbedResponse;
use http_body_util::{BodyExt, Full};
use prost::Message;

/// grpcurl as installed by `make setup` (scripts/setup-tools.sh), or from PATH.
fn grpcurl() -> PathBuf {
    let installed = common::cache_dir().join("bin/grpcurl");
    if installed.exists() { installed } else { PathBuf::from("grpcurl") }
}

fn run_grpcurl(args: &[&str]) -> String {
    let output =
        std::process::Command::new(grpcurl()).args(args).output().expect("grpcurl is installed by `make setup`");
    assert!(output.status.success(), "grpcurl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn grpcurl_lists_describes_and_calls_every_rpc() {
    let server = ServerProcess::spawn(&[]).await;
    wait_serving(&server.address).await;
    let host = server.address.trim_start_matches("http://").to_string();

    let services = run_grpcurl(&["-plaintext", &host, "list"]);
    for service in [
        "embedwire.v1.EmbedService",
        "embedwire.v1.RerankService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(services.contains(service), "{services}");
    }
    let described = run_grpcurl(&["-plaintext", &host, "describe", "embedwire.v1.EmbedRequest"]);
    assert!(described.contains("optional bool normalize"), "{described}");

    let embedded = run_grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"inputs": ["This is an example sentence"]}"#,
        &host,
        "embedwire.v1.EmbedService/Embed",
    ]);
    let json: serde_json::Value = serde_json::from_str(&embedded).unwrap();
    assert_eq!(json["dim"], 384);
    let bytes = BASE64_STANDARD.decode(json["embeddings"].as_str().unwrap()).unwrap();
    let first = f32::from_le_bytes(bytes[..4].try_into().unwrap());
    let reference = common::reference_items();
    assert!((first - reference[0].embedding[0]).abs() < 1e-5, "first value {first}");

    let tokenized = run_grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"inputs": ["hello world"]}"#,
        &host,
        "embedwire.v1.EmbedService/Tokenize",
    ]);
    assert!(tokenized.contains("7592"), "{tokenized}");
    let info = run_grpcurl(&["-plaintext", &host, "embedwire.v1.EmbedService/Info"]);
    assert!(info.contains("sentence-transformers/all-MiniLM-L6-v2"), "{info}");
    let streamed = run_grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"request_id": "a", "request": {"inputs": ["one"]}} {"request_id": "b", "request": {"inputs": ["two"]}}"#,
        &host,
        "embedwire.v1.EmbedService/EmbedStream",
    ]);
    let a = streamed.find("\"requestId\": \"a\"").expect("a answered");
    let b = streamed.find("\"requestId\": \"b\"").expect("b answered");
    assert!(a < b, "in order: {streamed}");
    let reranked = run_grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"query": "What is the capital of France?", "texts": ["Bread needs yeast.", "Paris is the capital of France."], "top_n": 1, "return_text": true}"#,
        &host,
        "embedwire.v1.RerankService/Rerank",
    ]);
    let json: serde_json::Value = serde_json::from_str(&reranked).unwrap();
    assert_eq!(json["ranks"].as_array().unwrap().len(), 1, "{reranked}");
    assert_eq!(json["ranks"][0]["index"], 1, "{reranked}");
    assert_eq!(json["ranks"][0]["text"], "Paris is the capital of France.");
    assert_eq!(json["scorer"], "bi-encoder:sentence-transformers/all-MiniLM-L6-v2");
    let health = run_grpcurl(&["-plaintext", &host, "grpc.health.v1.Health/Check"]);
    assert!(health.contains("SERVING"), "{health}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_web_over_http1_returns_the_same_bytes_as_grpc() {
    let server = ServerProcess::spawn(&["--backend", "pseudo"]).await;
    wait_serving(&server.address).await;
    let request = embed_request(&["grpc-web works", "from a browser"]);
    let native = common::client(&server.address).await.embed(request.clone()).await.unwrap().into_inner();

    // A grpc-web body: one uncompressed message frame.
    let message = request.encode_to_vec();
    let mut body = vec![0u8];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(&message);

    let host = server.address.trim_start_matches("http://").to_string();
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let http_request = http::Request::post(format!("http://{host}/embedwire.v1.EmbedService/Embed"))
        .header("content-type", "application/grpc-web+proto")
        .header("x-grpc-web", "1")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(http_request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/grpc-web+proto");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();

    assert_eq!(bytes[0], 0, "first frame is the message");
    let length = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
    let web = EmbedResponse::decode(&bytes[5..5 + length]).unwrap();
    assert_eq!(web.embeddings, native.embeddings);
    let trailers = String::from_utf8_lossy(&bytes[5 + length + 5..]);
    assert_eq!(bytes[5 + length], 0x80, "then the trailers frame");
    assert!(trailers.contains("grpc-status:0"), "{trailers}");
}
