//! The server binary on its own. Its suites live in `server/it` (a package of their own,
//! built without optimization, see its Cargo.toml); this test stays here because an
//! integration test is what makes `cargo test` build a package's binary, and those
//! suites start it.

use std::process::Command;

fn server(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_embedwire-server")).args(args).env("RUST_BACKTRACE", "0").output().unwrap()
}

#[test]
fn prints_its_version() {
    let output = server(&["--version"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), concat!("embedwire-server ", env!("CARGO_PKG_VERSION")));
}

#[test]
fn a_bad_flag_is_refused_before_the_model_loads_and_named() {
    let output = server(&["--max-batch-size", "0", "--model-dir", "/nonexistent"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--max-batch-size must be at least 1"), "{stderr}");
    assert!(!stderr.contains("nonexistent"), "the flags are checked before the model is looked for: {stderr}");
}
