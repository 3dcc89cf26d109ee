"""Compact JSON encodings of integer columns.

A column in a trace file is either a plain JSON array of integers or one of:

  {"codec": "rle",       "values": [v...], "runs": [n...]}   x = repeat(values, runs)
  {"codec": "delta",     "values": [d...]}                   x = cumsum(values)
  {"codec": "delta_rle", "values": [d...], "runs": [n...]}   x = cumsum(repeat(values, runs))

The writer picks, per column, whichever is shortest as text (ties: the order above, plain
first), so regular columns (stage, layer, CSR pointers) shrink to a few numbers while the
file stays plain JSON. Decoding is a couple of numpy calls.
"""

from __future__ import annotations

import numpy as np

CODECS = ("rle", "delta", "delta_rle")


class ColumnError(ValueError):
    """A column that does not decode; ``where`` is the JSON path inside the column."""

    def __init__(self, where: str, problem: str):
        super().__init__(problem)
        self.where = where
        self.problem = problem


def _text_len(a: np.ndarray) -> int:
    # Length of the JSON array text: digits + minus signs + commas + brackets.
    if a.size == 0:
        return 2
    mag = np.abs(a.astype(np.int64))
    digits = np.ones(a.size, dtype=np.int64)
    t = 10
    while True:
        more = mag >= t
        if not more.any():
            break
        digits += more
        if t > 10**17:
            break
        t *= 10
    return int(digits.sum() + (a < 0).sum() + a.size - 1 + 2)


def _runs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if a.size == 0:
        return a, a
    starts = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
    lengths = np.diff(np.r_[starts, a.size])
    return a[starts], lengths


def encode(a: np.ndarray):
    """The shortest JSON-ready form of integer array ``a`` (list or codec dict)."""
    a = np.asarray(a, dtype=np.int64)
    best, best_len = a.tolist(), _text_len(a)
    if a.size < 4:
        return best
    v, r = _runs(a)
    d = np.diff(a, prepend=0)
    dv, dr = _runs(d)
    overhead = {"rle": 30, "delta": 20, "delta_rle": 40}
    candidates = {
        "rle": _text_len(v) + _text_len(r) + overhead["rle"],
        "delta": _text_len(d) + overhead["delta"],
        "delta_rle": _text_len(dv) + _text_len(dr) + overhead["delta_rle"],
    }
    name = min(CODECS, key=lambda k: (candidates[k], CODECS.index(k)))
    if candidates[name] >= best_len:
        return best
    if name == "rle":
        return {"codec": "rle", "values": v.tolist(), "runs": r.tolist()}
    if name == "delta":
        return {"codec": "delta", "values": d.tolist()}
    return {"codec": "delta_rle", "values": dv.tolist(), "runs": dr.tolist()}


def _ints(x, where: str) -> np.ndarray:
    """A JSON list of integers as int64, or ColumnError naming the first bad element. An int64
    array is one the reader already parsed from canonical JSON integers (emu.jsontext)."""
    if isinstance(x, np.ndarray) and x.dtype == np.int64 and x.ndim == 1:
        return x
    if not isinstance(x, list):
        raise ColumnError(where, f"expected an array of integers or a codec object, got {type(x).__name__}")
    # numpy would silently accept floats, bools and numeric strings: check the types first
    # (one pass in C over the list; the per-element loop runs only to name a bad element).
    if not set(map(type, x)) <= {int}:
        i, e = next((i, e) for i, e in enumerate(x) if type(e) is not int)
        raise ColumnError(f"{where}[{i}]", f"expected an integer, got {e!r}")
    try:
        return np.array(x, dtype=np.int64) if x else np.zeros(0, dtype=np.int64)
    except OverflowError:
        i, e = next((i, e) for i, e in enumerate(x) if not -(2**63) <= e < 2**63)
        raise ColumnError(f"{where}[{i}]", f"integer {e} out of range") from None


_INT64_SAFE = float(2**62)  # a running sum past this may have wrapped around int64


def decode(col, where: str, max_len: int | None = None) -> np.ndarray:
    """Decode one column (plain list or codec dict) to an int64 array.

    ``max_len``: the most entries the column may decode to; a run-length column claiming
    more is refused before anything is allocated (a "run-length bomb"). A delta column
    whose running sum leaves int64 is refused instead of wrapping around.
    """
    if isinstance(col, (list, np.ndarray)):
        return _ints(col, where)
    if not isinstance(col, dict):
        raise ColumnError(where, f"expected an array of integers or a codec object, got {type(col).__name__}")
    codec = col.get("codec")
    if codec not in CODECS:
        raise ColumnError(f"{where}.codec", f"unknown codec {codec!r} (expected one of {', '.join(CODECS)})")
    expected = {"codec", "values"} | ({"runs"} if codec.endswith("rle") else set())
    missing = sorted(expected - set(col))
    if missing:
        raise ColumnError(f"{where}.{missing[0]}", "missing field")
    extra = sorted(set(col) - expected)
    if extra:
        raise ColumnError(f"{where}.{extra[0]}", "unknown field")
    values = _ints(col["values"], f"{where}.values")
    if codec.endswith("rle"):
        runs = _ints(col["runs"], f"{where}.runs")
        if runs.size != values.size:
            raise ColumnError(f"{where}.runs", f"has {runs.size} entries, values has {values.size}")
        bad = np.flatnonzero(runs < 1)
        if bad.size:
            raise ColumnError(f"{where}.runs[{bad[0]}]", f"run length must be >= 1, got {runs[bad[0]]}")
        if max_len is not None:
            total = float(runs.astype(np.float64).sum())  # float: an int64 sum of huge runs would wrap
            if total > max_len:
                raise ColumnError(f"{where}.runs", f"decode to {int(total):,} entries, more than the {max_len:,} "
                                                   "the trace declares")
        if codec.startswith("delta"):
            peak = float(np.abs(values.astype(np.float64)) @ runs.astype(np.float64)) if values.size else 0.0
            if peak > _INT64_SAFE:
                raise ColumnError(f"{where}.values", "running sum leaves the 64-bit integer range")
        values = np.repeat(values, runs)
    elif max_len is not None and values.size > max_len:
        raise ColumnError(where, f"has {values.size:,} entries, more than the {max_len:,} the trace declares")
    if codec.startswith("delta"):
        if values.size and float(np.abs(values.astype(np.float64)).sum()) > _INT64_SAFE:
            raise ColumnError(f"{where}.values", "running sum leaves the 64-bit integer range")
        return np.cumsum(values)
    return values
