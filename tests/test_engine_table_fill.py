"""The op table's fill (emu.engine.tables._table): a block of rows at a time, every column,
must give the table a column-by-column fill gives, across block boundaries, with columns
given as (base, values), as scalars and as booleans, narrowed to int32 only when every
value fits."""

from __future__ import annotations

import numpy as np
import pytest

from emu.engine import tables as T


def _columnwise(rows, ncols, cols, dtype):
    t = np.zeros((rows, ncols), np.int64)
    for col, v in cols.items():
        base, values = v if isinstance(v, tuple) else (0, v)
        t[:, col] = np.asarray(values, np.int64) + base
    return t.astype(dtype)


@pytest.mark.parametrize("rows", [1, T._FILL_ROWS - 1, T._FILL_ROWS, 3 * T._FILL_ROWS + 17])
@pytest.mark.parametrize("wide", [False, True])
def test_the_block_fill_is_the_column_fill(rows, wide):
    rng = np.random.default_rng(rows)
    top = 1 << 40 if wide else 1 << 20
    cols = {0: rng.integers(0, top, rows), 1: (12_345, rng.integers(0, 1 << 20, rows)),
            2: rng.integers(0, 2, rows).astype(bool), 3: rng.integers(-5, 5, rows).astype(np.int8),
            5: (7, np.arange(rows)), 6: 3}
    got = T._table(rows, 8, cols)
    assert got.dtype == (np.int64 if wide else np.int32)
    assert np.array_equal(got, _columnwise(rows, 8, cols, got.dtype))
    assert not got[:, [4, 7]].any()  # columns not given stay zero


def test_a_base_that_pushes_a_column_past_int32_widens_the_table():
    rows = T._FILL_ROWS + 5
    got = T._table(rows, 2, {0: np.arange(rows), 1: (2**31, np.arange(rows))})
    assert got.dtype == np.int64
    assert got[-1, 1] == 2**31 + rows - 1
