"""How ``embed_many`` cuts its input into calls and puts the answers back together.

The result is one preallocated (n, width) array; each call's answer, a zero-copy view
of the response bytes, is copied once into its row slice. The batches may finish in any
order: their slice, not their arrival, decides where the rows go, so the output is in
input order whatever the concurrency.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .errors import ProtocolError


def batch_bounds(n: int, batch_size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of each batch of at most batch_size items, in order."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    for start in range(0, n, batch_size):
        yield start, min(start + batch_size, n)


class RowAssembler:
    """The output array of a bulk embed, filled batch by batch (by one thread: the
    sync client's caller or the async client's event loop).

    The array is allocated at the first answer, whose shape and dtype tell the width and
    element type (the caller need not ask the server for its dimension first).
    """

    def __init__(self, n: int) -> None:
        self._n = n
        self._rows: np.ndarray | None = None

    def put(self, start: int, stop: int, vectors: np.ndarray) -> None:
        """Copies the vectors of batch ``[start, stop)`` into their rows."""
        if vectors.shape[0] != stop - start:
            raise ProtocolError(
                f"the server answered {vectors.shape[0]} vectors for {stop - start} inputs"
            )
        if self._rows is None:
            self._rows = np.empty((self._n, vectors.shape[1]), dtype=vectors.dtype)
        rows = self._rows
        if rows.shape[1] != vectors.shape[1] or rows.dtype != vectors.dtype:
            raise ProtocolError(
                f"batches disagree: {vectors.shape[1]} x {vectors.dtype} after "
                f"{rows.shape[1]} x {rows.dtype}"
            )
        rows[start:stop] = vectors

    def result(self) -> np.ndarray:
        """The filled array (once every batch was put)."""
        if self._rows is None:
            raise ProtocolError("no batch was answered")
        return self._rows
