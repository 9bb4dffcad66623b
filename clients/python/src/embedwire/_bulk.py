"""How ``embed_many`` cuts its input into calls and puts the answers back together.

The result is one preallocated (n, width) array; each call's answer, a zero-copy view
of the response bytes, is copied once into its row slice. The batches may finish in any
order: their slice, not their arrival, decides where the rows go, so the output is in
input order whatever the concurrency.

On Linux a large output array lives in a private anonymous memory map of its own rather
than in numpy's allocator, because numpy asks for transparent huge pages
(``MADV_HUGEPAGE``) on every array of 4 MiB or more. In a VM whose balloon device reports
free memory to the host (Firecracker and other micro-VMs; the machine the benches run
on), the 2 MiB blocks a fresh process gets were usually handed back to the host, and
faulting them in again made the first bulk embed of a process cost 0.2-0.45 s of kernel
CPU for 100k x 384 float32 (2-4.5 us per vector, more than the rest of the client), the
later ones ~0.02 s. Plain 4 KiB pages, which the Rust client's ``Vec`` gets too, cost
~0.1 s there on every call, and ``MAP_POPULATE`` faults them in one system call instead
of one trap per page.
"""

from __future__ import annotations

import mmap
from typing import Iterator

import numpy as np

from .errors import ProtocolError

#: Outputs of at least this many bytes get their own memory map on Linux (numpy's own
#: threshold for asking for huge pages); smaller ones come from numpy as usual.
MAPPED_OUTPUT_BYTES = 4 << 20
#: mmap flags of that map; None where mmap has no MAP_POPULATE (not Linux): numpy's
#: allocator there.
_MAP_FLAGS = (
    mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE if hasattr(mmap, "MAP_POPULATE") else None
)


def output_array(rows: int, width: int, dtype: np.dtype) -> np.ndarray:
    """A new, writable (rows, width) array; on Linux a large one is a view of its own
    memory map (see the module doc), unmapped when the last view of it goes away."""
    dtype = np.dtype(dtype)
    nbytes = rows * width * dtype.itemsize
    if _MAP_FLAGS is None or nbytes < MAPPED_OUTPUT_BYTES:
        return np.empty((rows, width), dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=_MAP_FLAGS), dtype=dtype).reshape(rows, width)


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
            self._rows = output_array(self._n, vectors.shape[1], vectors.dtype)
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
