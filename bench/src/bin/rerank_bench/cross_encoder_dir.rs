//! The cross-encoder to measure: a directory given on the command line, or the
//! full-size one that `scripts/model/make_minilm_cross_encoder.py` assembles from
//! all-MiniLM-L6-v2 (6 layers, 384 wide, 512 tokens: the shape of
//! cross-encoder/ms-marco-MiniLM-L-6-v2, whose speed is what matters here; its seeded
//! head makes the scores meaningless, which a throughput bench does not mind).
//!
//! The script's output is deterministic, so it is built once into the cache directory
//! and reused while the script stays the same: a copy of the script that built it is
//! kept beside it, and a changed script rebuilds it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

/// The script, relative to the workspace.
const SCRIPT: &str = "scripts/model/make_minilm_cross_encoder.py";
/// The directory's name in the cache directory.
const CACHED_NAME: &str = "minilm-cross-encoder";
/// The copy of the script that built a cached directory.
const BUILT_BY: &str = "built_by.py";

/// `explicit` if given (it must hold a model.onnx), else the cached build, made now
/// if missing or built by another version of the script.
pub fn resolve(explicit: Option<&Path>, python: &Path, cache_dir: &Path) -> anyhow::Result<PathBuf> {
    if let Some(dir) = explicit {
        anyhow::ensure!(dir.join("model.onnx").is_file(), "no model.onnx in --rerank-model-dir {}", dir.display());
        return Ok(dir.to_path_buf());
    }
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(SCRIPT);
    let script = std::fs::read(&script_path).with_context(|| format!("reading {}", script_path.display()))?;
    let dir = cache_dir.join(CACHED_NAME);
    if dir.join("model.onnx").is_file() && std::fs::read(dir.join(BUILT_BY)).ok().as_deref() == Some(&script[..]) {
        return Ok(dir);
    }
    // Built beside its final place and renamed into it, so a run that stops halfway
    // never leaves a directory that looks complete.
    std::fs::create_dir_all(cache_dir).with_context(|| format!("creating {}", cache_dir.display()))?;
    let partial = cache_dir.join(format!("{CACHED_NAME}.{}.partial", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    println!("building the cross-encoder: {} {SCRIPT} {}", python.display(), dir.display());
    let output = Command::new(python)
        .arg(&script_path)
        .arg(&partial)
        .output()
        .with_context(|| format!("running {} (pass --python or --rerank-model-dir)", python.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "{SCRIPT} failed ({}); run `make setup`, or pass --rerank-model-dir:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(partial.join(BUILT_BY), &script)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&partial, &dir).with_context(|| format!("moving the cross-encoder to {}", dir.display()))?;
    Ok(dir)
}
