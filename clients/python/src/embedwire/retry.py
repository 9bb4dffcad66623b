"""When and how long to wait before trying a failed call again.

The server answers RESOURCE_EXHAUSTED when its admission limit is reached instead of
queueing without bound, so a bulk client must back off and retry rather than fail the
whole job; UNAVAILABLE means the call did not reach a working server (down, restarting,
or a dead address among several), so it is worth another address or a later try.
Other codes are the caller's problem and are raised at once.

An overload refusal carries the server's hint of when to come back (the
``grpc-retry-pushback-ms`` trailing metadata, gRPC's own key for server pushback):
the pause after it is at least that hint, stretched by a random factor so the clients
refused together do not return together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

#: Codes that say "not processed, try later": the server did no work for the call.
RETRYABLE_CODES = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, stretched to the server's retry hint.

    Attempt ``n`` (from 1) that fails with a retryable code is followed, while fewer than
    ``max_attempts`` attempts were made and the call's deadline allows, by a pause drawn
    uniformly from ``[0, min(max_backoff, initial_backoff * multiplier ** (n - 1))]``.
    Jitter spreads the retries of many concurrent batches so they do not hit the server's
    admission limit again all at the same instant. When the refusal carried a retry hint
    ``h`` (seconds), the pause is ``max(h * U[1, 1.5], backoff)``, capped at
    ``max_pushback``: never earlier than the server asked. A failover to another address
    after UNAVAILABLE does not pause: the next address is likely fine.

    Attributes:
        max_attempts: attempts in total, the first one included (1 disables retries).
        initial_backoff: upper bound of the first pause, in seconds.
        max_backoff: cap on any pause, in seconds.
        multiplier: growth of the bound from one pause to the next.
        max_pushback: cap, in seconds, on a pause taken from the server's hint, so a
            wrong hint cannot stall a call for long.
    """

    # Ten attempts: the pauses add up to about 5 s, enough to ride out a burst of
    # several times what the server admits on a loaded 2-core machine.
    max_attempts: int = 10
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    max_pushback: float = 10.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1 or self.max_pushback < 0:
            raise ValueError("RetryPolicy backoffs must be >= 0 and multiplier >= 1")

    def pause(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 1), whose
        refusal hinted ``retry_after`` seconds (None: no hint)."""
        bound = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        backoff = random.uniform(0.0, bound)
        if retry_after is None:
            return backoff
        return max(min(retry_after * random.uniform(1.0, 1.5), self.max_pushback), backoff)


#: The policy of a client that never retries (for tests and latency probes).
NO_RETRY = RetryPolicy(max_attempts=1)


def is_retryable(code: grpc.StatusCode, *, idempotent: bool) -> bool:
    """Whether a call that failed with ``code`` may be sent again.

    RESOURCE_EXHAUSTED is always safe: the server rejected the call before doing anything.
    UNAVAILABLE may come from a server that died after receiving the call, so only an
    idempotent call is retried on it (an Ingest with server-assigned ids is not).
    """
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return True
    return idempotent and code in RETRYABLE_CODES
