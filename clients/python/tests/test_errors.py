"""Failures reach the caller as clear EmbedwireErrors, and overload is retried."""

from __future__ import annotations

import asyncio
import logging
import socket

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
