#!/usr/bin/env python3
"""How much the raw-bytes wire format saves a Python client when decoding.

Decodes the same 256 x 384 float32 vectors as they arrive from embedwire (an
EmbedResponse whose ``embeddings`` are little-endian bytes, read with
``numpy.frombuffer``) and as a JSON API would send them (a list of lists of numbers),
and prints the time of each and the ratio. The target is frombuffer >= 20x faster.

Usage: python clients/python/bench_decode.py [--rows 256] [--dim 384] [--repeat 200]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import numpy as np

from embedwire import _wire
from embedwire.v1 import embed_pb2


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """The fastest of ``repeat`` runs, in seconds (the least disturbed by the machine)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((args.rows, args.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    as_bytes = embed_pb2.EmbedResponse(
        dim=args.dim, count=args.rows, dtype=embed_pb2.EMBEDDING_DTYPE_FLOAT32, embeddings=vectors.tobytes()
    ).SerializeToString()
    as_list = embed_pb2.EmbedResponse(
        dim=args.dim, count=args.rows, dtype=embed_pb2.EMBEDDING_DTYPE_FLOAT32_LIST, values=vectors.ravel()
    ).SerializeToString()
    # What an OpenAI-style JSON API sends: shortest round-trip float text.
    as_json = json.dumps({"data": [{"embedding": row} for row in vectors.tolist()]})

    def frombuffer() -> np.ndarray:
        return _wire.decode_vectors(embed_pb2.EmbedResponse.FromString(as_bytes))

    def frombuffer_copy() -> np.ndarray:
        return frombuffer().copy()

    def repeated_float() -> np.ndarray:
        return _wire.decode_vectors(embed_pb2.EmbedResponse.FromString(as_list))

    def json_loads() -> object:
        return json.loads(as_json)

    def json_numpy() -> np.ndarray:
        return np.array([item["embedding"] for item in json.loads(as_json)["data"]], dtype=np.float32)

    assert np.array_equal(frombuffer(), vectors) and np.array_equal(repeated_float(), vectors)
    assert np.allclose(json_numpy(), vectors)

    results = [
        ("protobuf bytes + numpy.frombuffer (view)", frombuffer, len(as_bytes)),
        ("protobuf bytes + numpy.frombuffer + copy", frombuffer_copy, len(as_bytes)),
        ("protobuf repeated float + numpy.array", repeated_float, len(as_list)),
        ("json.loads", json_loads, len(as_json)),
        ("json.loads + numpy.array", json_numpy, len(as_json)),
    ]
    timings = {name: best_of(fn, args.repeat) for name, fn, _ in results}
    print(f"decode {args.rows} x {args.dim} float32 (best of {args.repeat})")
    for name, _, size in results:
        print(f"  {name:<44} {timings[name] * 1e6:10.1f} us  {size / 1024:8.1f} KiB")
    fast = timings["protobuf bytes + numpy.frombuffer (view)"]
    ratio = timings["json.loads"] / fast
    ratio_numpy = timings["json.loads + numpy.array"] / timings["protobuf bytes + numpy.frombuffer + copy"]
    print(f"ratio json.loads / frombuffer: {ratio:.0f}x (target >= 20x)")
    print(f"ratio json.loads+numpy.array / frombuffer+copy: {ratio_numpy:.0f}x")


if __name__ == "__main__":
    main()
