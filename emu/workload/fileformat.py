"""What a trace file is: its format name and version, and the op columns it stores.

Shared by the reader and writer (``trace.py``) and the validator (``validate.py``), which
both need them; keeping them here is what lets ``trace`` import ``validate`` without a cycle.
"""

from __future__ import annotations

import numpy as np

FORMAT = "mcf-emu-trace"
VERSION = 2  # 2: the blk column (blocks a message hands over), all_to_all ops, transient readers

# Scalar op columns, in file order, with the numpy dtype a loaded Trace uses.
SCALAR_COLUMNS: dict[str, type] = {
    "kind": np.int8,
    "stage": np.int8,
    "node": np.int32,
    "chunk": np.int32,
    "layer": np.int32,
    "step": np.int32,
    "flops": np.int64,
    "mem_bytes": np.int64,
    "collective": np.int8,
    "msg_op": np.int8,
    "reduce_op": np.int8,
    "kv_id": np.int64,
    "bytes": np.int64,
    "dtype": np.int8,
    "residency": np.int8,
}
# CSR lists: <name>_ptr (n_ops + 1 offsets) and <name>_idx (the concatenated rows).
CSR_COLUMNS = ("dep", "src", "dst", "blk")


def fits_int32(a: np.ndarray, base: int = 0) -> bool:
    """Whether every value of ``base + a`` fits int32 (an empty array does)."""
    i32 = np.iinfo(np.int32)
    return a.size == 0 or (base + int(a.min()) >= i32.min and base + int(a.max()) <= i32.max)


def csr_width(a: np.ndarray) -> np.ndarray:
    """A CSR column as a loaded Trace holds it: int32 when every value fits, else int64.

    Offsets, op indices and boards fit int32 in any trace that fits in memory (MARS 16K on
    128 boards: 32M dependencies), so a loaded trace holds its lists at half the width; a
    value that does not fit keeps the column int64, so the checks name it as the file has
    it instead of a wrapped one."""
    a = np.asarray(a)
    if a.dtype == np.int32:
        return np.ascontiguousarray(a)
    return np.ascontiguousarray(a, dtype=np.int32 if fits_int32(a) else np.int64)
