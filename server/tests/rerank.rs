//! Search's rerank stage re-scores candidates with a cross-encoder. The model is a tiny
//! random BertForSequenceClassification that scripts/model/make_tiny_cross_encoder.py
//! writes (logits [batch, 1], at most 64 tokens per pair), together with the pair ids and
//! the logits ONNX Runtime in Python computes for it.

mod common;

use std::path::Path;
use std::process::Command;

use clap::Parser;
use common::{TempDir, max_abs_diff, venv_python};
use embedwire_server::ServerConfig;
use embedwire_server::model::cross_encoder::{CrossEncoder, Reranker, TokenizedPair};
use embedwire_server::model::onnx::init_runtime;
use embedwire_server::model::precision::PrecisionChoice;
use serde_json::Value;

/// Largest difference allowed between Rust's scores and Python's: the same graph on the
/// same ONNX Runtime, batched and fused differently.
const TOLERANCE: f32 = 1e-4;

/// What the model should make of one passage, from expected.json.
struct Expected {
    text: String,
    pair: TokenizedPair,
    /// Whether the passage was cut to fit.
    truncated: bool,
    logit: f32,
    /// The logit with every token type 0: what a scorer that ignored segments would get.
    logit_without_token_types: f32,
}

impl Expected {
    fn from_json(item: &Value) -> Self {
        let ids = |key: &str| item[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let float = |key: &str| item[key].as_f64().unwrap() as f32;
        Expected {
            text: item["text"].as_str().unwrap().to_string(),
            pair: TokenizedPair { ids: ids("input_ids"), type_ids: ids("token_type_ids") },
            truncated: item["truncated"].as_bool().unwrap(),
            logit: float("logit"),
            logit_without_token_types: float("logit_without_token_types"),
        }
    }
}

/// Runs make_tiny_cross_encoder.py into `dir`; returns the query, the passages, and the
/// passages' indices by descending logit.
fn make_tiny_cross_encoder(dir: &Path) -> (String, Vec<Expected>, Vec<usize>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/model/make_tiny_cross_encoder.py");
    let output = Command::new(venv_python()).arg(&script).arg(dir).output().expect("run make_tiny_cross_encoder.py");
    assert!(
        output.status.success(),
        "make_tiny_cross_encoder.py failed ({}); run `make setup`?\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    assert_eq!(json["max_length"].as_u64(), Some(64));
    let passages = json["passages"].as_array().unwrap().iter().map(Expected::from_json).collect();
    let order = json["order"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    (json["query"].as_str().unwrap().to_string(), passages, order)
}

/// Indices of `scores` from the highest score to the lowest.
fn by_descending_score(scores: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order
}

// One test, not several: ONNX Runtime's environment is one per process, and the
// fixture takes a few seconds to build.
#[tokio::test(flavor = "multi_thread")]
async fn the_cross_encoder_scores_pairs_as_python_does_and_candidates_order_by_it() {
    let dir = TempDir::new("tiny-cross-encoder");
    let (query, passages, expected_order) = make_tiny_cross_encoder(&dir.0);
    assert_eq!(passages.len(), 8);
    // The expectations tell a scorer that ignores segments apart, so matching them shows
    // the token types reached the model.
    for passage in &passages {
        let diff = (passage.logit - passage.logit_without_token_types).abs();
        assert!(diff > 0.01, "token types barely matter for {:?} ({diff})", passage.text);
    }
    let long = passages.last().unwrap();
    assert!(long.truncated && long.pair.ids.len() == 64 && passages[..7].iter().all(|p| !p.truncated));

    let config = ServerConfig::parse_from(["embedwire-server"]);
    let environment = init_runtime(&config.ort_library()).expect("ONNX Runtime (run `make setup`)");
    let settings = config.onnx_settings();
    let mut encoder = CrossEncoder::load(environment, &dir.0, settings, PrecisionChoice::Fp32).unwrap();
    // No sentence_bert_config.json: the default 512, capped by the 64 position embeddings.
    assert_eq!(encoder.max_tokens(), 64);

    // [CLS] query [SEP] passage [SEP] with segments 0 then 1; the long passage loses its
    // tail and the query stays whole.
    for passage in &passages {
        assert_eq!(encoder.tokenize(&query, &passage.text).unwrap(), passage.pair, "pair with {:?}", passage.text);
    }

    // All eight in one padded batch, then one at a time.
    let texts: Vec<&str> = passages.iter().map(|p| p.text.as_str()).collect();
    let logits: Vec<f32> = passages.iter().map(|p| p.logit).collect();
    let batched = encoder.score(&query, &texts).unwrap();
    let diff = max_abs_diff(&batched, &logits);
    assert!(diff <= TOLERANCE, "batched: max abs diff {diff}\n{batched:?}\n{logits:?}");
    for passage in &passages {
        let alone = encoder.score(&query, &[&passage.text]).unwrap();
        let diff = max_abs_diff(&alone, &[passage.logit]);
        assert!(diff <= TOLERANCE, "alone {:?}: max abs diff {diff}", passage.text);
    }
    assert!(encoder.score(&query, &[]).unwrap().is_empty());

    // Through the shared reranker, as search calls it: concurrent calls each get their
    // own candidates' scores, in their order; sorting by them gives Python's order.
    let reranker = Reranker::new(encoder);
    assert_eq!(reranker.max_tokens(), 64);
    let reversed: Vec<String> = texts.iter().rev().map(|t| t.to_string()).collect();
    let expected_reversed: Vec<f32> = logits.iter().rev().copied().collect();
    let none: [&str; 0] = [];
    let (forward, backward, empty) = tokio::join!(
        reranker.rerank(&query, &texts),
        reranker.rerank(&query, &reversed),
        reranker.rerank(&query, &none),
    );
    let (forward, backward) = (forward.unwrap(), backward.unwrap());
    assert!(max_abs_diff(&forward, &logits) <= TOLERANCE, "{forward:?}");
    assert!(max_abs_diff(&backward, &expected_reversed) <= TOLERANCE, "{backward:?}");
    assert!(empty.unwrap().is_empty());
    assert_eq!(by_descending_score(&forward), expected_order);
    let backward_order: Vec<usize> = by_descending_score(&backward).iter().map(|&i| texts.len() - 1 - i).collect();
    assert_eq!(backward_order, expected_order);
    // The order is not the candidates' own, so it shows the scores moved them.
    assert_ne!(expected_order, (0..texts.len()).collect::<Vec<_>>());
}
