#!/usr/bin/env python3
"""Writes a tiny, randomly initialized BERT cross-encoder model directory.

Usage: make_tiny_cross_encoder.py OUT_DIR

A cross-encoder scores a (query, passage) pair read together as
[CLS] query [SEP] passage [SEP]. This one has the layout of
cross-encoder/ms-marco-MiniLM-L-6-v2 exported with optimum: a
BertForSequenceClassification with one label whose graph outputs logits [batch, 1].
Its BERT is make_tiny_bert.py's (hidden size 32, 2 layers) plus the classification head
(pooler: dense + tanh on [CLS]; classifier: Linear(32, 1)), and its
max_position_embeddings is 64, so the longest pair is 64 tokens and a long passage is cut.

OUT_DIR receives:
  model.safetensors, config.json   random weights (fixed seed) under the checkpoint names
                                   of BertForSequenceClassification ("bert." prefix,
                                   "classifier."), and its config
  tokenizer.json, vocab.txt, ...   copied from the default model (same 30522-token vocab)
  model.onnx                       built by build_onnx.py from the two files above
and expected.json, what the server should compute, from ONNX Runtime on token ids
built from the reference file (no tokenizer needed): for one query and 8 passages (the
last one too long to fit), each pair's ids and token type ids after truncation and its
logit; each pair's logit with all token types 0, for the test to check that it can tell
them apart; and the passages' order by descending logit.

The output is deterministic: the same bytes on every run.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import onnx

import build_onnx  # next to this script, which puts its directory on sys.path
import make_tiny_bert

MAX_LENGTH = 64
NUM_LABELS = 1
CONFIG = {
    **make_tiny_bert.CONFIG,
    "architectures": ["BertForSequenceClassification"],
    "max_position_embeddings": MAX_LENGTH,
    "id2label": {"0": "LABEL_0"},
    "label2id": {"LABEL_0": 0},
}

QUERY = "What is the capital of France?"
# Reference texts; the last passage is all of them joined, longer than MAX_LENGTH.
PASSAGES = [
    "Paris is the capital and most populous city of France.",
    "Berlin is the capital of Germany.",
    "How do I reset my password?",
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog.",
    "Rust guarantees memory safety without a garbage collector.",
    "Vector search finds documents whose embeddings are close to the query embedding.",
]

# Scores closer than this could swap places within the test's tolerance.
MIN_LOGIT_GAP = 1e-3


def random_weights(rng):
    """make_tiny_bert's BertModel weights under the "bert." prefix, and the classifier."""
    weights = {f"bert.{name}": array for name, array in make_tiny_bert.random_weights(CONFIG, rng).items()}
    hidden = CONFIG["hidden_size"]
    weights["classifier.weight"] = rng.normal(0.0, hidden**-0.5, (NUM_LABELS, hidden)).astype(np.float32)
    weights["classifier.bias"] = rng.normal(0.0, 0.02, (NUM_LABELS,)).astype(np.float32)
    return weights


def write_model_dir(out, tokenizer_dir):
    out.mkdir(parents=True, exist_ok=True)
    weights = random_weights(np.random.default_rng(make_tiny_bert.SEED))
    make_tiny_bert.write_safetensors(out / "model.safetensors", weights)
    make_tiny_bert.write_json(out / "config.json", CONFIG)
    make_tiny_bert.copy_tokenizer(tokenizer_dir, out)
    # Read back from the files just written, as build_onnx.py's own main does.
    config = json.loads((out / "config.json").read_text())
    build_onnx.check_config(config)
    weights = build_onnx.bert_weights(build_onnx.read_safetensors(out / "model.safetensors"))
    onnx.save(build_onnx.build_cross_encoder(config, weights), out / "model.onnx")


def pair_encoding(query_ids, passage_ids):
    """[CLS] query [SEP] passage [SEP] from the texts' own encodings, token type 0 through
    the first [SEP] and 1 after, cut to MAX_LENGTH. Longest-first truncation of a short
    query and a long passage takes tokens off the passage's end only."""
    query, passage = query_ids[1:-1], passage_ids[1:-1]
    room = MAX_LENGTH - 3 - len(query)
    if len(query) > room:
        raise SystemExit("make_tiny_cross_encoder: the query is too long to be left whole")
    kept = passage[:room]
    ids = [make_tiny_bert.CLS_ID, *query, make_tiny_bert.SEP_ID, *kept, make_tiny_bert.SEP_ID]
    token_types = [0] * (len(query) + 2) + [1] * (len(kept) + 1)
    return ids, token_types, len(kept) < len(passage)


def logit(session, ids, token_types):
    input_ids = np.array([ids], np.int64)
    feeds = {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids),
             "token_type_ids": np.array([token_types], np.int64)}
    (logits,) = session.run(["logits"], feeds)
    return make_tiny_bert.rounded(logits[0])[0]


def write_expected(out):
    items = {item["text"]: item for item in json.loads(make_tiny_bert.REFERENCE.read_text())["items"]}
    passages = [(text, items[text]["input_ids"]) for text in PASSAGES]
    passages.append(make_tiny_bert.joined([items[text] for text in PASSAGES]))
    session = make_tiny_bert.reference_session(out / "model.onnx")
    entries = []
    for text, passage_ids in passages:
        ids, token_types, truncated = pair_encoding(items[QUERY]["input_ids"], passage_ids)
        entries.append({
            "text": text,
            "input_ids": ids,
            "token_type_ids": token_types,
            "truncated": truncated,
            "logit": logit(session, ids, token_types),
            "logit_without_token_types": logit(session, ids, [0] * len(ids)),
        })
    if not entries[-1]["truncated"]:
        raise SystemExit(f"make_tiny_cross_encoder: the long passage fits in {MAX_LENGTH} tokens")
    order = sorted(range(len(entries)), key=lambda i: -entries[i]["logit"])
    gaps = [entries[a]["logit"] - entries[b]["logit"] for a, b in zip(order, order[1:])]
    if min(gaps) < MIN_LOGIT_GAP:
        raise SystemExit(f"make_tiny_cross_encoder: two logits are {min(gaps)} apart; pick another seed")
    make_tiny_bert.write_json(out / "expected.json", {
        "max_length": MAX_LENGTH,
        "query": QUERY,
        "passages": entries,
        "order": order,
    })


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write (created if missing)")
    parser.add_argument("--tokenizer-from", type=Path, default=make_tiny_bert.DEFAULT_TOKENIZER_DIR,
                        help=f"model directory to copy the tokenizer files from "
                             f"(default: {make_tiny_bert.DEFAULT_TOKENIZER_DIR})")
    args = parser.parse_args()
    make_tiny_bert.check_tokenizer_dir(args.tokenizer_from, "make_tiny_cross_encoder")
    write_model_dir(args.out_dir, args.tokenizer_from)
    write_expected(args.out_dir)
    print(f"make_tiny_cross_encoder: wrote {args.out_dir}")


if __name__ == "__main__":
    main()
