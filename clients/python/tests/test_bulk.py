"""The output array of embed_many (no server): small ones from numpy, large ones in a
memory map of their own on Linux; both must behave as ordinary writable arrays."""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest

from embedwire._bulk import MAPPED_OUTPUT_BYTES, RowAssembler, output_array


@pytest.mark.parametrize("rows", [3, MAPPED_OUTPUT_BYTES // (384 * 4) + 1])
def test_output_array_is_an_ordinary_writable_array(rows: int) -> None:
    array = output_array(rows, 384, np.dtype("<f4"))
    assert array.shape == (rows, 384) and array.dtype == np.float32 and array.flags.writeable
    array[:] = np.arange(384, dtype=np.float32)
    tail = array[-2:]
    del array
    gc.collect()
    assert np.array_equal(tail[1], np.arange(384, dtype=np.float32)), "a view keeps the memory"
    assert np.array_equal(pickle.loads(pickle.dumps(tail)), tail)


def test_row_assembler_puts_batches_in_input_order() -> None:
    n = MAPPED_OUTPUT_BYTES // (48 * 1) + 10  # uint8 rows of 48 bytes (ubinary of 384 dims)
    rows = RowAssembler(n)
    bounds = [(start, min(start + 1000, n)) for start in range(0, n, 1000)]
    for start, stop in reversed(bounds):
        rows.put(start, stop, np.full((stop - start, 48), start // 1000, dtype=np.uint8))
    result = rows.result()
    assert result.shape == (n, 48) and result.dtype == np.uint8
    assert np.array_equal(result[:, 0], np.arange(n) // 1000 % 256)
