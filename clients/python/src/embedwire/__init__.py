"""Python client for embedwire, a gRPC embedding and search server.

    from embedwire import Client
    with Client("127.0.0.1:50051") as client:
        vectors = client.embed(["hello", "world"])        # (2, 384) float32

Vectors travel as raw little-endian bytes and are decoded with ``numpy.frombuffer``:
no per-value Python work. Arrays from ``embed`` are read-only views of the response;
``embed_many`` returns a fresh writable array.

# Layout
- ``client``: :class:`Client`, blocking; ``embed_many`` on a thread pool.
- ``aio``: :class:`AsyncClient`, the same API on ``grpc.aio``.
- ``types``: the dataclasses returned and accepted (Job, Hit, Document, Info,
  RerankResult, ...).
- ``errors``: :class:`EmbedwireError` and one subclass per meaningful status code.
- ``retry``: :class:`RetryPolicy`, backoff on RESOURCE_EXHAUSTED / UNAVAILABLE.
- ``_wire``: conversions between Python values and proto messages, shared by both.
- ``_bulk``: batch bounds and the in-order assembly of ``embed_many`` results.
- ``_endpoints``: address parsing, channels, round robin.
- ``_config``: constructor arguments checked into one config.
- ``_health``: the standard gRPC health check without grpcio-health-checking.
- ``v1``: code generated from proto/ by ``generate.py`` (committed).
"""

from .aio import AsyncClient
from .client import Client
from .errors import (
    AuthenticationError,
    DeadlineExceededError,
    EmbedwireError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ProtocolError,
    ResourceExhaustedError,
    UnavailableError,
)
from .retry import NO_RETRY, RetryPolicy
from .types import (
    ChunkSpan,
    Collection,
    Document,
    Documents,
    EmbedResult,
    Filter,
    Hit,
    IndexStats,
    Info,
    IngestResult,
    IngestStreamResult,
    Job,
    JobStatus,
    Limits,
    Rank,
    RerankResult,
    RerankTiming,
    StoredDocument,
    TokenizedInput,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "ChunkSpan",
    "Client",
    "Collection",
    "DeadlineExceededError",
    "Document",
    "Documents",
    "EmbedResult",
    "EmbedwireError",
    "FailedPreconditionError",
    "Filter",
    "Hit",
    "IndexStats",
    "Info",
    "IngestResult",
    "IngestStreamResult",
    "InvalidArgumentError",
    "Job",
    "JobStatus",
    "Limits",
    "NO_RETRY",
    "NotFoundError",
    "ProtocolError",
    "Rank",
    "RerankResult",
    "RerankTiming",
    "ResourceExhaustedError",
    "RetryPolicy",
    "StoredDocument",
    "TokenizedInput",
    "UnavailableError",
]
