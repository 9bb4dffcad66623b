//! `--precision`: the int8 graph's vectors against fp32's on the fixed text set the
//! setup checks it with (scripts/model/quality_sentences.txt), through the real
//! server, in batched calls and one text per call (dynamic quantization scales
//! each batch's activations together, so the batch a text shares could matter);
//! and the precision is reported in Info and in every Embed answer's metadata.

use crate::common;

use common::{InProcessServer, ONNX, rows};
use embedwire_proto::v1::{EmbedRequest, InfoRequest};
use embedwire_server::index::{IndexKind, IndexParams, VectorIndex};

/// The targets against fp32.
const MIN_MEAN_COSINE: f64 = 0.99;
const MIN_COSINE: f64 = 0.97;
const MIN_TOP10_AGREEMENT: f64 = 0.90;
const MIN_TOP10_IN_TOP20: f64 = 0.99;

/// Texts per batched call: what a bulk client sends.
const BATCH: usize = 64;

fn quality_sentences() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/model/quality_sentences.txt");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty()).map(str::to_string).collect()
}

async fn embed_batched(server: &InProcessServer, texts: &[String]) -> Vec<Vec<f32>> {
    let mut client = server.client().await;
    let mut vectors = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(BATCH) {
        let request = EmbedRequest { inputs: chunk.to_vec(), normalize: Some(true), ..Default::default() };
        vectors.extend(rows(&client.embed(request).await.unwrap().into_inner()));
    }
    vectors
}

/// One call at a time, so every batch holds one text.
async fn embed_one_by_one(server: &InProcessServer, texts: &[String]) -> Vec<Vec<f32>> {
    let mut client = server.client().await;
    let mut vectors = Vec::with_capacity(texts.len());
    for text in texts {
        let request = EmbedRequest { inputs: vec![text.clone()], normalize: Some(true), ..Default::default() };
        vectors.extend(rows(&client.embed(request).await.unwrap().into_inner()));
    }
    vectors
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum()
}

/// For every row, the indices of its `k` nearest neighbours among `vectors` (itself
/// excluded), by the server's exact index: 2,400 x 2,400 dot products, which this
/// package's unoptimized code (see its Cargo.toml) would take minutes over.
fn neighbours(vectors: &[Vec<f32>], k: usize) -> Vec<Vec<usize>> {
    let dim = vectors[0].len();
    let mut index = VectorIndex::new(IndexKind::Exact, dim, IndexParams::default()).unwrap();
    for (row, vector) in vectors.iter().enumerate() {
        index.insert(row as u64, vector).unwrap();
    }
    (0..vectors.len())
        .map(|row| {
            let hits = index.search(&vectors[row], k + 1, None, None).unwrap();
            hits.into_iter().map(|(id, _)| id as usize).filter(|&other| other != row).take(k).collect()
        })
        .collect()
}

struct Quality {
    mean_cosine: f64,
    min_cosine: f64,
    top10_agreement: f64,
    top10_in_top20: f64,
}

fn quality(fp32: &[Vec<f32>], int8: &[Vec<f32>]) -> Quality {
    let cosines: Vec<f64> = fp32.iter().zip(int8).map(|(a, b)| dot(a, b)).collect();
    let (mut agreement, mut inside) = (0.0, 0.0);
    for (truth, near) in neighbours(fp32, 10).iter().zip(neighbours(int8, 20)) {
        agreement += truth.iter().filter(|i| near[..10].contains(i)).count() as f64 / 10.0;
        inside += truth.iter().filter(|i| near.contains(i)).count() as f64 / 10.0;
    }
    let rows = fp32.len() as f64;
    Quality {
        mean_cosine: cosines.iter().sum::<f64>() / rows,
        min_cosine: cosines.iter().copied().fold(f64::INFINITY, f64::min),
        top10_agreement: agreement / rows,
        top10_in_top20: inside / rows,
    }
}

fn check(what: &str, q: &Quality) {
    eprintln!(
        "{what}: cosine mean {:.4} min {:.4}, top-10 agreement {:.4}, fp32 top-10 in int8 top-20 {:.4}",
        q.mean_cosine, q.min_cosine, q.top10_agreement, q.top10_in_top20
    );
    assert!(q.mean_cosine >= MIN_MEAN_COSINE, "{what}: mean cosine {}", q.mean_cosine);
    assert!(q.min_cosine >= MIN_COSINE, "{what}: min cosine {}", q.min_cosine);
    assert!(q.top10_agreement >= MIN_TOP10_AGREEMENT, "{what}: top-10 agreement {}", q.top10_agreement);
    assert!(q.top10_in_top20 >= MIN_TOP10_IN_TOP20, "{what}: top-10 in top-20 {}", q.top10_in_top20);
}

async fn precision_of(server: &InProcessServer) -> (String, String) {
    let mut client = server.client().await;
    let info = client.info(InfoRequest {}).await.unwrap().into_inner();
    let answer = client.embed(common::embed_request(&["which precision?"])).await.unwrap();
    let metadata = answer.metadata().get("x-embedwire-precision").expect("x-embedwire-precision").to_str().unwrap();
    (info.precision, metadata.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn int8_vectors_meet_the_quality_targets_batched_and_one_by_one() {
    let texts = quality_sentences();
    assert!(texts.len() >= 2000, "{} texts", texts.len());
    let fp32_server = InProcessServer::start(ONNX).await;
    let int8_server = InProcessServer::start(&[ONNX, &["--precision", "int8"]].concat()).await;
    assert_eq!(precision_of(&fp32_server).await, ("fp32".to_string(), "fp32".to_string()));
    assert_eq!(precision_of(&int8_server).await, ("int8".to_string(), "int8".to_string()));

    let fp32 = embed_batched(&fp32_server, &texts).await;
    fp32_server.stop().await.unwrap();
    check("int8 batched", &quality(&fp32, &embed_batched(&int8_server, &texts).await));
    check("int8 one by one", &quality(&fp32, &embed_one_by_one(&int8_server, &texts).await));
    int8_server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_resolves_by_the_cpu_and_reports_what_it_chose() {
    let server = InProcessServer::start(&[ONNX, &["--precision", "auto"]].concat()).await;
    let cpu = embedwire_server::model::precision::CpuInt8::detect();
    let expected = if cpu.instructions().is_some() { "int8" } else { "fp32" };
    eprintln!("this CPU's int8 instructions: {:?}; auto chose {expected}", cpu.instructions());
    assert_eq!(precision_of(&server).await, (expected.to_string(), expected.to_string()));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn int8_without_an_int8_graph_refuses_to_start_naming_the_file() {
    // A model directory with the fp32 graph only: the default one, copied without it.
    let source = common::cache_dir().join("models/all-MiniLM-L6-v2");
    let dir = common::TempDir::new("fp32-only");
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if entry.file_type().unwrap().is_file() && name != "model_int8.onnx" {
            std::os::unix::fs::symlink(entry.path(), dir.0.join(&name)).unwrap();
        }
    }
    std::os::unix::fs::symlink(source.join("1_Pooling"), dir.0.join("1_Pooling")).unwrap();
    let args = ["--listen", "127.0.0.1:0", "--precision", "int8", "--model-dir", &dir.flag()];
    let stderr = common::start_error(common::server_bin(), &args).await;
    assert!(stderr.contains("--precision int8") && stderr.contains("model_int8.onnx"), "{stderr}");
}
