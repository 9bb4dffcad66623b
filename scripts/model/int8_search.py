#!/usr/bin/env python3
"""Explores int8 recipes for model.onnx and prints tables, so quantize_int8.py's choice
can be reproduced. Everything is measured on calibration_sentences.txt, never on the
evaluation set (quality_sentences.txt), so the choice is not fitted to the gate.

Usage: int8_search.py [--fp32 model.onnx] [--sentences calibration_sentences.txt]
                      [--skip-static] [--max-excluded 4]

1. Recipes: unfused vs fused graph, per-channel vs per-tensor dynamic int8, and static
   QDQ calibrated (MinMax) on the calibration sentences.
2. Sensitivity: the fused per-channel graph with each quantizable node alone left in
   fp32; the table lists each node's change of the quality measures.
3. Greedy: the nodes whose exclusion raised top-10 agreement most, excluded together
   1..--max-excluded at a time, with quality and speed (batch 32, 1 thread).
"""

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx

import int8_quality as quality
import quantize_int8
import verify_int8

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = Path(os.environ.get("EMBEDWIRE_CACHE", Path.home() / ".cache/embedwire")) / "models/all-MiniLM-L6-v2/model.onnx"
MEASURES = list(quality.TARGETS)


class Bench:
    """The fp32 reference embeddings of the calibration sentences, and what to compare with."""

    def __init__(self, fp32_path, sentences_path, tmp):
        self.fp32_path, self.tmp = fp32_path, Path(tmp)
        self.id_lists = quality.tokenize(quality.read_sentences(sentences_path),
                                         fp32_path.with_name("vocab.txt"))
        self.reference = quality.embed(quality.make_session(fp32_path), self.id_lists)
        self.fp32_rate = None

    def quality(self, model_path):
        return quality.compare(self.reference, quality.embed(quality.make_session(model_path), self.id_lists))

    def speed_ratio(self, model_path):
        """int8/fp32 sentences per CPU second at batch 32, 1 thread: CPU time, because
        wall time swings with whatever else runs on a shared machine."""
        rates = []
        for path in (self.fp32_path, model_path):
            session = quality.make_session(path, threads=1, spinning=False)
            rates.append(verify_int8.throughput(session, self.id_lists, seconds=1.5)[1])
        return rates[1] / rates[0]


def row(label, metrics, base=None, extra=""):
    values = " ".join(f"{metrics[m]:>8.4f}" if base is None else f"{metrics[m] - base[m]:>+8.4f}" for m in MEASURES)
    print(f"{label:<52} {values} {extra}", flush=True)


def header(title, what="value"):
    print(f"\n{title}\n{'recipe / node (' + what + ')':<52} " + " ".join(f"{m[:8]:>8}" for m in MEASURES), flush=True)


def quantizable_nodes(fused_path):
    """Nodes of the fused graph that dynamic quantization turns into int8 ops."""
    graph = onnx.load(str(fused_path)).graph
    weights = {init.name for init in graph.initializer}
    return [node.name for node in graph.node
            if node.op_type in ("MatMul", "Attention", "Gather") and any(i in weights for i in node.input)]


class CalibrationReader:
    """Feeds calibration sentences to quantize_static in length-sorted batches of 32."""

    def __init__(self, id_lists):
        self.feeds = iter([quality.pad_batch([id_lists[i] for i in batch])
                           for batch in quality.length_batches(id_lists)])

    def get_next(self):
        return next(self.feeds, None)


def static_qdq(bench, out_path):
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    prepared = bench.tmp / "prepared.onnx"
    quant_pre_process(str(bench.fp32_path), str(prepared), skip_symbolic_shape=True)
    quantize_static(str(prepared), str(out_path), CalibrationReader(bench.id_lists),
                    quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                    calibrate_method=CalibrationMethod.MinMax,
                    extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})


def recipes(bench, skip_static):
    header("1. recipes on calibration sentences")
    candidates = {
        "unfused, per-channel dynamic": dict(fused=False),
        "fused, per-tensor dynamic": dict(per_channel=False),
        "fused, per-channel dynamic (start)": {},
    }
    for label, knobs in candidates.items():
        path = bench.tmp / "recipe.onnx"
        quantize_int8.quantize(bench.fp32_path, path, excluded=[], **knobs)
        row(label, bench.quality(path), extra=f"{bench.speed_ratio(path):.2f}x")
    if not skip_static:
        path = bench.tmp / "static.onnx"
        static_qdq(bench, path)
        row("unfused, static QDQ MinMax per-channel (calibrated)", bench.quality(path),
            extra=f"{bench.speed_ratio(path):.2f}x")


def sensitivity(bench, fused_path):
    """Each node's effect: quality with that node alone in fp32, minus the all-int8 graph's."""
    path = bench.tmp / "one.onnx"
    quantize_int8.quantize(fused_path, path, excluded=[], fused=False)
    base = bench.quality(path)
    header("2. sensitivity: change when one node stays fp32", "delta")
    row("(none: all quantized)", base)
    effects = {}
    for node in quantizable_nodes(fused_path):
        quantize_int8.quantize(fused_path, path, excluded=[node], fused=False)
        effects[node] = bench.quality(path)
        row(node, effects[node], base)
    return base, effects


def greedy(bench, fused_path, base, effects, max_excluded):
    ranked = sorted(effects, key=lambda n: effects[n]["top10_agreement"] - base["top10_agreement"], reverse=True)
    header("3. the most sensitive nodes kept fp32 together (speed: int8/fp32 per CPU-s, batch 32, 1 thread)")
    path = bench.tmp / "greedy.onnx"
    for count in range(1, max_excluded + 1):
        quantize_int8.quantize(fused_path, path, excluded=ranked[:count], fused=False)
        row(f"{count}: +{ranked[count - 1]}", bench.quality(path), extra=f"{bench.speed_ratio(path):.2f}x")
    print(f"\nranking by top-10 agreement gain: {ranked[:max_excluded]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fp32", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--sentences", type=Path, default=HERE / "calibration_sentences.txt")
    parser.add_argument("--skip-static", action="store_true")
    parser.add_argument("--max-excluded", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args.fp32, args.sentences, tmp)
        print(f"int8_search: {len(bench.id_lists)} sentences from {args.sentences.name}")
        recipes(bench, args.skip_static)
        fused_path = Path(tmp) / "fused.onnx"
        quantize_int8.fuse(args.fp32, fused_path)
        base, effects = sensitivity(bench, fused_path)
        greedy(bench, fused_path, base, effects, args.max_excluded)


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
