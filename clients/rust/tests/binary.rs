//! The CLI on its own. The client's suites live in `clients/rust/it` (a package of their
//! own, built without optimization, see its Cargo.toml); this test stays here because an
//! integration test is what makes `cargo test` build a package's binaries, and those
//! suites start the CLI.

use std::process::Command;

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_embedwire")).args(args).env("RUST_BACKTRACE", "0").output().unwrap()
}

#[test]
fn prints_its_version() {
    let output = cli(&["--version"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), concat!("embedwire ", env!("CARGO_PKG_VERSION")));
}

#[test]
fn embed_without_texts_says_how_to_give_them() {
    let output = cli(&["embed"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("no texts to embed (give them as arguments, with --file, or on stdin)"), "{stderr}");
}
