//! The cross-encoder's scores against an independent forward pass. The model is
//! full-size: all-MiniLM-L6-v2's encoder (the embedding checkpoint's real weights)
//! with a seeded classification head, built by scripts/model/make_minilm_cross_encoder.py,
//! which also writes each pair's token ids and the logit that a NumPy float64
//! implementation of BERT (scripts/model/numpy_bert.py, no ONNX involved) computes.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use clap::Parser;
use common::{TempDir, venv_python};
use embedwire_server::ServerConfig;
use embedwire_server::batcher::BatchLimits;
use embedwire_server::lanes::QueueBound;
use embedwire_server::model::cross_encoder::CrossEncoder;
use embedwire_server::model::onnx::init_runtime;
use embedwire_server::model::pair_tokenizer::{TokenizedPair, TruncationSide};
use embedwire_server::model::precision::PrecisionChoice;
use embedwire_server::rerank::{CrossEncoderScorer, RerankEngine, RerankLimits, RerankOptions, RerankStats, Scorer};
use serde_json::Value;

/// The bound: fp32 ONNX Runtime against float64 NumPy.
const TOLERANCE: f32 = 1e-5;

fn make_model(dir: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/model/make_minilm_cross_encoder.py");
    let output = Command::new(venv_python()).arg(&script).arg(dir).output().expect("run make_minilm_cross_encoder.py");
    assert!(
        output.status.success(),
        "make_minilm_cross_encoder.py failed ({}); run `make setup`?\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap()
}

fn ids(value: &Value) -> Vec<u32> {
    value.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn full_size_cross_encoder_matches_a_numpy_float64_forward_pass() {
    let dir = TempDir::new("minilm-cross-encoder");
    let expected = make_model(&dir.0);
    let query = expected["query"].as_str().unwrap().to_string();
    let pairs = expected["pairs"].as_array().unwrap();
    let texts: Vec<String> = pairs.iter().map(|p| p["text"].as_str().unwrap().to_string()).collect();
    let logits: Vec<f32> = pairs.iter().map(|p| p["logit"].as_f64().unwrap() as f32).collect();
    assert!(pairs.iter().any(|p| p["truncated"].as_bool().unwrap()), "one pair must be cut");

    let config = ServerConfig::parse_from(["embedwire-server"]);
    let environment = init_runtime(&config.ort_library()).expect("ONNX Runtime (run `make setup`)");
    let loaded = CrossEncoder::load(environment, &dir.0, config.onnx_settings(), PrecisionChoice::Fp32).unwrap();
    assert_eq!(loaded.tokenizer.max_tokens(), expected["max_length"].as_u64().unwrap() as usize);

    // The server's tokenization is the one the reference scored.
    let tokenized: Vec<TokenizedPair> =
        texts.iter().map(|text| loaded.tokenizer.tokenize(&query, text, TruncationSide::Right).unwrap()).collect();
    for (pair, want) in tokenized.iter().zip(pairs) {
        assert_eq!(pair.ids, ids(&want["input_ids"]), "ids of {:?}", want["text"]);
        assert_eq!(pair.type_ids, ids(&want["token_type_ids"]), "token types of {:?}", want["text"]);
        assert_eq!(pair.truncated, want["truncated"].as_bool().unwrap());
    }

    // Batched together (padded to the longest, 512) and one at a time.
    let mut model = loaded.model;
    let all: Vec<&TokenizedPair> = tokenized.iter().collect();
    let batched = model.score(&all).unwrap();
    for (index, (got, want)) in batched.iter().zip(&logits).enumerate() {
        assert!((got - want).abs() <= TOLERANCE, "batched pair {index}: {got} vs {want}");
    }
    for (index, pair) in tokenized.iter().enumerate() {
        let alone = model.score(&[pair]).unwrap()[0];
        assert!((alone - logits[index]).abs() <= TOLERANCE, "pair {index} alone: {alone} vs {}", logits[index]);
    }

    // Through the engine and its batcher (batches of 3: the list is split and
    // reassembled), the raw scores are the same logits and the ranks their order.
    let loaded = CrossEncoder::load(environment, &dir.0, config.onnx_settings(), PrecisionChoice::Fp32).unwrap();
    let limits = BatchLimits {
        max_batch_size: 3,
        max_batch_tokens: 3 * 512,
        max_wait: std::time::Duration::ZERO,
        max_bulk_batch_tokens: 3 * 512,
    };
    let stats = Arc::new(RerankStats::default());
    let scorer =
        CrossEncoderScorer::start(loaded, "minilm-ce".into(), limits, QueueBound::Off, stats.batches.clone()).unwrap();
    let engine = RerankEngine::new(
        Scorer::Cross(scorer),
        RerankLimits { max_texts: 100, max_input_chars: 100_000, max_in_flight_pairs: 1000 },
        stats,
    );
    let raw = RerankOptions { raw_scores: true, ..RerankOptions::default() };
    let reranked = engine.rerank(&query, &texts, raw).await.unwrap();
    let mut want_order: Vec<usize> = (0..logits.len()).collect();
    want_order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    assert_eq!(reranked.ranks.iter().map(|r| r.index).collect::<Vec<_>>(), want_order);
    for rank in &reranked.ranks {
        assert!((rank.score - logits[rank.index]).abs() <= TOLERANCE, "engine score of {}", rank.index);
    }
}
