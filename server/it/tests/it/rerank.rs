//! The cross-encoder behind RerankService and search's rerank stage. The model is a tiny
//! random BertForSequenceClassification that scripts/model/make_tiny_cross_encoder.py
//! writes (logits [batch, 1], at most 64 tokens per pair), together with the pair ids and
//! the logits ONNX Runtime in Python computes for it.

use crate::common;

use std::path::Path;
use std::process::Command;

use clap::Parser;
use common::{TempDir, max_abs_diff, venv_python};
use embedwire_server::ServerConfig;
use std::sync::Arc;

use embedwire_server::batcher::BatchLimits;
use embedwire_server::error::Error;
use embedwire_server::lanes::QueueBound;
use embedwire_server::model::cross_encoder::CrossEncoder;
use embedwire_server::model::onnx::init_runtime;
use embedwire_server::model::pair_tokenizer::{TokenizedPair, TruncationSide};
use embedwire_server::model::precision::PrecisionChoice;
use embedwire_server::rerank::{
    CrossEncoderScorer, RerankEngine, RerankLimits, RerankOptions, RerankStats, Reranked, Scorer,
};
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
            pair: TokenizedPair {
                ids: ids("input_ids"),
                type_ids: ids("token_type_ids"),
                truncated: item["truncated"].as_bool().unwrap(),
            },
            truncated: item["truncated"].as_bool().unwrap(),
            logit: float("logit"),
            logit_without_token_types: float("logit_without_token_types"),
        }
    }
}

/// Runs make_tiny_cross_encoder.py into `dir`; returns the query, the passages, and the
/// passages' indices by descending logit.
fn make_tiny_cross_encoder(dir: &Path) -> (String, Vec<Expected>, Vec<usize>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/model/make_tiny_cross_encoder.py");
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
    let loaded = CrossEncoder::load(environment, &dir.0, settings, PrecisionChoice::Fp32).unwrap();
    // No sentence_bert_config.json: the default 512, capped by the 64 position embeddings.
    assert_eq!(loaded.tokenizer.max_tokens(), 64);

    // [CLS] query [SEP] passage [SEP] with segments 0 then 1; the long passage loses its
    // tail and the query stays whole.
    for passage in &passages {
        let pair = loaded.tokenizer.tokenize(&query, &passage.text, TruncationSide::Right).unwrap();
        assert_eq!(pair, passage.pair, "pair with {:?}", passage.text);
    }
    // Cut from the left, the long passage keeps its end instead.
    let left = loaded.tokenizer.tokenize(&query, &long.text, TruncationSide::Left).unwrap();
    assert!(left.truncated && left.ids.len() == 64);
    let query_segment = long.pair.type_ids.iter().filter(|&&t| t == 0).count();
    assert_eq!(left.ids[..query_segment], long.pair.ids[..query_segment], "the query stays whole");
    assert_ne!(left.ids, long.pair.ids);

    // All eight in one padded batch, then one at a time.
    let mut model = loaded.model;
    let pairs: Vec<&TokenizedPair> = passages.iter().map(|p| &p.pair).collect();
    let logits: Vec<f32> = passages.iter().map(|p| p.logit).collect();
    let batched = model.score(&pairs).unwrap();
    let diff = max_abs_diff(&batched, &logits);
    assert!(diff <= TOLERANCE, "batched: max abs diff {diff}\n{batched:?}\n{logits:?}");
    for passage in &passages {
        let alone = model.score(&[&passage.pair]).unwrap();
        let diff = max_abs_diff(&alone, &[passage.logit]);
        assert!(diff <= TOLERANCE, "alone {:?}: max abs diff {diff}", passage.text);
    }
    assert!(model.score(&[]).unwrap().is_empty());

    // Through the rerank engine, behind the batcher: concurrent calls share batches and
    // each gets its own texts' scores; ranks follow Python's order.
    let loaded = CrossEncoder::load(environment, &dir.0, settings, PrecisionChoice::Fp32).unwrap();
    let batch = BatchLimits {
        max_batch_size: 4,
        max_batch_tokens: 4 * 64,
        max_wait: std::time::Duration::ZERO,
        max_bulk_batch_tokens: 4 * 64,
    };
    let stats = Arc::new(RerankStats::default());
    let scorer =
        CrossEncoderScorer::start(loaded, "tiny".into(), batch, QueueBound::Off, stats.batches.clone()).unwrap();
    let limits = RerankLimits { max_texts: 8, max_input_chars: 10_000, max_in_flight_pairs: 1000 };
    let engine = RerankEngine::new(Scorer::Cross(scorer), limits, stats.clone());
    assert_eq!(engine.scorer_name(), "cross-encoder:tiny");
    let texts: Vec<String> = passages.iter().map(|p| p.text.clone()).collect();
    let reversed: Vec<String> = texts.iter().rev().cloned().collect();
    let raw = RerankOptions { raw_scores: true, ..RerankOptions::default() };
    let (forward, backward, calibrated, top) = tokio::join!(
        engine.rerank(&query, &texts, raw),
        engine.rerank(&query, &reversed, raw),
        engine.rerank(&query, &texts, RerankOptions::default()),
        engine.rerank(&query, &texts, RerankOptions { top_n: Some(3), ..RerankOptions::default() }),
    );
    let (forward, backward, calibrated, top) = (forward.unwrap(), backward.unwrap(), calibrated.unwrap(), top.unwrap());
    let order = |reranked: &Reranked| reranked.ranks.iter().map(|r| r.index).collect::<Vec<_>>();
    assert_eq!(order(&forward), expected_order);
    let backward_order: Vec<usize> = order(&backward).iter().map(|&i| texts.len() - 1 - i).collect();
    assert_eq!(backward_order, expected_order);
    for rank in &forward.ranks {
        assert!((rank.score - logits[rank.index]).abs() <= TOLERANCE, "raw score of {}", rank.index);
    }
    for rank in &calibrated.ranks {
        let sigmoid = 1.0 / (1.0 + (-logits[rank.index]).exp());
        assert!((rank.score - sigmoid).abs() <= TOLERANCE && (0.0..=1.0).contains(&rank.score));
    }
    assert_eq!(order(&calibrated), expected_order);
    assert_eq!(order(&top), expected_order[..3].to_vec());
    assert!(forward.tokens >= texts.len() as u64 * 10 && forward.timing.inference > std::time::Duration::ZERO);
    // Pairs of 8 texts, 4 a batch: every call needed at least two batches, and the
    // four calls' 32 pairs went through the model.
    assert_eq!(RerankStats::get(&stats.pairs), 32);
    assert!(embedwire_server::stats::Stats::get(&stats.batches.sequences) >= 32);
    // The order is not the candidates' own, so it shows the scores moved them.
    assert_ne!(expected_order, (0..texts.len()).collect::<Vec<_>>());

    // Truncation off: the long passage is refused by name; every limit names its field.
    let strict = RerankOptions { truncate: false, ..RerankOptions::default() };
    let refused = engine.rerank(&query, &texts, strict).await.unwrap_err();
    assert!(matches!(&refused, Error::InvalidArgument(m) if m.starts_with("texts[7]: ")), "{refused}");
    assert!(engine.rerank(&query, &texts[..7], strict).await.is_ok());
    let nine: Vec<String> = (0..9).map(|i| format!("text {i}")).collect();
    assert!(matches!(engine.rerank(&query, &nine, raw).await, Err(Error::OutOfRange(m)) if m.starts_with("texts: ")));
    assert!(
        matches!(engine.rerank(" ", &texts, raw).await, Err(Error::InvalidArgument(m)) if m.starts_with("query: "))
    );
    assert!(
        matches!(engine.rerank(&query, &[], raw).await, Err(Error::InvalidArgument(m)) if m.starts_with("texts: "))
    );
    let blank = vec!["fine".to_string(), "".to_string()];
    assert!(
        matches!(engine.rerank(&query, &blank, raw).await, Err(Error::InvalidArgument(m)) if m.starts_with("texts[1]: "))
    );
    // A text cut to 3 tokens before pairing scores as that prefix does.
    let cut = RerankOptions { max_tokens_per_text: Some(3), raw_scores: true, ..RerankOptions::default() };
    let short = engine.rerank(&query, &texts[..1], cut).await.unwrap();
    let prefix = engine.rerank(&query, &["Paris is the".to_string()], raw).await.unwrap();
    assert!((short.ranks[0].score - prefix.ranks[0].score).abs() <= TOLERANCE);
    assert!((short.ranks[0].score - logits[0]).abs() > 1e-3, "cutting changed the score");
}
