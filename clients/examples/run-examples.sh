#!/usr/bin/env bash
# Builds the Go and Node example clients from proto/ and runs each against a server;
# each embeds one text and prints the vector's dimension ("go: 384"), then reranks
# three texts against a query and prints the best one's index and the scorer
# ("go rerank: best=1 scorer=bi-encoder:MODEL"). The examples print these labelled
# lines themselves; this script only builds and runs them.
#
# Usage: clients/examples/run-examples.sh HOST:PORT [go] [node]   (default: both)
#
# Toolchain pieces are cached under ${EMBEDWIRE_CACHE:-~/.cache/embedwire}, keyed by
# version, so a second run only regenerates, compiles and runs:
#   go-tools/protoc-gen-go-VERSION, go-tools/protoc-gen-go-grpc-VERSION  (go install)
#   npm/examples-node-LOCKHASH/node_modules  (npm ci from node/package-lock.json;
#                                             node/node_modules links to it)
#   examples/embed-go  (the built Go binary)
# Go modules come from the Go proxy, npm packages from the npm registry. The generated
# code (go/gen, node/gen) is not committed: buf regenerates it on every run, so it
# cannot drift from proto/.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}"
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
log() { echo "run-examples: $*" >&2; }

[ $# -ge 1 ] || { echo "usage: $0 HOST:PORT [go] [node]" >&2; exit 2; }
ADDR=$1
shift
WHICH=("$@")
[ ${#WHICH[@]} -gt 0 ] || WHICH=(go node)

BUF="$CACHE/bin/buf"
[ -x "$BUF" ] || BUF="$(command -v buf || true)"
[ -n "$BUF" ] || { log "ERROR: buf not found: run scripts/setup-tools.sh"; exit 1; }

# Installs a Go program into a versioned directory (as scripts/setup-tools.sh does for
# grpcurl and ghz) and prints that directory.
go_tool() {
  local name=$1 module=$2 version=$3
  local dir="$CACHE/go-tools/$name-$version"
  if [ ! -x "$dir/$name" ]; then
    log "installing $name $version (go install)"
    GOBIN="$dir" GOFLAGS=-mod=mod go install "$module@$version" >&2
  fi
  echo "$dir"
}

run_go() {
  local gen_go gen_grpc
  gen_go="$(go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION")"
  gen_grpc="$(go_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION")"
  mkdir -p "$CACHE/examples"
  (
    cd "$HERE/go"
    rm -rf gen
    PATH="$gen_go:$gen_grpc:$PATH" "$BUF" generate
    GOFLAGS=-mod=mod go build -o "$CACHE/examples/embed-go" .
  ) >&2
  "$CACHE/examples/embed-go" "$ADDR"
}

run_node() {
  local lock_hash deps
  lock_hash="$(cat "$HERE/node/package.json" "$HERE/node/package-lock.json" | sha256sum | cut -c1-16)"
  deps="$CACHE/npm/examples-node-$lock_hash"
  if [ ! -f "$deps/.installed" ]; then
    log "installing the Node example's packages (npm ci) into $deps"
    rm -rf "$deps"
    mkdir -p "$deps"
    cp "$HERE/node/package.json" "$HERE/node/package-lock.json" "$deps/"
    npm ci --prefix "$deps" --no-audit --no-fund --loglevel=error >&2
    touch "$deps/.installed"
  fi
  (
    cd "$HERE/node"
    # A node_modules that someone installed here by hand is left alone.
    if [ -L node_modules ] || [ ! -e node_modules ]; then
      ln -sfn "$deps/node_modules" node_modules
    fi
    rm -rf gen dist
    "$BUF" generate
    node_modules/.bin/tsc -p .
  ) >&2
  node "$HERE/node/dist/src/main.js" "$ADDR"
}

for example in "${WHICH[@]}"; do
  case "$example" in
    go) run_go ;;
    node) run_node ;;
    *) log "unknown example $example (want go or node)"; exit 2 ;;
  esac
done
