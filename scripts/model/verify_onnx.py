#!/usr/bin/env python3
"""Checks a built model.onnx against the sentence-transformers reference embeddings.

Runs the graph with ONNX Runtime on the reference's own input_ids (so no tokenizer is
involved), mean-pools last_hidden_state over the attention mask, L2-normalizes, and
requires every component to be within 1e-5 of the reference embedding, both for all
items in one padded batch and for each item alone. Exits non-zero on failure.

With --bench, also measures in-process throughput on 12-word sentences and lists the
ops of the graph after ONNX Runtime's optimizations (to see which fusions applied).
"""

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REFERENCE = REPO_ROOT / "server/it/tests/data/all-MiniLM-L6-v2.json"
DEFAULT_CACHE = Path(os.environ.get("EMBEDWIRE_CACHE", Path.home() / ".cache/embedwire"))
DEFAULT_MODEL = DEFAULT_CACHE / "models/all-MiniLM-L6-v2/model.onnx"
TOLERANCE = 1e-5
THREADS = 2

# Twelve words each, all single tokens in the uncased BERT vocabulary.
BENCH_SENTENCES = [
    "the quick brown fox jumps over the lazy dog in the park",
    "a small team builds a fast server for many short text requests",
    "she said that the new model works well on short english sentences",
    "we measure how many sentences per second this program can read here",
]


def make_session(model_path, optimized_path=None):
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if optimized_path:
        options.optimized_model_filepath = str(optimized_path)
        # Silences ORT's warning that the saved graph is hardware-specific: it is only read here.
        options.log_severity_level = 3
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def pad_batch(id_lists):
    """Right-pads with 0 ([PAD]) to the longest sequence, as sentence-transformers does."""
    length = max(len(ids) for ids in id_lists)
    input_ids = np.zeros((len(id_lists), length), np.int64)
    attention_mask = np.zeros_like(input_ids)
    for row, ids in enumerate(id_lists):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "token_type_ids": np.zeros_like(input_ids)}


def embed(session, id_lists):
    """Mean pooling over the attention mask, then L2 normalization (sentence-transformers)."""
    feeds = pad_batch(id_lists)
    (hidden,) = session.run(["last_hidden_state"], feeds)
    mask = feeds["attention_mask"][:, :, None].astype(np.float64)
    pooled = (hidden.astype(np.float64) * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def max_diffs(session, items):
    """Worst per-component difference to the reference: (batched, one at a time)."""
    expected = np.array([item["embedding"] for item in items])
    batched = embed(session, [item["input_ids"] for item in items])
    single = np.concatenate([embed(session, [item["input_ids"]]) for item in items])
    return np.abs(batched - expected).max(), np.abs(single - expected).max()


def verify(session, reference):
    items = reference["items"]
    too_long = [i for i, item in enumerate(items) if len(item["input_ids"]) > reference["max_seq_length"]]
    if too_long:
        raise SystemExit(f"verify_onnx: reference items {too_long} exceed max_seq_length")
    batched, single = max_diffs(session, items)
    print(f"verify_onnx: {len(items)} items, max abs diff batched {batched:.3g}, "
          f"one at a time {single:.3g} (tolerance {TOLERANCE:g})")
    return max(batched, single) <= TOLERANCE


def bench_ids(vocab_path):
    vocab = {token: index for index, token in enumerate(vocab_path.read_text().splitlines())}
    return [[vocab["[CLS]"], *(vocab[word] for word in sentence.split()), vocab["[SEP]"]]
            for sentence in BENCH_SENTENCES]


def throughput(session, id_lists, batch_size, seconds=3.0):
    batches = [[id_lists[(start + i) % len(id_lists)] for i in range(batch_size)]
               for start in range(len(id_lists))]
    feeds = [pad_batch(batch) for batch in batches]
    for feed in feeds:  # warm-up
        session.run(["last_hidden_state"], feed)
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        session.run(["last_hidden_state"], feeds[runs % len(feeds)])
        runs += 1
    return runs * batch_size / (time.perf_counter() - start)


def fused_ops(model_path):
    """Op histogram of the graph as ONNX Runtime runs it, after its fusions."""
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        make_session(model_path, optimized)
        graph = onnx.load(str(optimized), load_external_data=False).graph
        return collections.Counter(node.op_type for node in graph.node)


def bench(session, model_path):
    id_lists = bench_ids(Path(model_path).parent / "vocab.txt")
    for batch_size in (1, 8):
        rate = throughput(session, id_lists, batch_size)
        print(f"verify_onnx: bench batch {batch_size}, 12 words, {THREADS} threads: {rate:.0f} sentences/s")
    ops = ", ".join(f"{op} x{count}" for op, count in fused_ops(model_path).most_common())
    print(f"verify_onnx: ops after ORT optimization: {ops}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help=f"default: {DEFAULT_MODEL}")
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                        help=f"default: {DEFAULT_REFERENCE}")
    parser.add_argument("--bench", action="store_true", help="also measure throughput and list fused ops")
    args = parser.parse_args()

    session = make_session(args.model)
    passed = verify(session, json.loads(args.reference.read_text()))
    if args.bench:
        bench(session, args.model)
    if not passed:
        sys.exit(f"verify_onnx: FAILED: {args.model} differs from {args.reference} by more than {TOLERANCE:g}")


if __name__ == "__main__":
    main()
