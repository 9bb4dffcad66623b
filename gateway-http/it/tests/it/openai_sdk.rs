//! The official `openai` Python SDK against /v1/embeddings on the real model: floats
//! and its default base64 decode to the same vectors, equal to gRPC Embed's; a bad
//! input raises the SDK's BadRequestError with the server's message.

use crate::common;

use common::{f32s, start_server, venv_python, workspace};
use embedwire_proto::v1::EmbedRequest;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_sdk_gets_the_grpc_vectors_as_floats_and_base64() {
    let server = start_server(&[]).await; // the default: the real model
    let texts = ["How do I embed text with the OpenAI SDK?", "A second, unrelated sentence about the sea."];
    let output = tokio::process::Command::new(venv_python())
        .arg(workspace().join("gateway-http/it/tests/openai_sdk_embed.py"))
        .arg(&server.url)
        .args(texts)
        .output()
        .await
        .expect("python runs");
    assert!(output.status.success(), "SDK script failed: {}", String::from_utf8_lossy(&output.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();

    let mut grpc = EmbedServiceClient::new(server.process.connect().await.unwrap());
    let reply = grpc
        .embed(EmbedRequest { inputs: texts.iter().map(|t| t.to_string()).collect(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let expected: Vec<Vec<f32>> = f32s(&reply.embeddings).chunks(reply.dim as usize).map(<[f32]>::to_vec).collect();
    assert_eq!(expected.len(), 2);
    assert_eq!(expected[0].len(), 384);

    for key in ["floats", "default"] {
        let rows: Vec<Vec<f32>> = answer[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect())
            .collect();
        assert_eq!(rows, expected, "{key}: the SDK's vectors are gRPC's, bit for bit");
    }
    assert_eq!(answer["model"], reply.model);
    assert_eq!(answer["prompt_tokens"].as_u64().unwrap(), u64::from(reply.usage.unwrap().prompt_tokens));
    assert_eq!(answer["error"]["status"], 400, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("input[0]: is empty"), "{answer}");
}
