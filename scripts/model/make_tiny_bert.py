#!/usr/bin/env python3
"""Writes a tiny, randomly initialized BERT model directory in the usual layout.

Usage: make_tiny_bert.py OUT_DIR

It exists to show that the server serves any BERT-family ONNX model given with
--model-dir, taking pooling and max length from the model's own config files: the
settings below differ on purpose from the default model's (CLS pooling instead of mean,
max_seq_length 48 instead of 256, hidden size 32 instead of 384).

OUT_DIR receives what a sentence-transformers checkpoint ships:
  model.safetensors, config.json    random BertModel weights (fixed seed), its config
  tokenizer.json, vocab.txt, ...    copied from the default model (same 30522-token vocab)
  sentence_bert_config.json         max_seq_length 48
  1_Pooling/config.json, modules.json   CLS pooling, no Normalize module
  model.onnx                        built by build_onnx.py from the two files above
and expected.json, what the server should answer, computed here with ONNX Runtime on
token ids from the reference file (no tokenizer needed): for the first reference texts
and for one long text (those texts joined by spaces) the ids after truncation and the
CLS-pooled, unnormalized vector. It also holds, for the test to check that it can tell
them apart, the mean-pooled vectors and the long text's vector without truncation.

The output is deterministic: the same bytes on every run.
"""

import argparse
import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import build_onnx  # next to this script, which puts its directory on sys.path

REPO_ROOT = Path(__file__).resolve().parents[2]
REFERENCE = REPO_ROOT / "server/it/tests/data/all-MiniLM-L6-v2.json"
CACHE = Path(os.environ.get("EMBEDWIRE_CACHE", Path.home() / ".cache/embedwire"))
DEFAULT_TOKENIZER_DIR = CACHE / "models/all-MiniLM-L6-v2"
TOKENIZER_FILES = ["tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"]

SEED = 20240601
MAX_SEQ_LENGTH = 48
TEXT_COUNT = 8
CLS_ID = 101
SEP_ID = 102

CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "vocab_size": 30522,  # the default model's tokenizer fits
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "max_position_embeddings": 128,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "position_embedding_type": "absolute",
    "pad_token_id": 0,
    "initializer_range": 0.02,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
}


def random_weights(config, rng):
    """BertModel's checkpoint names and shapes (Linear weights are [out, in]).

    Linear weights have std 1/sqrt(fan_in) rather than BERT's 0.02: with 0.02 attention
    would be almost uniform and the residual path would dominate, so [CLS]'s vector would
    barely depend on the rest of the text, and the test could not tell truncated inputs
    from whole ones."""
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    weights = {}

    def normal(name, shape, std):
        weights[name] = rng.normal(0.0, std, shape).astype(np.float32)

    def linear(prefix, fan_in, fan_out):
        normal(f"{prefix}.weight", (fan_out, fan_in), fan_in**-0.5)
        normal(f"{prefix}.bias", (fan_out,), 0.02)

    def layer_norm(prefix):
        weights[f"{prefix}.weight"] = (1.0 + rng.normal(0.0, 0.1, hidden)).astype(np.float32)
        normal(f"{prefix}.bias", (hidden,), 0.1)

    normal("embeddings.word_embeddings.weight", (config["vocab_size"], hidden), 1.0)
    normal("embeddings.position_embeddings.weight", (config["max_position_embeddings"], hidden), 1.0)
    normal("embeddings.token_type_embeddings.weight", (config["type_vocab_size"], hidden), 1.0)
    layer_norm("embeddings.LayerNorm")
    for index in range(config["num_hidden_layers"]):
        prefix = f"encoder.layer.{index}"
        for part in ("query", "key", "value"):
            linear(f"{prefix}.attention.self.{part}", hidden, hidden)
        linear(f"{prefix}.attention.output.dense", hidden, hidden)
        layer_norm(f"{prefix}.attention.output.LayerNorm")
        linear(f"{prefix}.intermediate.dense", hidden, inner)
        linear(f"{prefix}.output.dense", inner, hidden)
        layer_norm(f"{prefix}.output.LayerNorm")
    # BertModel's pooler is part of the checkpoint; sentence-transformers (and the
    # graph) ignore it.
    linear("pooler.dense", hidden, hidden)
    return weights


def write_safetensors(path, tensors):
    """The inverse of build_onnx.read_safetensors: 8-byte header length, JSON header,
    raw little-endian data. The header is space-padded to 8 bytes as the format advises."""
    header, offset = {}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(header_bytes)))
        out.write(header_bytes)
        for array in tensors.values():
            out.write(array.astype("<f4").tobytes())


def write_json(path, value):
    path.write_text(json.dumps(value, indent=2) + "\n")


def check_tokenizer_dir(tokenizer_dir, script):
    """Fails before anything is written when the tokenizer files to copy are missing."""
    missing = [name for name in TOKENIZER_FILES if not (tokenizer_dir / name).is_file()]
    if missing:
        raise SystemExit(f"{script}: {', '.join(missing)} missing in {tokenizer_dir} (run `make setup`)")


def copy_tokenizer(tokenizer_dir, out):
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, out / name)


def write_model_dir(out, tokenizer_dir):
    (out / "1_Pooling").mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", random_weights(CONFIG, np.random.default_rng(SEED)))
    write_json(out / "config.json", CONFIG)
    copy_tokenizer(tokenizer_dir, out)
    write_json(out / "sentence_bert_config.json", {"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False})
    write_json(out / "1_Pooling/config.json", {
        "word_embedding_dimension": CONFIG["hidden_size"],
        "pooling_mode_cls_token": True,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    })
    write_json(out / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ])
    # Read back from the files just written, as build_onnx.py's own main does.
    config = json.loads((out / "config.json").read_text())
    build_onnx.check_config(config)
    weights = build_onnx.bert_weights(build_onnx.read_safetensors(out / "model.safetensors"))
    onnx.save(build_onnx.build_model(config, weights), out / "model.onnx")


def truncate(ids):
    """What a BERT tokenizer keeps of a too-long input: the first ids, then [SEP]."""
    if len(ids) <= MAX_SEQ_LENGTH:
        return list(ids)
    return list(ids[: MAX_SEQ_LENGTH - 1]) + [SEP_ID]


def hidden_states(session, ids):
    """last_hidden_state [seq_len, hidden] of one unpadded input."""
    input_ids = np.array([ids], np.int64)
    feeds = {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids),
             "token_type_ids": np.zeros_like(input_ids)}
    (hidden,) = session.run(["last_hidden_state"], feeds)
    return hidden[0]


def rounded(vector):
    # float32 values as the shortest decimal that reads back to the same float32.
    return [float(np.format_float_positional(v, unique=True)) for v in np.asarray(vector, np.float32)]


def expected_entry(session, text, full_ids):
    ids = truncate(full_ids)
    hidden = hidden_states(session, ids)
    return {
        "text": text,
        "input_ids": ids,
        "cls": rounded(hidden[0]),
        "mean": rounded(hidden.mean(axis=0)),
        "untruncated_cls": rounded(hidden_states(session, full_ids)[0]),
        "untruncated_count": len(full_ids),
    }


def joined(items):
    """The reference items' texts joined by spaces, and that text's ids. BERT's normalizer
    works per character and its pre-tokenizer splits at whitespace, so the joined text's
    ids are the texts' ids between one [CLS] and one [SEP]."""
    ids = [CLS_ID] + [i for item in items for i in item["input_ids"][1:-1]] + [SEP_ID]
    return " ".join(item["text"] for item in items), ids


def reference_session(model_path):
    """An ONNX Runtime session that computes the same sums in the same order every run."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def write_expected(out):
    items = json.loads(REFERENCE.read_text())["items"][:TEXT_COUNT]
    session = reference_session(out / "model.onnx")
    texts = [expected_entry(session, item["text"], item["input_ids"]) for item in items]
    long_text, long_ids = joined(items)
    if len(long_ids) <= MAX_SEQ_LENGTH:
        raise SystemExit(f"make_tiny_bert: the long text has only {len(long_ids)} tokens")
    write_json(out / "expected.json", {
        "max_seq_length": MAX_SEQ_LENGTH,
        "dim": CONFIG["hidden_size"],
        "texts": texts,
        "long": expected_entry(session, long_text, long_ids),
    })


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write (created if missing)")
    parser.add_argument("--tokenizer-from", type=Path, default=DEFAULT_TOKENIZER_DIR,
                        help=f"model directory to copy the tokenizer files from (default: {DEFAULT_TOKENIZER_DIR})")
    args = parser.parse_args()
    check_tokenizer_dir(args.tokenizer_from, "make_tiny_bert")
    write_model_dir(args.out_dir, args.tokenizer_from)
    write_expected(args.out_dir)
    print(f"make_tiny_bert: wrote {args.out_dir}")


if __name__ == "__main__":
    main()
