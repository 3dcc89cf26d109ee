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


_CHUNK = 1 << 20  # entries measured or written at a time: a column's temporaries stay a few MB


def _text_len(a: np.ndarray) -> int:
    # Length of the JSON array text: digits + minus signs + commas + brackets. An entry has
    # one digit more for each power of ten (10 to 10**18) it reaches: counted, not summed per entry.
    if a.size == 0:
        return 2
    total = 0
    for i in range(0, a.size, _CHUNK):
        part = a[i:i + _CHUNK]
        mag = np.abs(part.astype(np.int64))
        total += part.size + np.count_nonzero(part < 0)
        t = 10
        while t <= 10**18:
            more = np.count_nonzero(mag >= t)
            if not more:
                break
            total += more
            t *= 10
    return total + a.size - 1 + 2


def _runs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if a.size == 0:
        return a, a
    starts = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
    lengths = np.diff(np.r_[starts, a.size])
    return a[starts], lengths


def _forms(a: np.ndarray, name: str) -> dict:
    """The arrays of codec ``name`` for ``a``, by field name."""
    if name == "rle":
        v, r = _runs(a)
        return {"values": v, "runs": r}
    d = np.diff(a, prepend=0)
    if name == "delta":
        return {"values": d}
    dv, dr = _runs(d)
    return {"values": dv, "runs": dr}


_OVERHEAD = {"rle": 30, "delta": 20, "delta_rle": 40}


def _choose(a: np.ndarray) -> tuple[str, dict]:
    """The shortest form of ``a``: "plain" or a codec, with its arrays by field name. Each
    codec's arrays are measured and let go in turn (a 32M-entry column's five at once were
    1.3 GB), the winner's made again."""
    a = np.asarray(a, dtype=np.int64)
    if a.size < 4:
        return "plain", {"values": a}
    best_len = _text_len(a)
    candidates = {name: sum(map(_text_len, _forms(a, name).values())) + _OVERHEAD[name] for name in CODECS}
    name = min(CODECS, key=lambda k: (candidates[k], CODECS.index(k)))
    if candidates[name] >= best_len:
        return "plain", {"values": a}
    return name, _forms(a, name)


def encode(a: np.ndarray):
    """The shortest JSON-ready form of integer array ``a`` (list or codec dict)."""
    name, fields = _choose(a)
    if name == "plain":
        return fields["values"].tolist()
    return {"codec": name, **{k: x.tolist() for k, x in fields.items()}}


def _ints_text(a: np.ndarray) -> str:
    # json.dumps of the list, written a chunk at a time: no Python int per entry alive at once
    # (a 32M-entry column as a list is 1.1 GB, the generator's peak). A chunk is the list's
    # repr without its spaces (integers have none): a third faster than joining str() of each.
    return "[" + ",".join(str(a[i:i + _CHUNK].tolist())[1:-1].replace(" ", "")
                          for i in range(0, a.size, _CHUNK)) + "]"


def encode_text(a: np.ndarray) -> str:
    """``encode(a)`` as compact JSON text with sorted keys (json.dumps(encode(a),
    separators=(",", ":"), sort_keys=True)), without the list of Python ints."""
    name, fields = _choose(a)
    if name == "plain":
        return _ints_text(fields["values"])
    return '{"codec":"%s",' % name + ",".join(f'"{k}":{_ints_text(fields[k])}' for k in sorted(fields)) + "}"


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
