#!/usr/bin/env python3
"""Regenerates the gRPC stubs under src/embedwire/v1 from the repository's proto/.

The stubs are committed, so installing the package needs neither grpcio-tools nor the
proto files; tests/test_stubs_fresh.py regenerates them into a temporary directory and
fails when the committed copy differs, so they cannot drift from proto/.

The proto package is ``embedwire.v1`` and the Python package is ``embedwire``, so the
generated ``from embedwire.v1 import embed_pb2`` imports work as they are: no import
rewriting.

Usage: python clients/python/generate.py [OUT_DIR]   (default: clients/python/src)
"""

from __future__ import annotations

import sys
from pathlib import Path

CLIENT_DIR = Path(__file__).resolve().parent
PROTO_ROOT = CLIENT_DIR.parent.parent / "proto"
PROTO_FILES = (
    "embedwire/v1/collections.proto",
    "embedwire/v1/embed.proto",
    "embedwire/v1/rerank.proto",
    "embedwire/v1/search.proto",
)
#: The files protoc writes for each proto, relative to the output directory.
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generated_files() -> list[str]:
    """Paths (relative to the output directory) of every file `generate` writes."""
    return [p.removesuffix(".proto") + s for p in PROTO_FILES for s in GENERATED_SUFFIXES]


def generate(out_dir: Path) -> None:
    """Runs protoc (from grpcio-tools) on PROTO_FILES, writing into out_dir."""
    from grpc_tools import protoc  # imported here: only generation needs grpcio-tools

    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(PROTO_ROOT / p) for p in PROTO_FILES),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else CLIENT_DIR / "src")
