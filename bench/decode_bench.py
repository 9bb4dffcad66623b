"""Client decode cost in Python of captured embedding answers: how long a Python
client takes to turn one answer into a numpy array, for each encoding.

`embedwire-bench wire` captures one real answer per variant (the same texts, the same
server) into a directory with a manifest.json ({name: {"kind", "count", "dim"}}), then
runs this script with the venv Python. Decoding is what a typical client writes:

- JSON floats: json.loads, then numpy.array(..., float32);
- JSON base64: json.loads, then numpy.frombuffer of each base64-decoded row;
- octet-stream: numpy.frombuffer of the body (shape from the headers);
- gRPC: EmbedResponse.ParseFromString (classes generated from proto/ with
  grpc_tools, as the Python client's are), then numpy.frombuffer of the bytes
  (FLOAT16 and INT8 converted to float32; UBINARY kept as packed uint8 bits;
  FLOAT32_LIST through numpy.array of the repeated field).

Every decoded array is compared with the gRPC FLOAT32 one (same values, within
the precision of the dtype), so that the timings are of equal work. Prints one
JSON object: {name: {"median_ms", "runs", "max_abs_diff"}}.
"""

import argparse
import base64
import importlib
import json
import os
import sys
import tempfile
import time

import numpy as np


def load_embed_pb2(proto_dir):
    """embedwire/v1/embed_pb2, generated now into a temporary directory."""
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="embedwire-decode-bench-")
    import grpc_tools

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    status = protoc.main(
        ["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out}", "embedwire/v1/embed.proto"]
    )
    if status != 0:
        sys.exit(f"protoc failed on {proto_dir}/embedwire/v1/embed.proto")
    sys.path.insert(0, out)
    return importlib.import_module("embedwire.v1.embed_pb2")


def decoder(kind, dim, pb2):
    if kind == "json_float":
        return lambda body: np.array([d["embedding"] for d in json.loads(body)["data"]], dtype=np.float32)
    if kind == "embed_json":
        return lambda body: np.array(json.loads(body)["embeddings"], dtype=np.float32)
    if kind == "json_base64":
        return lambda body: np.stack(
            [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in json.loads(body)["data"]]
        )
    if kind == "octet":
        return lambda body: np.frombuffer(body, dtype="<f4").reshape(-1, dim)
    if kind == "grpc":
        dtypes = pb2.EmbeddingDtype

        def decode(body):
            r = pb2.EmbedResponse()
            r.ParseFromString(body)
            shape = (r.count, r.dim)
            if r.dtype == dtypes.Value("EMBEDDING_DTYPE_FLOAT16"):
                return np.frombuffer(r.embeddings, dtype="<f2").astype(np.float32).reshape(shape)
            if r.dtype == dtypes.Value("EMBEDDING_DTYPE_INT8"):
                q = np.frombuffer(r.embeddings, dtype=np.int8).reshape(shape)
                return q * np.array(r.row_scales, dtype=np.float32)[:, None]
            if r.dtype == dtypes.Value("EMBEDDING_DTYPE_UBINARY"):
                return np.frombuffer(r.embeddings, dtype=np.uint8).reshape(r.count, -1)
            if r.dtype == dtypes.Value("EMBEDDING_DTYPE_FLOAT32_LIST"):
                return np.array(r.values, dtype=np.float32).reshape(shape)
            return np.frombuffer(r.embeddings, dtype="<f4").reshape(shape)

        return decode
    sys.exit(f"unknown kind {kind}")


def median_time(fn, body, seconds):
    samples = []
    started = time.perf_counter()
    while len(samples) < 5 or time.perf_counter() - started < seconds:
        one = time.perf_counter()
        fn(body)
        samples.append(time.perf_counter() - one)
    samples.sort()
    return samples[len(samples) // 2], len(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, help="directory with manifest.json and NAME.bin files")
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--seconds", type=float, default=0.3, help="time spent per variant")
    args = parser.parse_args()
    manifest = json.load(open(os.path.join(args.dir, "manifest.json")))
    pb2 = load_embed_pb2(args.proto_dir)
    decoded, results = {}, {}
    for name, entry in manifest.items():
        body = open(os.path.join(args.dir, f"{name}.bin"), "rb").read()
        fn = decoder(entry["kind"], entry["dim"], pb2)
        decoded[name] = fn(body)
        assert decoded[name].shape[0] == entry["count"], (name, decoded[name].shape)
        median, runs = median_time(fn, body, args.seconds)
        results[name] = {"median_ms": median * 1e3, "runs": runs}
    reference = decoded.get("grpc_float32")
    for name, array in decoded.items():
        comparable = reference is not None and array.dtype == np.float32 and array.shape == reference.shape
        results[name]["max_abs_diff"] = float(np.abs(array - reference).max()) if comparable else None
    json.dump(results, sys.stdout)
    print()


if __name__ == "__main__":
    main()
