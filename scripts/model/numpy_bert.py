#!/usr/bin/env python3
"""BertForSequenceClassification's forward pass in float64 NumPy: a reference for graphs.

Usage (as a module):
    weights = numpy_bert.read_weights(MODEL_DIR / "model.safetensors")
    numpy_bert.logits(weights, config, ids, type_ids)              # one pair: [num_labels]
    numpy_bert.logits(weights, config, [ids, ...], [types, ...])   # a list: [n, num_labels]

It exists so that a cross-encoder graph (build_onnx.py's, run by ONNX Runtime in float32)
can be checked against something that shares none of its code: only reading the
safetensors file is shared. The math follows Hugging Face's BertModel at inference
(dropout is the identity): word + token type + position embeddings and LayerNorm; per
layer, multi-head self-attention with an additive mask, dense + residual + LayerNorm,
exact (erf) GELU feed-forward, dense + residual + LayerNorm; then the classification
head: the pooler (dense + tanh on [CLS]'s vector) and the classifier Linear.
float64 throughout, so its own rounding is far below float32's.
"""

import math

import numpy as np

import build_onnx  # next to this script, which puts its directory on sys.path

# HF's additive mask value, torch.finfo(float32).min: exp of it underflows to exactly 0
# in float64 too, so padding gets no weight at all.
MASK_NEGATIVE = float(np.finfo(np.float32).min)

# NumPy has no erf ufunc (and scipy is not in the venv); math.erf is exact to float64
# and fast enough for a few thousand tokens.
_erf = np.frompyfunc(math.erf, 1, 1)


def read_weights(path):
    """{name: float64 array} from a safetensors file, BertModel names without the
    "bert." prefix that task checkpoints add (the head keeps "pooler." and "classifier.")."""
    return {name.removeprefix("bert."): np.asarray(array, np.float64)
            for name, array in build_onnx.read_safetensors(path).items() if array.dtype.kind == "f"}


def linear(weights, x, prefix):
    # Checkpoint Linear weights are [out, in].
    return x @ weights[f"{prefix}.weight"].T + weights[f"{prefix}.bias"]


def layer_norm(weights, x, prefix, eps):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased, as torch's
    return (x - mean) / np.sqrt(variance + eps) * weights[f"{prefix}.weight"] + weights[f"{prefix}.bias"]


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def softmax(x):
    # Subtracting the row maximum keeps exp finite; it does not change the result.
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def self_attention(weights, x, mask_bias, prefix, num_heads):
    """x [B, S, W] -> context [B, S, W]; mask_bias [B, 1, 1, S] is added to the scores."""
    batch, seq_len, width = x.shape
    head_size = width // num_heads

    def split_heads(y):  # [B, S, W] -> [B, N, S, H]
        return y.reshape(batch, seq_len, num_heads, head_size).transpose(0, 2, 1, 3)

    q = split_heads(linear(weights, x, f"{prefix}.query"))
    k = split_heads(linear(weights, x, f"{prefix}.key"))
    v = split_heads(linear(weights, x, f"{prefix}.value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_size) + mask_bias
    context = softmax(scores) @ v
    return context.transpose(0, 2, 1, 3).reshape(batch, seq_len, width)


def encoder(weights, config, ids, type_ids, attention_mask):
    """Last hidden states [B, S, W] for int arrays ids, type_ids, attention_mask [B, S]."""
    eps = config["layer_norm_eps"]
    seq_len = ids.shape[1]
    x = (weights["embeddings.word_embeddings.weight"][ids]
         + weights["embeddings.token_type_embeddings.weight"][type_ids]
         + weights["embeddings.position_embeddings.weight"][:seq_len])
    x = layer_norm(weights, x, "embeddings.LayerNorm", eps)
    mask_bias = (1.0 - attention_mask[:, None, None, :].astype(np.float64)) * MASK_NEGATIVE
    for index in range(config["num_hidden_layers"]):
        prefix = f"encoder.layer.{index}"
        context = self_attention(weights, x, mask_bias, f"{prefix}.attention.self", config["num_attention_heads"])
        x = layer_norm(weights, linear(weights, context, f"{prefix}.attention.output.dense") + x,
                       f"{prefix}.attention.output.LayerNorm", eps)
        inner = gelu(linear(weights, x, f"{prefix}.intermediate.dense"))
        x = layer_norm(weights, linear(weights, inner, f"{prefix}.output.dense") + x,
                       f"{prefix}.output.LayerNorm", eps)
    return x


def classification_head(weights, hidden):
    """hidden [B, S, W] -> logits [B, num_labels], from each row's first ([CLS]) vector."""
    pooled = np.tanh(linear(weights, hidden[:, 0], "pooler.dense"))
    return linear(weights, pooled, "classifier")


def batch_logits(weights, config, ids, type_ids, attention_mask):
    """Logits [B, num_labels] of a padded batch (int arrays [B, S])."""
    ids, type_ids, attention_mask = (np.asarray(a, np.int64) for a in (ids, type_ids, attention_mask))
    return classification_head(weights, encoder(weights, config, ids, type_ids, attention_mask))


def logits(weights, config, ids, type_ids):
    """Logits [num_labels] of one pair's ids and token type ids (unpadded), or
    [n, num_labels] of a list of pairs, each run on its own (no padding)."""
    if len(ids) and not np.isscalar(ids[0]):
        return np.stack([logits(weights, config, i, t) for i, t in zip(ids, type_ids)])
    ids = np.asarray([ids], np.int64)
    return batch_logits(weights, config, ids, np.asarray([type_ids], np.int64), np.ones_like(ids))[0]
