"""Failures reach the caller as clear EmbedwireErrors, and overload is retried."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from embedwire import (
    NO_RETRY,
    AsyncClient,
    Client,
    EmbedwireError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    RetryPolicy,
    UnavailableError,
)
from server_process import ServerProcess


def closed_port_address() -> str:
    """An address nothing listens on: a port the OS just handed out and we released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_server_down_names_the_address_and_unavailable() -> None:
    address = closed_port_address()
    with Client(address, timeout=5, retry=RetryPolicy(max_attempts=2, initial_backoff=0.01)) as client:
        with pytest.raises(UnavailableError) as caught:
            client.embed(["hello"])
    error = caught.value
    assert error.code == grpc.StatusCode.UNAVAILABLE
    assert address in str(error) and "UNAVAILABLE" in str(error) and "Embed" in str(error)
    assert isinstance(error.__cause__, grpc.RpcError)


def test_async_server_down_names_the_address() -> None:
    address = closed_port_address()

    async def run() -> None:
        async with AsyncClient(address, timeout=5, retry=NO_RETRY) as client:
            await client.info()

    with pytest.raises(UnavailableError, match=address):
        asyncio.run(run())


def test_a_dead_address_among_several_is_skipped(pseudo_server: ServerProcess) -> None:
    with Client([closed_port_address(), pseudo_server.address], retry=RetryPolicy(max_attempts=3)) as client:
        for _ in range(4):  # each call starts at the next address: half start at the dead one
            assert client.embed(["hello"]).shape == (1, 384)


def test_empty_text_surfaces_the_servers_message(pseudo_server: ServerProcess) -> None:
    with Client(pseudo_server.address) as client:
        with pytest.raises(InvalidArgumentError) as caught:
            client.embed(["fine", ""])
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "inputs[1]" in caught.value.details, caught.value.details
    assert "INVALID_ARGUMENT" in str(caught.value)


def test_unknown_job_is_not_found(pseudo_server: ServerProcess) -> None:
    with Client(pseudo_server.address) as client:
        with pytest.raises(NotFoundError, match="no-such-job"):
            client.get_job("no-such-job")


def test_an_error_in_one_batch_fails_embed_many(pseudo_server: ServerProcess) -> None:
    texts = [f"t{i}" for i in range(1000)]
    texts[777] = ""
    with Client(pseudo_server.address) as client:
        with pytest.raises(InvalidArgumentError, match="is empty"):
            client.embed_many(texts, batch_size=50, max_concurrent_requests=4)


def test_resource_exhausted_is_retried_until_it_passes(
    start_server, caplog: pytest.LogCaptureFixture  # type: ignore[no-untyped-def]
) -> None:
    # The real model (tens of ms per batch) with room for one 64-input call at a time,
    # while four are sent at once: three are turned away with RESOURCE_EXHAUSTED and
    # must come back. (The pseudo backend answers too fast to collide reliably.)
    server = start_server("--backend", "onnx", "--max-in-flight-inputs", "64", "--max-inputs-per-request", "64")
    texts = [f"text {i}" for i in range(512)]
    with Client(server.address, retry=NO_RETRY) as client:
        with pytest.raises(EmbedwireError) as caught:
            client.embed_many(texts, batch_size=64, max_concurrent_requests=4)
        assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED

    caplog.set_level(logging.INFO, logger="embedwire")
    policy = RetryPolicy(max_attempts=100, initial_backoff=0.005, max_backoff=0.05)
    with Client(server.address, retry=policy) as client:
        got = client.embed_many(texts, batch_size=64, max_concurrent_requests=4)
        expected = client.embed(texts[-64:])
    retries = [r for r in caplog.records if "RESOURCE_EXHAUSTED" in r.getMessage()]
    assert retries, "the admission limit should have turned some batches away"
    np.testing.assert_allclose(got[-64:], expected, atol=1e-6)


def _refused_so_far(server: ServerProcess) -> int:
    """The server's count of calls refused for overload, from its /metrics."""
    with urllib.request.urlopen(f"http://{server.address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    match = re.search(r"^embedwire_rejected_overload_total (\d+)", text, re.MULTILINE)
    assert match, text[:2000]
    return int(match.group(1))


def test_an_overload_refusal_says_when_to_retry_and_is_ridden_out_by_default(
    start_server, caplog: pytest.LogCaptureFixture  # type: ignore[no-untyped-def]
) -> None:
    # Room for two 32-text calls at a time, the real model (100+ ms a call), and
    # bursts of 8 calls at once, four times what fits: some are refused for
    # overload, each with a hint.
    server = start_server("--backend", "onnx", "--max-in-flight-inputs", "64", "--max-inputs-per-request", "64")
    texts = [f"burst text number {i}" for i in range(32)]

    def threaded_burst(client: Client) -> list[object]:
        def one(_: int) -> object:
            try:
                return client.embed(texts)
            except EmbedwireError as error:
                return error

        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(one, range(8)))

    # Without retries the refusal surfaces with its hint, in the exception and its text.
    with Client(server.address, retry=NO_RETRY) as client:
        refused = [r for r in threaded_burst(client) if isinstance(r, EmbedwireError)]
    assert refused, "8 x 32 texts at once over a bound of 64 inputs: some are refused"
    assert all(isinstance(e, ResourceExhaustedError) for e in refused), refused
    assert all(e.retry_after is not None and 0 < e.retry_after <= 10 for e in refused), refused
    assert f"(retry after {refused[0].retry_after * 1000:.0f} ms)" in str(refused[0]), str(refused[0])

    # With the default policy (no retry argument) no refusal reaches the caller, in
    # the sync client nor in the asyncio one, though the server refused calls again.
    caplog.set_level(logging.INFO, logger="embedwire")
    before = _refused_so_far(server)
    with Client(server.address) as client:
        results = threaded_burst(client)
    assert all(isinstance(r, np.ndarray) and r.shape == (32, 384) for r in results), results

    async def async_burst() -> list[np.ndarray]:
        async with AsyncClient(server.address) as client:
            return list(await asyncio.gather(*(client.embed(texts) for _ in range(8))))

    assert all(r.shape == (32, 384) for r in asyncio.run(async_burst()))
    assert _refused_so_far(server) > before, "the bursts were refused in part, and retried"
    hinted = [r.getMessage() for r in caplog.records if re.search(r"retry after \d+ ms", r.getMessage())]
    assert hinted, "the retries followed refusals that carried a hint"
    for message in hinted:
        # "... (retry after 100 ms) (attempt 1, pause 0.123s)": never earlier than asked.
        hint_ms = float(re.search(r"retry after (\d+) ms", message).group(1))
        pause_s = float(re.search(r"pause (\d+\.\d+)s", message).group(1))
        assert pause_s >= hint_ms / 1000 - 0.0005, message


def test_tls_to_a_plaintext_server_fails_clearly(pseudo_server: ServerProcess) -> None:
    # The server speaks plaintext gRPC, so the TLS handshake that https:// asks for fails.
    with Client(f"https://{pseudo_server.address}", timeout=5, retry=NO_RETRY) as client:
        with pytest.raises(UnavailableError, match=pseudo_server.address):
            client.info()


class _Failure(grpc.RpcError):
    """An RpcError as grpcio raises it, with a code and details."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_a_deadline_grpcio_reports_as_cancelled_is_a_deadline() -> None:
    from embedwire import DeadlineExceededError
    from embedwire.errors import from_rpc_error

    timed_out = _Failure(grpc.StatusCode.CANCELLED, "Timeout expired")
    assert isinstance(from_rpc_error(timed_out, method="Embed", address="a"), DeadlineExceededError)
    # A call cancelled for another reason stays a plain cancellation.
    other = from_rpc_error(_Failure(grpc.StatusCode.CANCELLED, "Cancelled by the client"), method="Embed", address="a")
    assert not isinstance(other, DeadlineExceededError)
