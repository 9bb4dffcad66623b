//! What the end-to-end bench tests share: running a bench binary's `--quick` mode
//! against the real model after checking that `make setup` has run. Each test crate
//! uses a part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use clap::Parser;
use embedwire_server::ServerConfig;

/// Runs `binary --quick --results-dir DIR` (DIR fresh under the target's temporary
/// directory); returns its stdout and DIR. Fails with the bench's output if it
/// fails, or with a pointer to `make setup` when the model or the venv is missing.
/// The docstring cache stays in its default place (bench/results/tmp), shared with
/// real runs: extracting takes seconds, and the cache is keyed by interpreter.
pub fn run_quick(binary: &str, name: &str) -> (String, PathBuf) {
    run(binary, &[], name)
}

/// [`run_quick`] of `embedwire-bench SCENARIO`.
pub fn run_scenario(scenario: &str) -> (String, PathBuf) {
    run(env!("CARGO_BIN_EXE_embedwire-bench"), &[scenario], scenario)
}

fn run(binary: &str, args: &[&str], name: &str) -> (String, PathBuf) {
    let defaults = ServerConfig::parse_from(["embedwire-server"]);
    let (model_dir, python) = (defaults.model_dir(), defaults.cache_dir().join("venv/bin/python"));
    assert!(
        model_dir.is_dir() && python.is_file(),
        "no model at {} or no Python venv at {} (run `make setup`)",
        model_dir.display(),
        python.display()
    );
    let results_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&results_dir);
    let output = Command::new(binary)
        .args(args)
        .args(["--quick", "--results-dir"])
        .arg(&results_dir)
        .output()
        .unwrap_or_else(|e| panic!("running {name}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{name} failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    (stdout, results_dir)
}
