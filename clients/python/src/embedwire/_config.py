"""The settings both clients share, checked once when a client is built."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ._endpoints import Address, channel_options, parse_addresses, read_root_certificates
from .retry import RetryPolicy

#: Default deadline of one call, in seconds: generous for a loaded server, finite so a
#: wedged connection surfaces as DEADLINE_EXCEEDED instead of hanging a program.
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class ClientConfig:
    """Everything a client needs besides its channels.

    Attributes:
        addresses: the servers, in the order calls rotate over them.
        timeout: default deadline of each call, in seconds (None: no deadline).
        metadata: headers sent with every call (authorization included).
        retry: how RESOURCE_EXHAUSTED and UNAVAILABLE are retried.
        root_certificates: PEM roots for TLS channels (None: the system's).
        options: gRPC channel arguments.
        collection: the collection document calls act on ("": the default one).
    """

    addresses: tuple[Address, ...]
    timeout: float | None
    metadata: tuple[tuple[str, str], ...]
    retry: RetryPolicy
    root_certificates: bytes | None
    options: tuple[tuple[str, Any], ...]
    collection: str = ""


def build_config(
    addresses: str | Sequence[str],
    *,
    timeout: float | None,
    api_key: str | None,
    metadata: Sequence[tuple[str, str]],
    root_certificates: bytes | str | Path | None,
    tls: bool | None,
    retry: RetryPolicy | None,
    channel_options_: Sequence[tuple[str, Any]],
) -> ClientConfig:
    """Validates the constructor arguments of a client into a ClientConfig."""
    roots = read_root_certificates(root_certificates)
    headers = [(k.lower(), v) for k, v in metadata]
    if api_key is not None:
        if any(k == "authorization" for k, _ in headers):
            raise ValueError("give either api_key or an authorization header, not both")
        headers.append(("authorization", f"Bearer {api_key}"))
    if timeout is not None and timeout <= 0:
        raise ValueError("timeout must be positive (or None for no deadline)")
    return ClientConfig(
        addresses=tuple(parse_addresses(addresses, tls=roots is not None if tls is None else tls)),
        timeout=timeout,
        metadata=tuple(headers),
        retry=retry or RetryPolicy(),
        root_certificates=roots,
        options=tuple(channel_options(channel_options_)),
    )
