"""The exceptions the client raises.

Every failed call raises an :class:`EmbedwireError` (or a subclass named after the gRPC
status code), never a bare ``grpc.RpcError``: callers catch one hierarchy, and the
message names the status, the method, the server address and the server's own text
(which names the field at fault for INVALID_ARGUMENT). The original ``grpc.RpcError``
stays reachable as ``__cause__``.
"""

from __future__ import annotations

import grpc


class EmbedwireError(Exception):
    """Base class of every error this package raises.

    Attributes:
        code: the gRPC status code, or None for errors found by the client itself
            (for example a malformed response).
        details: the server's (or gRPC's) message, without the prefix this class adds.
        method: the RPC that failed, e.g. ``"Embed"``, when known.
        address: the server address the failing attempt went to, when known.
        retry_after: the server's hint, in seconds, of when the same call should work
            (an overload refusal's ``grpc-retry-pushback-ms``), or None. The client
            already waited and retried on it as far as its retry policy allowed.
    """

    def __init__(
        self,
        details: str,
        *,
        code: grpc.StatusCode | None = None,
        method: str | None = None,
        address: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.code = code
        self.details = details
        self.method = method
        self.address = address
        self.retry_after = retry_after
        status = code.name if code is not None else "error"
        where = " on ".join(part for part in (method, address) if part)
        hint = f" (retry after {retry_after * 1000:.0f} ms)" if retry_after is not None else ""
        super().__init__(f"{status} ({where}): {details}{hint}" if where else f"{status}: {details}{hint}")


class InvalidArgumentError(EmbedwireError):
    """The server rejected the request (INVALID_ARGUMENT); the message names the field."""


class NotFoundError(EmbedwireError):
    """A job or document id is unknown to the server (NOT_FOUND)."""


class ResourceExhaustedError(EmbedwireError):
    """The server is at its admission limit or the message is too large
    (RESOURCE_EXHAUSTED). Retried with backoff before it reaches the caller, waiting
    at least the server's hint (``retry_after``) when the refusal carries one."""


class UnavailableError(EmbedwireError):
    """No server could be reached (UNAVAILABLE): down, refusing or shutting down."""


class DeadlineExceededError(EmbedwireError):
    """The call's timeout passed before the server answered (DEADLINE_EXCEEDED)."""


class FailedPreconditionError(EmbedwireError):
    """The server cannot do this in its current setup (FAILED_PRECONDITION), e.g. a
    rerank request to a server without a cross-encoder."""


class AuthenticationError(EmbedwireError):
    """The server refused the credentials (UNAUTHENTICATED or PERMISSION_DENIED)."""


class ProtocolError(EmbedwireError):
    """The server's answer does not match the contract (e.g. wrong byte count)."""


_BY_CODE: dict[grpc.StatusCode, type[EmbedwireError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: AuthenticationError,
}


def status_of(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    """The status code and message of a ``grpc.RpcError`` (sync or aio)."""
    code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
    details = error.details() if callable(getattr(error, "details", None)) else str(error)
    # grpcio reports a deadline that passes before the call reaches the wire (a very
    # short timeout) as CANCELLED "Timeout expired"; to the caller it is a deadline.
    if code == grpc.StatusCode.CANCELLED and details == "Timeout expired":
        code = grpc.StatusCode.DEADLINE_EXCEEDED
    return code, details or ""


#: The trailing metadata key of a refusal's retry hint, in milliseconds (gRPC's key
#: for server pushback; the server and the HTTP gateway use the same one).
RETRY_PUSHBACK_METADATA = "grpc-retry-pushback-ms"


def retry_after_of(error: grpc.RpcError) -> float | None:
    """The retry hint of a refusal, in seconds, or None when it carries no valid
    one (a missing, negative or malformed value: gRPC's design says not to honor it)."""
    trailing = error.trailing_metadata() if callable(getattr(error, "trailing_metadata", None)) else None
    for key, value in trailing or ():
        if key == RETRY_PUSHBACK_METADATA:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return int(text) / 1000.0 if text.strip().isdigit() else None
    return None


def from_rpc_error(error: grpc.RpcError, *, method: str, address: str) -> EmbedwireError:
    """Wraps a gRPC failure in the matching :class:`EmbedwireError` subclass."""
    code, details = status_of(error)
    cls = _BY_CODE.get(code, EmbedwireError)
    wrapped = cls(details, code=code, method=method, address=address, retry_after=retry_after_of(error))
    wrapped.__cause__ = error
    return wrapped
