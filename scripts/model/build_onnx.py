#!/usr/bin/env python3
"""Builds an fp32 ONNX graph of a Hugging Face BERT checkpoint from its model.safetensors.

Usage: build_onnx.py MODEL_DIR OUTPUT.onnx

MODEL_DIR holds config.json and model.safetensors. The graph has the interface of the
usual HF/optimum exports: int64 input_ids, attention_mask and token_type_ids of shape
[batch_size, sequence_length], and float32 last_hidden_state [batch_size,
sequence_length, hidden_size]; pooling is left to the caller. A checkpoint whose
config.json names BertForSequenceClassification (a cross-encoder such as
cross-encoder/ms-marco-MiniLM-L-6-v2) gets its classification head instead, and the
graph outputs float32 logits [batch_size, num_labels], as optimum exports it.

The weights go to OUTPUT.onnx.data beside the graph, each tensor at an offset aligned
to 64 KiB (see save_with_mapped_weights): ONNX Runtime then maps them from the file
instead of copying them into its own memory.

The nodes are laid out the way torch.onnx.export lays out HF's BertModel at opset 17
(LayerNormalization, erf GELU, MatMul/Add/Reshape/Transpose/Softmax attention with an
additive mask), because ONNX Runtime's graph fusions match exactly those patterns.
"""

import argparse
import json
import math
import struct
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Opset 17 is the first with LayerNormalization, and what torch exports by default:
# ONNX Runtime's fusions are written against the op versions it implies.
OPSET = 17

# HF's additive attention mask is (1 - mask) * torch.finfo(float32).min: softmax then
# gives padding exactly zero weight, as in the reference.
MASK_NEGATIVE = float(np.finfo(np.float32).min)

# safetensors dtype names -> little-endian numpy dtypes (the format is little-endian).
SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}

# Dynamic dimensions of the three int64 inputs (and the leading ones of the output).
INPUT_DIMS = ["batch_size", "sequence_length"]


def read_safetensors(path):
    """Returns {name: array}. The format is an 8-byte header length, a JSON header of
    dtype/shape/offsets per tensor, then the raw data; numpy reads it directly."""
    data = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in SAFETENSORS_DTYPES:
            raise ValueError(f"{name}: unsupported safetensors dtype {info['dtype']}")
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=SAFETENSORS_DTYPES[info["dtype"]])
        tensors[name] = array.reshape(info["shape"])
    return tensors


def bert_weights(tensors):
    """Strips the "bert." prefix that task checkpoints (BertForMaskedLM...) put on the
    BertModel weights, and casts floating weights to fp32."""
    weights = {}
    for name, array in tensors.items():
        name = name.removeprefix("bert.")
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        weights[name] = array
    return weights


def check_config(config):
    """Rejects BERT variants this graph does not implement rather than building a wrong one."""
    if config.get("model_type") != "bert":
        raise ValueError(f"model_type {config.get('model_type')!r} is not 'bert'")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"hidden_act {config['hidden_act']!r}: only exact 'gelu' is implemented")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings are implemented")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ValueError("hidden_size is not a multiple of num_attention_heads")


class GraphBuilder:
    """Accumulates nodes and initializers; every op returns its output name."""

    def __init__(self, weights):
        self.weights = weights
        self.nodes = []
        self.initializers = []

    def const(self, name, value):
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name, transpose=False):
        """Adds a checkpoint tensor; Linear weights are stored transposed ([in, out]) so
        the graph multiplies x @ W^T without a runtime Transpose, as torch exports do."""
        value = self.weights[name]
        if transpose:
            return self.const(f"{name}.T", np.ascontiguousarray(value.T))
        return self.const(name, value)

    def op(self, op_type, inputs, name, **attrs):
        output = f"{name}_output"
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=name, **attrs))
        return output


def linear(g, x, prefix):
    y = g.op("MatMul", [x, g.weight(f"{prefix}.weight", transpose=True)], f"/{prefix}/MatMul")
    return g.op("Add", [y, g.weight(f"{prefix}.bias")], f"/{prefix}/Add")


def layer_norm(g, x, prefix, eps):
    inputs = [x, g.weight(f"{prefix}.weight"), g.weight(f"{prefix}.bias")]
    return g.op("LayerNormalization", inputs, f"/{prefix}/LayerNormalization", axis=-1, epsilon=eps)


def gelu(g, x, prefix):
    """Exact GELU, 0.5 * x * (1 + erf(x / sqrt(2))), in the node order ORT's GeluFusion matches."""
    y = g.op("Div", [x, g.const(f"{prefix}.sqrt2", np.float32(math.sqrt(2.0)))], f"/{prefix}/Div")
    y = g.op("Erf", [y], f"/{prefix}/Erf")
    y = g.op("Add", [y, g.const(f"{prefix}.one", np.float32(1.0))], f"/{prefix}/Add")
    y = g.op("Mul", [x, y], f"/{prefix}/Mul")
    return g.op("Mul", [y, g.const(f"{prefix}.half", np.float32(0.5))], f"/{prefix}/Mul_1")


def embeddings(g, eps):
    """Word + token type + position embeddings, then LayerNorm. Positions are 0..S-1, so
    the position table is sliced to the sequence length instead of gathered."""
    words = g.op("Gather", [g.weight("embeddings.word_embeddings.weight"), "input_ids"],
                 "/embeddings/word_embeddings/Gather")
    types = g.op("Gather", [g.weight("embeddings.token_type_embeddings.weight"), "token_type_ids"],
                 "/embeddings/token_type_embeddings/Gather")
    seq_len = g.op("Shape", ["input_ids"], "/embeddings/Shape", start=1, end=2)
    positions = g.op("Slice", [g.weight("embeddings.position_embeddings.weight"),
                               g.const("embeddings.position_start", np.array([0], np.int64)),
                               seq_len,
                               g.const("embeddings.position_axis", np.array([0], np.int64))],
                     "/embeddings/position_embeddings/Slice")
    x = g.op("Add", [words, types], "/embeddings/Add")
    x = g.op("Add", [x, positions], "/embeddings/Add_1")
    return layer_norm(g, x, "embeddings.LayerNorm", eps)


def additive_mask(g):
    """[B, S] 0/1 mask -> [B, 1, 1, S] float bias, 0 where attended, very negative on padding."""
    m = g.op("Unsqueeze", ["attention_mask", g.const("mask.axis1", np.array([1], np.int64))],
             "/mask/Unsqueeze")
    m = g.op("Unsqueeze", [m, g.const("mask.axis2", np.array([2], np.int64))], "/mask/Unsqueeze_1")
    m = g.op("Cast", [m], "/mask/Cast", to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const("mask.one", np.float32(1.0)), m], "/mask/Sub")
    return g.op("Mul", [m, g.const("mask.negative", np.float32(MASK_NEGATIVE))], "/mask/Mul")


def heads(g, x, prefix, shape, perm):
    """[B, S, W] -> [B, N, S, H] (or [B, N, H, S] for keys, via perm)."""
    x = g.op("Reshape", [x, shape], f"/{prefix}/Reshape")
    return g.op("Transpose", [x], f"/{prefix}/Transpose", perm=perm)


def self_attention(g, x, mask, prefix, num_heads, head_size):
    split = g.const(f"{prefix}.split_heads", np.array([0, 0, num_heads, head_size], np.int64))
    q = heads(g, linear(g, x, f"{prefix}.query"), f"{prefix}.query", split, [0, 2, 1, 3])
    k = heads(g, linear(g, x, f"{prefix}.key"), f"{prefix}.key", split, [0, 2, 3, 1])
    v = heads(g, linear(g, x, f"{prefix}.value"), f"{prefix}.value", split, [0, 2, 1, 3])
    scores = g.op("MatMul", [q, k], f"/{prefix}/MatMul")
    scale = g.const(f"{prefix}.scale", np.float32(math.sqrt(head_size)))
    scores = g.op("Div", [scores, scale], f"/{prefix}/Div")
    scores = g.op("Add", [scores, mask], f"/{prefix}/Add")
    probs = g.op("Softmax", [scores], f"/{prefix}/Softmax", axis=-1)
    context = g.op("MatMul", [probs, v], f"/{prefix}/MatMul_1")
    context = g.op("Transpose", [context], f"/{prefix}/Transpose", perm=[0, 2, 1, 3])
    merge = g.const(f"{prefix}.merge_heads", np.array([0, 0, num_heads * head_size], np.int64))
    return g.op("Reshape", [context, merge], f"/{prefix}/Reshape")


def residual_norm(g, x, residual, prefix, eps):
    """BertSelfOutput / BertOutput: dense, add the residual, LayerNorm."""
    y = linear(g, x, f"{prefix}.dense")
    y = g.op("Add", [y, residual], f"/{prefix}/Add")
    return layer_norm(g, y, f"{prefix}.LayerNorm", eps)


def encoder_layer(g, x, mask, index, config):
    prefix = f"encoder.layer.{index}"
    num_heads = config["num_attention_heads"]
    head_size = config["hidden_size"] // num_heads
    eps = config["layer_norm_eps"]
    context = self_attention(g, x, mask, f"{prefix}.attention.self", num_heads, head_size)
    x = residual_norm(g, context, x, f"{prefix}.attention.output", eps)
    hidden = gelu(g, linear(g, x, f"{prefix}.intermediate.dense"), f"{prefix}.intermediate.gelu")
    return residual_norm(g, hidden, x, f"{prefix}.output", eps)


def encoder(g, config):
    """Embeddings and the encoder layers: returns the [B, S, hidden] hidden states."""
    x = embeddings(g, config["layer_norm_eps"])
    mask = additive_mask(g)
    for index in range(config["num_hidden_layers"]):
        x = encoder_layer(g, x, mask, index, config)
    return x


def classification_head(g, x):
    """BertForSequenceClassification's head on hidden states x: the pooler (dense + tanh
    on [CLS]'s vector), then the classifier. Dropout is the identity at inference."""
    first = g.op("Gather", [x, g.const("pooler.first_token", np.array(0, np.int64))], "/pooler/Gather", axis=1)
    pooled = g.op("Tanh", [linear(g, first, "pooler.dense")], "/pooler/activation/Tanh")
    return linear(g, pooled, "classifier")


def name_output(g, x, name):
    """Makes the last node write the graph output `name` directly (no Identity node to elide)."""
    assert g.nodes[-1].output[0] == x
    g.nodes[-1].output[0] = name


def finish_model(g, output_name, output_dims):
    """Wraps g's nodes in a checked model with the three inputs and one float output."""
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, INPUT_DIMS)
              for name in ("input_ids", "attention_mask", "token_type_ids")]
    output = helper.make_tensor_value_info(output_name, TensorProto.FLOAT, output_dims)
    graph = helper.make_graph(g.nodes, "bert", inputs, [output], g.initializers)
    opsets = [helper.make_opsetid("", OPSET)]
    # The oldest IR version the opset allows, as torch writes: the installed onnx package
    # would default to its newest, which ONNX Runtime may not read yet.
    model = helper.make_model(graph, opset_imports=opsets, producer_name="embedwire-build-onnx",
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model, full_check=True)
    return model


def build_model(config, weights):
    """The BertModel graph: last_hidden_state [batch_size, sequence_length, hidden_size]."""
    g = GraphBuilder(weights)
    name_output(g, encoder(g, config), "last_hidden_state")
    return finish_model(g, "last_hidden_state", [*INPUT_DIMS, config["hidden_size"]])


def build_cross_encoder(config, weights):
    """The BertForSequenceClassification graph: logits [batch_size, num_labels]."""
    g = GraphBuilder(weights)
    name_output(g, classification_head(g, encoder(g, config)), "logits")
    num_labels = weights["classifier.weight"].shape[0]
    return finish_model(g, "logits", [INPUT_DIMS[0], num_labels])


# External data offsets are aligned to this (Windows' allocation granularity, a multiple
# of every Linux page size): ONNX Runtime maps a tensor from the file only when its
# offset is aligned, and copies it into anonymous memory otherwise.
WEIGHT_ALIGNMENT = 65536

# Tensors smaller than this stay inside the graph (biases, shapes, LayerNorm scales):
# mapping them would cost a page each for nothing.
INLINE_TENSOR_BYTES = 4096


def save_with_mapped_weights(model, output):
    """Writes the graph to `output` and its large tensors to `output`.data, aligned.

    Why: ONNX Runtime maps aligned external tensors read-only from the file. Weights it
    repacks at load (the MatMuls) are read once and released; the rest, above all the
    45 MiB word-embedding table of which a text touches only its tokens' rows, stay
    file-backed pages: a server holds only the rows it has used, and servers on one
    machine share them through the page cache. Loading one 90 MB file copied all of it
    into each process (idle RSS 141 MiB; about 110 MiB this way).
    """
    data_path = Path(str(output) + ".data")
    with open(data_path, "wb") as data:
        for tensor in model.graph.initializer:
            array = numpy_helper.to_array(tensor)
            raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()  # ONNX stores LE
            if len(raw) < INLINE_TENSOR_BYTES:
                continue
            data.write(b"\0" * (-data.tell() % WEIGHT_ALIGNMENT))
            offset = data.tell()
            data.write(raw)
            for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
                tensor.ClearField(field)
            tensor.data_location = TensorProto.EXTERNAL
            del tensor.external_data[:]
            for key, value in (("location", data_path.name), ("offset", offset), ("length", len(raw))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
    onnx.save(model, output)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="directory with config.json and model.safetensors")
    parser.add_argument("output", type=Path, help="path of the model.onnx to write")
    args = parser.parse_args()

    config = json.loads((args.model_dir / "config.json").read_text())
    check_config(config)
    weights = bert_weights(read_safetensors(args.model_dir / "model.safetensors"))
    if "BertForSequenceClassification" in config.get("architectures", []):
        model = build_cross_encoder(config, weights)
    else:
        model = build_model(config, weights)
    save_with_mapped_weights(model, args.output)
    print(f"build_onnx: wrote {args.output} and its .data (opset {OPSET}, {len(model.graph.node)} nodes)")


if __name__ == "__main__":
    main()
