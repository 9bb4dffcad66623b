//! Finds the embedwire-server binary to measure. Without an explicit path it builds
//! this workspace's server first, so the bench never measures a stale binary.

use std::path::{Path, PathBuf};

use anyhow::Context;

const SERVER_BIN: &str = "embedwire-server";
const GATEWAY_BIN: &str = "embedwire-gateway";

/// `explicit` if given; otherwise builds the server with cargo in the profile of this binary and returns the build next
/// to it (cargo puts every binary of a profile in one directory: target/release or target/debug).
pub fn resolve(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        anyhow::ensure!(path.is_file(), "server binary {} does not exist", path.display());
        return Ok(path.to_path_buf());
    }
    let own = std::env::current_exe().context("locating the running bench binary")?;
    build_into(own.parent().context("the bench binary has no parent directory")?)
}

/// This workspace's release build of the server: where `make setup` puts it (the tests of other crates start it).
pub fn workspace_release() -> anyhow::Result<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("the bench crate has no parent")?;
    let path = workspace.join("target/release").join(SERVER_BIN);
    anyhow::ensure!(path.is_file(), "{} is missing: run `cargo build --release --workspace`", path.display());
    Ok(path)
}

/// The embedwire-gateway beside `server` (cargo puts every binary of a profile in one directory); built there when
/// missing (`cargo test -p embedwire-bench` builds no gateway).
pub fn gateway_beside(server: &Path) -> anyhow::Result<PathBuf> {
    let dir = server.parent().context("the server binary has no parent directory")?;
    let path = dir.join(GATEWAY_BIN);
    if path.is_file() { Ok(path) } else { build_bin_into(dir, GATEWAY_BIN) }
}

/// Variables cargo sets for a process it runs (a test binary: the bench tests call [`build_into`]). Handed down to the
/// inner cargo they reach build scripts that watch them (ring's does), which rerun, so ring, rustls, tonic and the
/// server were rebuilt inside `make test` (2.5 minutes) and again by the next build from a shell.
fn is_set_by_cargo_for_a_crate(name: &str) -> bool {
    ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CRATE_", "CARGO_BIN_"].iter().any(|prefix| name.starts_with(prefix))
        || matches!(name, "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "CARGO_RUSTC_CURRENT_DIR" | "OUT_DIR")
}

/// Builds the server with cargo in this crate's profile and returns the binary in `dir`, the profile's output directory
/// (a test passes the directory of a bench binary, as its own executable lives in `deps/`).
pub fn build_into(dir: &Path) -> anyhow::Result<PathBuf> {
    build_bin_into(dir, SERVER_BIN)
}

/// Builds the workspace's binary `bin` as [`build_into`] builds the server.
fn build_bin_into(dir: &Path, bin: &str) -> anyhow::Result<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("the bench crate has no parent")?;
    let mut build = std::process::Command::new("cargo");
    // --workspace, not -p: cargo unifies dependency features over the packages it selects, so `-p embedwire-server`
    // alone builds ring, rustls, tonic, ... with other features than the workspace build of `make setup`, rebuilds them
    // (minutes) and leaves a binary that the next workspace build rebuilds again.
    let release = !cfg!(debug_assertions);
    build.current_dir(workspace).args(["build", "--workspace", "--bin", bin]);
    build.args(release.then_some("--release"));
    for (name, _) in std::env::vars_os() {
        if let Some(name) = name.to_str().filter(|name| is_set_by_cargo_for_a_crate(name)) {
            build.env_remove(name);
        }
    }
    eprintln!("building {bin} ({})", if release { "release" } else { "debug" });
    let status = build.status().context("running cargo (or pass --server-bin)")?;
    anyhow::ensure!(status.success(), "cargo build of {bin} failed ({status})");
    let path = dir.join(bin);
    anyhow::ensure!(path.is_file(), "no {} after cargo built {bin} (pass --server-bin)", path.display());
    Ok(path)
}
