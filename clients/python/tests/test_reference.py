"""With the real model, the client's arrays equal sentence-transformers' vectors."""

from __future__ import annotations

import asyncio
import json

import numpy as np

from embedwire import AsyncClient, Client
from server_process import REPO_ROOT, ServerProcess

REFERENCE = REPO_ROOT / "server" / "it" / "tests" / "data" / "all-MiniLM-L6-v2.json"
TOLERANCE = 1e-5


def reference() -> tuple[list[str], np.ndarray]:
    """The reference texts and their (n, 384) sentence-transformers vectors."""
    items = json.loads(REFERENCE.read_text())["items"]
    return [item["text"] for item in items], np.array([item["embedding"] for item in items], dtype=np.float32)


def test_vectors_match_sentence_transformers(onnx_server: ServerProcess) -> None:
    texts, expected = reference()
    with Client(onnx_server.address) as client:
        info = client.info()
        one_call = client.embed(texts)
        many = client.embed_many(texts, batch_size=5, max_concurrent_requests=4)
    assert (info.backend, info.dim) == ("onnx", 384)
    assert one_call.shape == expected.shape == (32, 384)
    assert np.abs(one_call - expected).max() <= TOLERANCE
    assert np.abs(many - expected).max() <= TOLERANCE


def test_async_vectors_match_sentence_transformers(onnx_server: ServerProcess) -> None:
    texts, expected = reference()

    async def run() -> np.ndarray:
        async with AsyncClient(onnx_server.address) as client:
            return await client.embed_many(texts, batch_size=7, max_concurrent_requests=3)

    assert np.abs(asyncio.run(run()) - expected).max() <= TOLERANCE
