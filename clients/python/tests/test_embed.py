"""Embed through the clients against a pseudo-backend server: shapes, dtypes, options,
and that embed_many keeps input order for 10k texts (sync and async)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from embedwire import AsyncClient, Client
from server_process import ServerProcess

TEXTS_10K = [f"text {i}: {'lorem ipsum ' * (i % 7)}{i * 7919 % 10007}" for i in range(10_000)]


def one_call_per_thousand(client: Client, texts: list[str]) -> np.ndarray:
    """The reference: plain sequential embed calls of 1000 texts, no concurrency."""
    return np.concatenate([client.embed(texts[i : i + 1000]) for i in range(0, len(texts), 1000)])


def test_embed_returns_a_read_only_float32_view(pseudo_server: ServerProcess) -> None:
    with Client(pseudo_server.address) as client:
        vectors = client.embed(["hello", "world", "hello"])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert not vectors.flags.writeable, "a frombuffer view of the response bytes"
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors[0], vectors[2])
    assert not np.array_equal(vectors[0], vectors[1])


def test_options_and_dtypes(pseudo_server: ServerProcess) -> None:
    with Client(pseudo_server.address) as client:
        full = client.embed(["a text"])
        raw = client.embed(["a text"], normalize=False)
        short = client.embed(["a text"], dimensions=64)
        half = client.embed_detailed(["a text"], dtype="float16")
        int8 = client.embed_detailed(["a text"], dtype="int8")
        bits = client.embed(["a text"], dtype="ubinary")
        listed = client.embed(["a text"], dtype="float32_list")
    assert short.shape == (1, 64)
    np.testing.assert_allclose(np.linalg.norm(short), 1.0, atol=1e-5)
    np.testing.assert_allclose(raw / np.linalg.norm(raw), full, atol=1e-6)
    assert half.vectors.dtype == np.float16 and half.dtype == "float16"
    np.testing.assert_allclose(half.vectors.astype(np.float32), full, atol=1e-3)
    assert int8.row_scales is not None and int8.vectors.dtype == np.int8
    np.testing.assert_allclose(int8.vectors * int8.row_scales[:, None], full, atol=0.01)
    assert bits.shape == (1, 48) and bits.dtype == np.uint8
    assert np.array_equal(bits, np.packbits(full > 0, axis=1))
    assert np.array_equal(listed, full)
    assert half.token_counts.shape == (1,) and half.prompt_tokens == int(half.token_counts.sum())


def test_embed_many_keeps_input_order_for_10k_texts(pseudo_server: ServerProcess) -> None:
    with Client(pseudo_server.address) as client:
        expected = one_call_per_thousand(client, TEXTS_10K)
        got = client.embed_many(TEXTS_10K, batch_size=97, max_concurrent_requests=8)
        assert got.shape == (10_000, 384) and got.flags.writeable
        assert np.array_equal(got, expected)
        assert client.embed_many([]).shape == (0, 384)


def test_async_embed_many_keeps_input_order_for_10k_texts(pseudo_server: ServerProcess) -> None:
    with Client(pseudo_server.address) as client:
        expected = one_call_per_thousand(client, TEXTS_10K)

    async def run() -> tuple[np.ndarray, np.ndarray]:
        async with AsyncClient(pseudo_server.address) as client:
            many = await client.embed_many(TEXTS_10K, batch_size=97, max_concurrent_requests=8)
            single = await client.embed(TEXTS_10K[5000:5010])
            return many, single

    got, single = asyncio.run(run())
    assert np.array_equal(got, expected)
    assert np.array_equal(single, expected[5000:5010])


def test_info_health_and_tokenize(pseudo_server: ServerProcess) -> None:
    with Client(pseudo_server.address) as client:
        info = client.info()
        assert client.health() == "SERVING"
        tokens = client.tokenize(["hello world", "x " * 1000])
    assert (info.dim, info.backend) == (384, "pseudo")
    assert "float32" in info.dtypes and info.limits.max_inputs_per_request > 0
    assert tokens[0].ids and not tokens[0].truncated
    assert tokens[1].truncated and len(tokens[1].ids) == info.max_input_tokens


def test_several_addresses_fail_over_when_one_stops(start_server) -> None:  # type: ignore[no-untyped-def]
    first, second = start_server("--backend", "pseudo"), start_server("--backend", "pseudo")
    with Client([first.address, second.address]) as client:
        before = client.embed_many(TEXTS_10K[:2000], batch_size=100, max_concurrent_requests=4)
        first.stop()
        after = client.embed_many(TEXTS_10K[:2000], batch_size=100, max_concurrent_requests=4)
    assert np.array_equal(before, after)


@pytest.mark.parametrize("bad", ["a string", 42])
def test_texts_must_be_a_sequence_of_strings(pseudo_server: ServerProcess, bad: object) -> None:
    with Client(pseudo_server.address) as client, pytest.raises(TypeError):
        client.embed(bad)  # type: ignore[arg-type]
