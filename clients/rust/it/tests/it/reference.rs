//! The real model through the client: vectors match sentence-transformers'
//! reference embeddings (server/it/tests/data/all-MiniLM-L6-v2.json) within 1e-5,
//! through `embed_many` and through the CLI's `.npy` output.

use crate::common;

use std::path::PathBuf;

use common::{ONNX, TempDir, address, cli, client, start, stdout_of};
use embedwire_client::{BulkOptions, EmbedOptions};
use serde_json::Value;

const TOLERANCE: f32 = 1e-5;

struct Reference {
    texts: Vec<String>,
    vectors: Vec<Vec<f32>>,
}

fn reference() -> Reference {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../server/it/tests/data/all-MiniLM-L6-v2.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let items = file["items"].as_array().unwrap();
    Reference {
        texts: items.iter().map(|item| item["text"].as_str().unwrap().to_string()).collect(),
        vectors: items
            .iter()
            .map(|item| item["embedding"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect())
            .collect(),
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[tokio::test]
async fn vectors_match_the_reference_through_the_library_and_the_cli() {
    let reference = reference();
    assert!(reference.texts.len() >= 10);
    let server = start(ONNX).await;
    let client = client(&[&server]).await;

    let bulk = BulkOptions { batch_size: 5, max_concurrent_requests: 3 };
    let embeddings = client.embed_many(&reference.texts, bulk, &EmbedOptions::default()).await.unwrap();
    assert_eq!(embeddings.model(), "sentence-transformers/all-MiniLM-L6-v2");
    for (i, expected) in reference.vectors.iter().enumerate() {
        let diff = max_abs_diff(embeddings.row(i), expected);
        assert!(diff < TOLERANCE, "text {i} ({:?}) differs by {diff}", reference.texts[i]);
    }

    // The CLI reads one text per line, so texts with a newline stay out.
    let one_line: Vec<usize> = (0..reference.texts.len()).filter(|i| !reference.texts[*i].contains('\n')).collect();
    let lines: Vec<&str> = one_line.iter().map(|i| reference.texts[*i].as_str()).collect();
    let dir = TempDir::new("reference");
    let texts_file = dir.file("texts.txt");
    std::fs::write(&texts_file, lines.join("\n")).unwrap();
    let npy = dir.file("reference.npy");
    let output = cli(
        &[
            "--server",
            &address(&server),
            "embed",
            "--file",
            texts_file.to_str().unwrap(),
            "--npy",
            npy.to_str().unwrap(),
        ],
        None,
    )
    .await;
    stdout_of(&output);
    let bytes = std::fs::read(&npy).unwrap();
    let header_len = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let values: Vec<f32> =
        bytes[header_len..].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    assert_eq!(values.len(), one_line.len() * 384);
    for (row, index) in one_line.iter().enumerate() {
        let diff = max_abs_diff(&values[row * 384..(row + 1) * 384], &reference.vectors[*index]);
        assert!(diff < TOLERANCE, "npy row {row} (text {index}) differs by {diff}");
    }
    server.stop().await.unwrap();
}
