//! Any BERT-family ONNX model in the usual folder layout is served with --model-dir,
//! with pooling and max length taken from its own config files. The model is a tiny
//! random BERT that scripts/model/make_tiny_bert.py writes (CLS pooling, max length 48,
//! 32 dimensions: each unlike the default model), together with the ids and vectors
//! ONNX Runtime in Python computes for it.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{InProcessServer, ONNX, TempDir, embed_request, max_abs_diff, rows, venv_python};
use embedwire_proto::v1::{EmbedRequest, InfoRequest, TokenizeRequest};
use serde_json::Value;

/// Largest difference allowed between the server's vectors and Python's: the same
/// graph on the same ONNX Runtime, batched and fused differently.
const TOLERANCE: f32 = 1e-4;

/// What the server should answer for one text, from expected.json.
struct Expected {
    text: String,
    input_ids: Vec<u32>,
    /// The CLS-pooled, unnormalized vector.
    cls: Vec<f32>,
    /// The mean-pooled vector: what a server that ignored 1_Pooling would answer.
    mean: Vec<f32>,
    /// [CLS]'s vector for the whole text: what a server that ignored max_seq_length would answer.
    untruncated_cls: Vec<f32>,
    untruncated_count: u32,
}

impl Expected {
    fn from_json(item: &Value) -> Self {
        let floats = |key: &str| item[key].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        Expected {
            text: item["text"].as_str().unwrap().to_string(),
            input_ids: item["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect(),
            cls: floats("cls"),
            mean: floats("mean"),
            untruncated_cls: floats("untruncated_cls"),
            untruncated_count: item["untruncated_count"].as_u64().unwrap() as u32,
        }
    }
}

/// Runs make_tiny_bert.py into `dir` and returns (the short texts, the long text).
fn make_tiny_bert(dir: &Path) -> (Vec<Expected>, Expected) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/model/make_tiny_bert.py");
    let output = Command::new(venv_python()).arg(&script).arg(dir).output().expect("run make_tiny_bert.py");
    assert!(
        output.status.success(),
        "make_tiny_bert.py failed ({}); run `make setup`?\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    assert_eq!((json["dim"].as_u64(), json["max_seq_length"].as_u64()), (Some(32), Some(48)));
    let texts = json["texts"].as_array().unwrap().iter().map(Expected::from_json).collect();
    (texts, Expected::from_json(&json["long"]))
}

fn norm(row: &[f32]) -> f32 {
    row.iter().map(|v| v * v).sum::<f32>().sqrt()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bert_model_directory_is_served_with_its_own_pooling_and_max_length() {
    let dir = TempDir::new("tiny-bert");
    let (texts, long) = make_tiny_bert(&dir.0);
    assert_eq!(texts.len(), 8);
    // The expectations tell the settings apart, so matching them shows the server used
    // CLS pooling and cut at 48 tokens.
    for item in texts.iter().chain([&long]) {
        assert!(max_abs_diff(&item.cls, &item.mean) > 0.1, "CLS and mean pooling agree on {:?}", item.text);
    }
    assert_eq!((long.input_ids.len(), long.untruncated_count), (48, 72));
    assert!(max_abs_diff(&long.cls, &long.untruncated_cls) > 0.01);

    let model_dir = dir.0.to_str().unwrap();
    let server = InProcessServer::start(&[ONNX, &["--model-dir", model_dir, "--model-id", "tiny-bert"]].concat()).await;
    let mut client = server.client().await;

    let info = client.info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(
        (info.model.as_str(), info.dim, info.max_input_tokens, info.pooling.as_str(), info.backend.as_str()),
        ("tiny-bert", 32, 48, "cls", "onnx")
    );

    let all: Vec<&str> = texts.iter().chain([&long]).map(|item| item.text.as_str()).collect();
    let tokenized = client
        .tokenize(TokenizeRequest { inputs: all.iter().map(|t| t.to_string()).collect(), truncate: None })
        .await
        .unwrap()
        .into_inner()
        .tokenized;
    for (item, got) in texts.iter().chain([&long]).zip(&tokenized) {
        assert_eq!(got.ids, item.input_ids, "ids of {:?}", item.text);
        assert_eq!((got.count as usize, got.untruncated_count), (item.input_ids.len(), item.untruncated_count));
    }
    assert!(tokenized[8].truncated && tokenized[..8].iter().all(|t| !t.truncated));

    // All eight in one padded batch, then one at a time.
    let short: Vec<&str> = all[..8].to_vec();
    let raw = |texts: &[&str]| EmbedRequest { normalize: Some(false), ..embed_request(texts) };
    let batched = client.embed(raw(&short)).await.unwrap().into_inner();
    assert_eq!((batched.model.as_str(), batched.dim, batched.count), ("tiny-bert", 32, 8));
    for (item, row) in texts.iter().zip(rows(&batched)) {
        let diff = max_abs_diff(&row, &item.cls);
        assert!(diff <= TOLERANCE, "batched {:?}: max abs diff {diff}", item.text);
    }
    for item in &texts {
        let single = client.embed(raw(&[&item.text])).await.unwrap().into_inner();
        let diff = max_abs_diff(&rows(&single)[0], &item.cls);
        assert!(diff <= TOLERANCE, "alone {:?}: max abs diff {diff}", item.text);
    }

    // Default normalization: the same directions at unit length.
    let unit = client.embed(embed_request(&short)).await.unwrap().into_inner();
    for (item, row) in texts.iter().zip(rows(&unit)) {
        assert!((norm(&row) - 1.0).abs() < 1e-5);
        let expected: Vec<f32> = item.cls.iter().map(|v| v / norm(&item.cls)).collect();
        assert!(max_abs_diff(&row, &expected) <= TOLERANCE, "normalized {:?}", item.text);
    }

    // The long text is cut at 48 tokens before the model sees it.
    let cut = client.embed(raw(&[&long.text])).await.unwrap().into_inner();
    assert_eq!(cut.token_counts, vec![48]);
    let diff = max_abs_diff(&rows(&cut)[0], &long.cls);
    assert!(diff <= TOLERANCE, "long text: max abs diff {diff}");

    server.stop().await.unwrap();
}
