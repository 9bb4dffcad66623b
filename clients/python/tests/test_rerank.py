"""Rerank through the clients against the default server (the real all-MiniLM-L6-v2, no
cross-encoder), so the scorer is the bi-encoder fallback: a text's score is the cosine
similarity of its embedding to the query's, which the test recomputes from the client's
own Embed vectors."""

from __future__ import annotations

import asyncio
import logging

import grpc
import numpy as np
import pytest

from embedwire import (
    NO_RETRY,
    AsyncClient,
    Client,
    DeadlineExceededError,
    InvalidArgumentError,
    RerankResult,
    ResourceExhaustedError,
    RetryPolicy,
)
from server_process import ServerProcess

QUERY = "How do I bake bread at home?"
TEXTS = [
    "The stock market fell sharply on Tuesday after the bank raised rates.",
    "Knead the dough, let it rise for an hour, then bake the loaf at 220 C for 30 minutes.",
    "Cats sleep for most of the day and hunt at night.",
    "A recipe for sourdough: flour, water, salt and a starter.",
]
#: The obviously relevant text, and the runner-up.
BEST, SECOND = 1, 3
#: How far a bi-encoder score may be from the dot product of the Embed vectors.
COSINE_TOLERANCE = 1e-5


def cosines(client: Client, query: str, texts: list[str]) -> np.ndarray:
    """Each text's cosine similarity to the query, from normalized Embed vectors."""
    vectors = client.embed([query, *texts])
    return vectors[1:] @ vectors[0]


def assert_best_first(result: RerankResult, n: int) -> None:
    scores = [r.score for r in result.ranks]
    assert scores == sorted(scores, reverse=True), f"not best first: {result.ranks}"
    assert sorted(r.index for r in result.ranks) == list(range(n)), "every text exactly once"


def test_ranks_best_first_with_the_bi_encoders_cosine(onnx_server: ServerProcess) -> None:
    with Client(onnx_server.address) as client:
        info = client.info()
        result = client.rerank(QUERY, TEXTS)
        expected = cosines(client, QUERY, TEXTS)
    assert info.rerank_scorer == f"bi-encoder:{info.model}"
    assert info.limits.max_rerank_texts > 0
    assert (result.scorer, result.model) == (info.rerank_scorer, info.model)
    assert_best_first(result, len(TEXTS))
    assert [r.index for r in result.ranks[:2]] == [BEST, SECOND]
    got = np.array([r.score for r in sorted(result.ranks, key=lambda r: r.index)])
    assert np.abs(got - expected).max() <= COSINE_TOLERANCE, (got, expected)
    assert all(r.text is None for r in result.ranks), "no text unless return_text"
    assert result.prompt_tokens > 0 and result.timing.total_ns > 0
    assert result.compute_chars >= len(QUERY) + sum(map(len, TEXTS))


def test_top_n_keeps_the_n_best(onnx_server: ServerProcess) -> None:
    with Client(onnx_server.address) as client:
        full = client.rerank(QUERY, TEXTS)
        two = client.rerank(QUERY, TEXTS, top_n=2)
        zero = client.rerank(QUERY, TEXTS, top_n=0)
        more = client.rerank(QUERY, TEXTS, top_n=len(TEXTS) + 5)
    assert [r.index for r in two.ranks] == [r.index for r in full.ranks[:2]] == [BEST, SECOND]
    np.testing.assert_allclose([r.score for r in two.ranks], [r.score for r in full.ranks[:2]], atol=1e-6)
    assert len(zero.ranks) == len(more.ranks) == len(TEXTS), "0 and a large n keep every text"


def test_return_text_echoes_each_text(onnx_server: ServerProcess) -> None:
    with Client(onnx_server.address) as client:
        result = client.rerank(QUERY, TEXTS, return_text=True, top_n=3)
    assert len(result.ranks) == 3
    assert [r.text for r in result.ranks] == [TEXTS[r.index] for r in result.ranks]


def test_raw_scores_leave_a_bi_encoders_cosine_alone(onnx_server: ServerProcess) -> None:
    with Client(onnx_server.address) as client:
        plain = client.rerank(QUERY, TEXTS)
        raw = client.rerank(QUERY, TEXTS, raw_scores=True)
    assert [r.index for r in raw.ranks] == [r.index for r in plain.ranks]
    np.testing.assert_allclose([r.score for r in raw.ranks], [r.score for r in plain.ranks], atol=1e-6)


def test_long_texts_truncate_by_default_and_fail_without_truncation(onnx_server: ServerProcess) -> None:
    with Client(onnx_server.address) as client:
        info = client.info()
        # Bread words first, then far more tokens than the model reads about something else.
        long_text = "bread dough oven loaf " * 40 + "stock market shares bank " * info.max_input_tokens
        assert len(long_text) <= info.limits.max_input_chars
        texts = [TEXTS[2], long_text]
        right = client.rerank(QUERY, texts)
        left = client.rerank(QUERY, texts, truncation_direction="left")
        expected = cosines(client, QUERY, texts)  # Embed truncates on the right too
        with pytest.raises(InvalidArgumentError) as text_error:
            client.rerank(QUERY, texts, truncate=False)
        with pytest.raises(InvalidArgumentError) as query_error:
            client.rerank(long_text, TEXTS[:2], truncate=False)
    got = np.array([r.score for r in sorted(right.ranks, key=lambda r: r.index)])
    assert np.abs(got - expected).max() <= COSINE_TOLERANCE, (got, expected)
    score_of = {r.index: r.score for r in left.ranks}
    assert score_of[1] < got[1], "cut from the left, the long text keeps only its finance end"
    assert text_error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "texts[1]" in text_error.value.details, text_error.value.details
    assert query_error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "query" in query_error.value.details, query_error.value.details


def test_max_tokens_per_text_cuts_each_text(onnx_server: ServerProcess) -> None:
    # A text about bread for its first ~20 tokens, then a long stretch about finance.
    mixed = "bread dough oven loaf " * 5 + "stock market shares bank " * 50
    texts = [TEXTS[2], mixed]
    with Client(onnx_server.address) as client:
        whole = client.rerank(QUERY, texts)
        zero = client.rerank(QUERY, texts, max_tokens_per_text=0)
        cut = client.rerank(QUERY, texts, max_tokens_per_text=16)
    score_of = lambda result: {r.index: r.score for r in result.ranks}  # noqa: E731
    assert score_of(zero) == pytest.approx(score_of(whole), abs=1e-6), "0 means no cut"
    assert score_of(cut)[1] > score_of(whole)[1], "cut to 16 tokens, only its bread part is left"


@pytest.mark.parametrize(
    ("query", "texts", "field"),
    [
        (QUERY, [], "texts"),
        ("", TEXTS, "query"),
        (QUERY, [TEXTS[0], ""], "texts[1]"),
    ],
    ids=["no-texts", "empty-query", "empty-text"],
)
def test_empty_fields_are_invalid_arguments_naming_the_field(
    onnx_server: ServerProcess, query: str, texts: list[str], field: str
) -> None:
    with Client(onnx_server.address) as client:
        with pytest.raises(InvalidArgumentError) as caught:
            client.rerank(query, texts)
    error = caught.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in error.details, error.details
    assert error.method == "Rerank" and "INVALID_ARGUMENT (Rerank on" in str(error)


def test_more_texts_than_the_limit_are_out_of_range(onnx_server: ServerProcess) -> None:
    with Client(onnx_server.address) as client:
        limit = client.info().limits.max_rerank_texts
        with pytest.raises(InvalidArgumentError) as caught:
            client.rerank(QUERY, [f"t{i}" for i in range(limit + 1)])
    assert caught.value.code == grpc.StatusCode.OUT_OF_RANGE
    assert "texts" in caught.value.details, caught.value.details


def test_the_deadline_applies(onnx_server: ServerProcess) -> None:
    with Client(onnx_server.address) as client:
        texts = (TEXTS * 16)[: client.info().limits.max_rerank_texts]
        with pytest.raises(DeadlineExceededError):
            # Far less time than the model needs for these texts (the client gives each
            # attempt at least 1 ms).
            client.rerank(QUERY, texts, timeout=1e-4)


def test_resource_exhausted_is_retried_until_it_passes(
    start_server, caplog: pytest.LogCaptureFixture  # type: ignore[no-untyped-def]
) -> None:
    # Room for one 63-text rerank (63 texts and the query) at a time, four sent at once
    # with the real model: some are turned away with RESOURCE_EXHAUSTED, and with a
    # retry policy all of them come back, as embed's calls do.
    server = start_server("--backend", "onnx", "--max-in-flight-inputs", "64", "--max-inputs-per-request", "64")
    texts = [f"{TEXTS[i % len(TEXTS)]} ({i})" for i in range(63)]

    async def four_at_once(retry: RetryPolicy) -> list[RerankResult | BaseException]:
        async with AsyncClient(server.address, retry=retry) as client:
            calls = (client.rerank(QUERY, texts) for _ in range(4))
            return await asyncio.gather(*calls, return_exceptions=True)

    first = asyncio.run(four_at_once(NO_RETRY))
    assert any(isinstance(r, ResourceExhaustedError) for r in first), first
    caplog.set_level(logging.INFO, logger="embedwire")
    results = asyncio.run(four_at_once(RetryPolicy(max_attempts=100, initial_backoff=0.005, max_backoff=0.05)))
    assert all(isinstance(r, RerankResult) for r in results), results
    assert any("RESOURCE_EXHAUSTED" in r.getMessage() for r in caplog.records), "nothing was retried"
    for result in results:
        assert result.ranks[0].index % len(TEXTS) == BEST, result.ranks[:3]  # type: ignore[union-attr]


def test_async_rerank_matches_the_sync_client(onnx_server: ServerProcess) -> None:
    with Client(onnx_server.address) as client:
        expected = client.rerank(QUERY, TEXTS, return_text=True)

    async def run() -> tuple[RerankResult, InvalidArgumentError]:
        async with AsyncClient(onnx_server.address) as client:
            result = await client.rerank(QUERY, TEXTS, return_text=True)
            try:
                await client.rerank("", TEXTS)
            except InvalidArgumentError as error:
                return result, error
            raise AssertionError("an empty query was accepted")

    got, error = asyncio.run(run())
    assert [(r.index, r.text) for r in got.ranks] == [(r.index, r.text) for r in expected.ranks]
    np.testing.assert_allclose([r.score for r in got.ranks], [r.score for r in expected.ranks], atol=1e-6)
    assert got.scorer == expected.scorer
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT and "query" in error.details


def test_bad_arguments_fail_in_the_client() -> None:
    # No server needed: these never reach the wire.
    with Client("127.0.0.1:1") as client:
        with pytest.raises(TypeError):
            client.rerank(QUERY, "one string")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="truncation_direction"):
            client.rerank(QUERY, TEXTS, truncation_direction="middle")  # type: ignore[arg-type]
