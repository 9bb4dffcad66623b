"""How far an int8 graph's embeddings are from the fp32 graph's: the measures and targets
of issue 14, shared by verify_int8.py (the gate) and int8_search.py (the exploration).

Embeddings are made as the server makes them: last_hidden_state mean-pooled over the
attention mask, then L2-normalized. Sentences are embedded in batches of 32 after
sorting by length, as a batching server sees them; dynamic int8 quantizes activations
per batch, so the batch composition is part of what is measured.
"""

from pathlib import Path

import numpy as np
import onnxruntime as ort

from verify_onnx import pad_batch  # noqa: F401 (also used as quality.pad_batch)
from wordpiece import WordPieceTokenizer

BATCH_SIZE = 32
NEIGHBOURS = 10
WIDE_NEIGHBOURS = 20

# Issue 14's targets against fp32: name -> minimum.
TARGETS = {
    "cosine_mean": 0.99,
    "cosine_min": 0.97,
    "top10_agreement": 0.90,
    "top10_in_top20": 0.99,
}


def read_sentences(path):
    """One sentence per line; lines starting with # are comments."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def tokenize(sentences, vocab_path):
    tokenizer = WordPieceTokenizer(vocab_path)
    return [tokenizer.encode(sentence) for sentence in sentences]


def make_session(model_path, threads=2, spinning=True):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not spinning:
        # Idle worker threads then sleep instead of burning CPU, so the process's CPU
        # time is the work done: a fair cost measure when other jobs share the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def length_batches(id_lists, batch_size=BATCH_SIZE):
    """Index batches over id_lists, sorted by length (stable, so deterministic)."""
    order = sorted(range(len(id_lists)), key=lambda i: len(id_lists[i]))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def embed(session, id_lists, batch_size=BATCH_SIZE):
    """[len(id_lists), hidden] float64 unit vectors, in the order of id_lists."""
    out = None
    for batch in length_batches(id_lists, batch_size):
        feeds = pad_batch([id_lists[i] for i in batch])
        (hidden,) = session.run(["last_hidden_state"], feeds)
        mask = feeds["attention_mask"][:, :, None].astype(np.float64)
        pooled = (hidden.astype(np.float64) * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        if out is None:
            out = np.zeros((len(id_lists), pooled.shape[1]))
        out[batch] = pooled
    return out


def top_neighbours(embeddings, k):
    """Each row's k most similar other rows (self excluded), as index sets."""
    similarity = embeddings @ embeddings.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argpartition(-similarity, k, axis=1)[:, :k]


def compare(reference, candidate):
    """The issue's four measures of candidate (int8) against reference (fp32) embeddings."""
    cosines = (reference * candidate).sum(axis=1)
    ref10 = top_neighbours(reference, NEIGHBOURS)
    cand10 = top_neighbours(candidate, NEIGHBOURS)
    cand20 = top_neighbours(candidate, WIDE_NEIGHBOURS)
    agreement = [len(set(a) & set(b)) / NEIGHBOURS for a, b in zip(ref10, cand10)]
    inside = [len(set(a) & set(b)) / NEIGHBOURS for a, b in zip(ref10, cand20)]
    return {
        "cosine_mean": float(cosines.mean()),
        "cosine_min": float(cosines.min()),
        "top10_agreement": float(np.mean(agreement)),
        "top10_in_top20": float(np.mean(inside)),
    }


def missed_targets(metrics):
    return [name for name, minimum in TARGETS.items() if metrics[name] < minimum]
