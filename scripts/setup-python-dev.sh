#!/usr/bin/env bash
# Installs scripts/requirements-dev.txt into the venv that setup-model.sh made
# ($EMBEDWIRE_CACHE/venv), then the Python client (clients/python) in editable mode.
# Skipped when the stamp matches, so a second run costs a fraction of a second.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}"
PY="$CACHE/venv/bin/python"
DEV="$ROOT/scripts/requirements-dev.txt"
PINS="$ROOT/scripts/model/requirements.txt"
STAMP="$CACHE/venv/.requirements-dev.sha256"
log() { echo "setup-python-dev: $*" >&2; }

[ -x "$PY" ] || { log "ERROR: run scripts/setup-model.sh first (no venv at $CACHE/venv)"; exit 1; }
client_files=()
if [ -f "$ROOT/clients/python/pyproject.toml" ]; then
  mapfile -t client_files < <(cd "$ROOT" && git ls-files clients/python/pyproject.toml 'proto/*.proto' 2>/dev/null || true)
fi
# The checkout's path is part of the stamp: the editable install points into it.
want="$( (echo "$ROOT"; cat "$DEV" "$PINS"; for f in "${client_files[@]}"; do cat "$ROOT/$f"; done) | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
log "installing $(grep -c '==' "$DEV") dev packages (with dependencies, model pins as constraints)"
"$PY" -m pip install --quiet --disable-pip-version-check --only-binary=:all: -r "$DEV" -c "$PINS" >&2
if [ -f "$ROOT/clients/python/pyproject.toml" ]; then
  log "installing the Python client (editable) from clients/python"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT/clients/python" >&2
fi
echo "$want" >"$STAMP"
