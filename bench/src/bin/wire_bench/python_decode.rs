//! The Python side of the client decode cost: the captured answers are written to
//! a directory with a manifest, and `bench/decode_bench.py` (run with the venv
//! Python) times json.loads against numpy.frombuffer on them.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use anyhow::Context;
use serde::Deserialize;

use crate::variants::{Answer, Decoded, Variant};

/// One variant's Python decode figures.
#[derive(Debug, Clone, Deserialize)]
pub struct PythonDecode {
    pub median_ms: f64,
    pub runs: usize,
    /// Largest difference from the gRPC FLOAT32 vectors; None when not comparable
    /// (UBINARY bits).
    pub max_abs_diff: Option<f64>,
}

/// The decoder the script uses for a variant.
fn kind(variant: Variant) -> &'static str {
    match variant {
        Variant::Grpc(_) => "grpc",
        Variant::HttpJson => "json_float",
        Variant::HttpBase64 => "json_base64",
        Variant::HttpOctet => "octet",
        Variant::HttpEmbedJson => "embed_json",
    }
}

/// Writes `answers` into `dir` (NAME.bin and manifest.json).
pub fn write_bodies(dir: &Path, answers: &[(Variant, Answer)]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut manifest = serde_json::Map::new();
    for (variant, answer) in answers {
        std::fs::write(dir.join(format!("{}.bin", variant.name())), &answer.body)?;
        let (count, dim) = match &answer.decoded {
            Decoded::Floats { count, dim, .. } => (*count, *dim),
            Decoded::Bits { count, bytes_per_row, .. } => (*count, bytes_per_row * 8),
        };
        manifest.insert(variant.name().into(), serde_json::json!({"kind": kind(*variant), "count": count, "dim": dim}));
    }
    std::fs::write(dir.join("manifest.json"), serde_json::to_vec_pretty(&manifest)?)?;
    Ok(())
}

/// Runs the script on `dir` and returns its figures by variant name.
pub fn run(
    python: &Path,
    script: &Path,
    proto_dir: &Path,
    dir: &Path,
    seconds: f64,
) -> anyhow::Result<HashMap<String, PythonDecode>> {
    let output = Command::new(python)
        .arg(script)
        .arg("--dir")
        .arg(dir)
        .arg("--proto-dir")
        .arg(proto_dir)
        .arg("--seconds")
        .arg(seconds.to_string())
        .output()
        .with_context(|| format!("running {} {}", python.display(), script.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "{} failed ({}):\n{}",
        script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).with_context(|| format!("parsing the output of {}", script.display()))
}
