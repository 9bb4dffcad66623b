"""Server addresses, the channels to them, and which one the next call goes to.

One channel per address (not gRPC's own multi-address ``ipv4:`` targets) so that host
names, IP literals and ``https://`` addresses mix freely, and so that an error can name
the address of the attempt that failed. Calls rotate over the addresses (round robin);
a call that finds its address UNAVAILABLE moves on to the next one (failover).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Sequence, TypeVar

import grpc
import grpc.aio

from .v1 import collections_pb2_grpc, embed_pb2_grpc, rerank_pb2_grpc, search_pb2_grpc
from . import _health

#: Largest message the client accepts: the server's default --max-response-bytes.
MAX_RECEIVE_BYTES = 64 * 1024 * 1024
#: Largest message the client sends: well over the server's default --max-request-bytes,
#: so that the server (not the client) says which limit a big request broke.
MAX_SEND_BYTES = 64 * 1024 * 1024

ChannelT = TypeVar("ChannelT", grpc.Channel, grpc.aio.Channel)


@dataclass(frozen=True)
class Address:
    """One server address as the user wrote it, and how to reach it.

    Attributes:
        text: the address as given (used in error messages).
        target: the gRPC target, ``host:port``.
        tls: whether the channel is encrypted.
    """

    text: str
    target: str
    tls: bool


def parse_addresses(addresses: str | Sequence[str], *, tls: bool | None) -> list[Address]:
    """Parses ``host:port``, ``http://host:port`` or ``https://host:port`` addresses.

    A string may hold several comma-separated addresses. A scheme decides TLS for its
    address; a bare ``host:port`` uses TLS when ``tls`` is true (the client sets it when
    root certificates are given).
    """
    items = [addresses] if isinstance(addresses, str) else list(addresses)
    parsed: list[Address] = []
    for item in items:
        for raw in item.split(","):
            text = raw.strip()
            if not text:
                continue
            target, secure = text, bool(tls)
            if text.startswith("https://"):
                target, secure = text[len("https://") :], True
            elif text.startswith("http://"):
                target, secure = text[len("http://") :], False
            target = target.rstrip("/")
            if ":" not in target:
                raise ValueError(f"server address {text!r} has no port (want host:port)")
            parsed.append(Address(text=text, target=target, tls=secure))
    if not parsed:
        raise ValueError("no server address given")
    return parsed


def read_root_certificates(root_certificates: bytes | str | Path | None) -> bytes | None:
    """PEM bytes from bytes, or from a file path given as str or Path."""
    if root_certificates is None or isinstance(root_certificates, bytes):
        return root_certificates
    return Path(root_certificates).read_bytes()


def channel_options(extra: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """The channel arguments every channel gets, then the caller's (which win)."""
    return [
        ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
        ("grpc.max_send_message_length", MAX_SEND_BYTES),
        *extra,
    ]


class Endpoint(Generic[ChannelT]):
    """A channel to one address and the stubs on it.

    Attributes:
        address: where the channel goes.
        channel: the gRPC channel (sync or aio).
        methods: the multi-callables by RPC name, e.g. ``methods["Embed"]``.
    """

    def __init__(self, address: Address, channel: ChannelT) -> None:
        self.address = address
        self.channel = channel
        embed = embed_pb2_grpc.EmbedServiceStub(channel)
        search = search_pb2_grpc.SearchServiceStub(channel)
        rerank = rerank_pb2_grpc.RerankServiceStub(channel)
        collections = collections_pb2_grpc.CollectionServiceStub(channel)
        self.methods: dict[str, Any] = {
            name: getattr(stub, name)
            for stub, names in (
                (embed, ("Embed", "EmbedStream", "Tokenize", "Info")),
                (rerank, ("Rerank", "RerankStream")),
                (collections, ("CreateCollection", "ListCollections", "DeleteCollection")),
                (
                    search,
                    (
                        "Ingest",
                        "IngestStream",
                        "GetJob",
                        "WatchJob",
                        "GetDocuments",
                        "DeleteDocuments",
                        "Search",
                        "SearchStream",
                        "GetIndexStats",
                    ),
                ),
            )
            for name in names
        }
        self.methods["HealthCheck"] = _health.check_method(channel)


def make_endpoints(
    addresses: Sequence[Address],
    *,
    root_certificates: bytes | None,
    options: Sequence[tuple[str, Any]],
    aio: bool,
) -> list[Endpoint[Any]]:
    """Opens one channel per address, sync or ``grpc.aio``."""
    module: Any = grpc.aio if aio else grpc
    endpoints: list[Endpoint[Any]] = []
    for address in addresses:
        if address.tls:
            credentials = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            channel = module.secure_channel(address.target, credentials, options=options)
        else:
            channel = module.insecure_channel(address.target, options=options)
        endpoints.append(Endpoint(address, channel))
    return endpoints


class RoundRobin:
    """Hands out starting indexes 0, 1, ..., n-1, 0, ... across threads."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next_start(self) -> int:
        """The index of the endpoint the next call starts with."""
        if self._n == 1:
            return 0
        with self._lock:
            return next(self._counter) % self._n

