//! The gateway binary on its own. The HTTP layer's suites live in `gateway-http/it` (a
//! package of their own, built without optimization, see its Cargo.toml); this test
//! stays here because an integration test is what makes `cargo test` build a package's
//! binary, and those suites start it.

use std::process::Command;

fn gateway(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_embedwire-gateway")).args(args).env("RUST_BACKTRACE", "0").output().unwrap()
}

#[test]
fn prints_its_version() {
    let output = gateway(&["--version"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        concat!("embedwire-gateway ", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn an_unknown_flag_is_refused_and_named() {
    let output = gateway(&["--no-such-flag"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("'--no-such-flag'"), "{stderr}");
}
