#!/usr/bin/env bash
# bench/run.sh [--quick]: every benchmark of bench/, one after the other (each alone
# on the machine), then bench/results/REPORT.md with its plots (bench/report.py).
#
#   embed-bench     the server against the in-process ONNX Runtime ceiling
#   latency-bench   one caller's time, split into model, server and client (c=1)
#   precision-bench int8 against fp32: throughput at 32 clients and the quality int8 costs
#   wire-bench      gRPC dtypes against HTTP JSON floats, base64, octet-stream
#   ghz-suite       Embed 1/32/256, EmbedStream, Search under ghz, pseudo and onnx
#   gateway-bench   /v1/search: embedwire against the Python baseline; HTTP vs gRPC
#   index-bench     exact and HNSW search at 100k vectors (1M: run it on its own)
#   rerank-bench    Rerank pairs/s at c=1..32: cross-encoder vs its in-process
#                   ceiling, and the bi-encoder fallback
#   client-bench    CPU per vector of the Python client (sync and asyncio) against
#                   the Rust client's, on the pseudo backend
#
# Full run: about 18 minutes on 2 cores, results in bench/results/. --quick: every
# piece for a few seconds, results in $BENCH_RESULTS_DIR (default
# target/bench-quick), so a quick run never overwrites the real figures. Not part of
# this run (`make bench-long` runs them): `embedwire-bench search` (about 6 minutes), `embedwire-bench overload`,
# `embedwire-bench soak`, `embedwire-bench index` at 1M, and `embedwire-bench store` (about 15 minutes: the embedded store
# against Weaviate clusters of 1 and 3 nodes and PostgreSQL, results in bench/results/store/).
#
# Builds the server, the bench and the Rust client's bench first (BENCH_NO_BUILD=1
# skips that, to measure the binaries already in target/release; BENCH_SERVER_BIN
# names another server binary). Needs `make setup` (model, ONNX Runtime, ghz, the
# venv). Exits non-zero if any step failed; the report is written anyway and says
# which sections are missing.
set -uo pipefail

cd "$(dirname "$0")/.."
QUICK=""
if [[ "${1:-}" == "--quick" ]]; then
    QUICK="--quick"
elif [[ -n "${1:-}" ]]; then
    echo "usage: bench/run.sh [--quick]" >&2
    exit 2
fi
CACHE="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}"
PYTHON="$CACHE/venv/bin/python"
BIN=./target/release
if [[ -n "$QUICK" ]]; then
    RESULTS="${BENCH_RESULTS_DIR:-target/bench-quick}"
else
    RESULTS="${BENCH_RESULTS_DIR:-bench/results}"
fi
mkdir -p "$RESULTS/logs"
INFO="$RESULTS/run_info.csv"
echo "step,seconds,load_before,load_after,status" > "$INFO"
FAILED=0

load() { cut -d' ' -f1-3 /proc/loadavg; }

# step NAME OUTPUTS... -- COMMAND...: removes the step's old outputs (a failed step
# must not leave last run's figures in the report), runs it with its output in
# logs/NAME.log, and records its time and the machine's load around it. OUTPUTS are
# globs of the files the step writes, not its folders: notes kept beside the results
# (rerank/NOTES.md, wire/issue14/) must survive a run.
step() {
    local name="$1"
    shift
    while [[ "$1" != "--" ]]; do
        # Unquoted on purpose: the glob expands here; one that matches nothing stays
        # literal and rm -f ignores it.
        # shellcheck disable=SC2086
        rm -rf "${RESULTS:?}"/$1
        shift
    done
    shift
    local before started status
    before="$(load)"
    started=$(date +%s.%N)
    echo "=== $name: $*"
    "$@" 2>&1 | tee "$RESULTS/logs/$name.log"
    status=${PIPESTATUS[0]}
    echo "$name,$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $started }"),$before,$(load),$status" >> "$INFO"
    if [[ $status -ne 0 ]]; then
        echo "=== $name FAILED ($status); see $RESULTS/logs/$name.log" >&2
        FAILED=1
    fi
}

started=$(date +%s)
if [[ -z "${BENCH_NO_BUILD:-}" ]]; then
    echo "=== build"
    # Two builds, as the bench programs build the server themselves: building both
    # packages at once would unify their dependencies' features into a third
    # variant of every shared crate, compiled for nothing.
    cargo build --release -p embedwire-server --bin embedwire-server || exit 1
    cargo build --release -p embedwire-bench || exit 1
    # --workspace: the features of `make setup`'s build, so nothing shared is rebuilt.
    cargo build --release --workspace --bin embedwire-client-bench || exit 1
fi
SERVER=(--server-bin "${BENCH_SERVER_BIN:-$BIN/embedwire-server}")

step embed-bench 'embed_bench*' -- \
    "$BIN/embedwire-bench" embed $QUICK "${SERVER[@]}" --results-dir "$RESULTS"
step latency-bench 'latency/latency*' -- \
    "$BIN/embedwire-bench" latency $QUICK "${SERVER[@]}" --results-dir "$RESULTS/latency"
step precision-bench 'precision/precision*' -- \
    "$BIN/embedwire-bench" precision $QUICK "${SERVER[@]}" --results-dir "$RESULTS/precision"
step wire-bench 'wire/wire*' -- \
    "$BIN/embedwire-bench" wire $QUICK "${SERVER[@]}" --results-dir "$RESULTS/wire"
step ghz-suite 'ghz/ghz_*' ghz/onnx ghz/pseudo -- \
    "$BIN/embedwire-bench" ghz $QUICK "${SERVER[@]}" --results-dir "$RESULTS/ghz"
step gateway-bench 'gateway/gateway*' 'gateway/requests_*' 'gateway/rss_*' -- \
    "$BIN/embedwire-bench" gateway $QUICK "${SERVER[@]}" --results-dir "$RESULTS/gateway"
# In index/, so that the index_bench.csv of a separate 1M run stays as it is.
if [[ -n "$QUICK" ]]; then
    step index-bench 'index/index_bench*' -- "$BIN/embedwire-bench" index --quick --results-dir "$RESULTS/index"
else
    step index-bench 'index/index_bench*' -- "$BIN/embedwire-bench" index --sizes 100000 --results-dir "$RESULTS/index"
fi
step rerank-bench 'rerank/rerank_bench*' -- \
    "$BIN/embedwire-bench" rerank $QUICK "${SERVER[@]}" --results-dir "$RESULTS/rerank"
step client-bench 'clients/client*' clients/summary.csv -- \
    "$BIN/embedwire-bench" clients $QUICK "${SERVER[@]}" --results-dir "$RESULTS/clients"

echo "=== report"
"$PYTHON" bench/report.py --results "$RESULTS" $QUICK || FAILED=1
echo "=== bench/run.sh $QUICK: $(( $(date +%s) - started )) s, results in $RESULTS"
exit $FAILED
