"""The trace: an op DAG plus the run's profiles and the scheduler's decisions.

File format (docs/trace-format.md, JSON Schema ``trace.schema.json``): one JSON object

  {"meta": {...}, "schedule": {...}, "ops": {"n": N, "<column>": <column>, ...}}

with every op column stored columnar (see ``columns.py`` for the compact encodings), and
optionally gzip-compressed (``.json.gz``). ``load_trace`` validates everything (vectorized)
and raises TraceError naming the file, the JSON path and the problem.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..atomic import atomic_file
from ..errors import TraceError
from ..jsontext import parse_json_arrays
from . import columns
from .enums import ENUM_COLUMNS, Kind
from .fileformat import CSR_COLUMNS, FORMAT, SCALAR_COLUMNS, VERSION, csr_width  # noqa: F401 - re-exported
from .validate import validate, validate_document

@dataclass
class Trace:
    """A loaded (or generated) trace.

    ``ops`` maps each scalar column name to a numpy array of length ``n_ops``. Dependencies
    and the source/destination board sets are CSR: row i is ``idx[ptr[i]:ptr[i+1]]``.
    """

    meta: dict
    schedule: dict
    ops: dict[str, np.ndarray]
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    src_ptr: np.ndarray
    src_idx: np.ndarray
    dst_ptr: np.ndarray
    dst_idx: np.ndarray
    blk_ptr: np.ndarray | None = None  # KV blocks a message hands over (None: no op lists any)
    blk_idx: np.ndarray | None = None
    path: str | None = field(default=None, compare=False)

    def __post_init__(self):
        if self.blk_ptr is None:
            self.blk_ptr = np.zeros(self.n_ops + 1, np.int32)
            self.blk_idx = np.zeros(0, np.int32)

    @property
    def n_ops(self) -> int:
        return int(self.ops["kind"].shape[0])

    def deps(self, i: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[i]:self.dep_ptr[i + 1]]

    def src(self, i: int) -> np.ndarray:
        return self.src_idx[self.src_ptr[i]:self.src_ptr[i + 1]]

    def dst(self, i: int) -> np.ndarray:
        return self.dst_idx[self.dst_ptr[i]:self.dst_ptr[i + 1]]

    def blocks(self, i: int) -> np.ndarray:
        """The KV blocks message i hands over (empty: it names only ``kv_id``)."""
        return self.blk_idx[self.blk_ptr[i]:self.blk_ptr[i + 1]]

    def mask(self, which: str = "dst") -> np.ndarray:
        """Board sets as uint64 bit masks (bit b = board b); needs at most 64 nodes."""
        n = int(self.meta["nodes"])
        if n > 64:
            raise ValueError(f"{n} nodes do not fit a 64-bit mask; use the CSR lists")
        ptr, idx = getattr(self, f"{which}_ptr"), getattr(self, f"{which}_idx")
        rows = np.repeat(np.arange(self.n_ops), np.diff(ptr))
        out = np.zeros(self.n_ops, dtype=np.uint64)
        np.bitwise_or.at(out, rows, np.left_shift(np.uint64(1), idx.astype(np.uint64)))
        return out

    def frame(self):
        """The scalar columns as a pandas DataFrame, enums as categoricals of their names."""
        import pandas as pd

        df = pd.DataFrame(self.ops)
        for name, enum in ENUM_COLUMNS.items():
            labels = {int(e): e.name for e in enum}
            df[name] = pd.Categorical(df[name].map(labels))
        return df

    def _csr_names(self) -> list[str]:
        return [f"{c}_{part}" for c in CSR_COLUMNS for part in ("ptr", "idx")]

    def page_out(self) -> None:
        """Keep every array in a read-only file mapping (emu.memory.file_backed): the same
        values, resident only while read (and until ``drop_pages``). What a replay that loaded
        its own trace does before it builds its tables (at 128 boards the trace is 645 MiB,
        which the loop never reads)."""
        from ..memory import file_backed

        cols, csr = list(self.ops), self._csr_names()
        mapped = file_backed([self.ops[c] for c in cols] + [getattr(self, name) for name in csr])
        self.ops = dict(zip(cols, mapped))
        for name, a in zip(csr, mapped[len(cols):]):
            setattr(self, name, a)

    def drop_pages(self) -> None:
        """A paged-out trace's pages read so far leave the process's memory (read from its file
        again when next read); a trace in the heap stays as it is."""
        from ..memory import drop_resident

        drop_resident([*self.ops.values(), *(getattr(self, name) for name in self._csr_names())])

    def kind_count(self) -> dict[str, int]:
        counts = np.bincount(self.ops["kind"].astype(np.int64), minlength=len(Kind))
        return {k.name: int(counts[k]) for k in Kind if counts[k]}


def from_columns(meta: dict, schedule: dict, cols: dict[str, np.ndarray]) -> Trace:
    """Build a Trace from decoded columns (casting to the loaded dtypes)."""
    ops = {name: np.ascontiguousarray(cols[name], dtype=dt) for name, dt in SCALAR_COLUMNS.items()}
    csr = {f"{c}_{p}": csr_width(cols[f"{c}_{p}"])
           for c in CSR_COLUMNS for p in ("ptr", "idx") if f"{c}_{p}" in cols}
    return Trace(meta=meta, schedule=schedule, ops=ops, **csr)


# ----------------------------------------------------------------------- writing
def _column_names() -> list[str]:
    return list(SCALAR_COLUMNS) + [f"{c}_{p}" for c in CSR_COLUMNS for p in ("ptr", "idx")]


_COLUMN_NAMES = frozenset(_column_names())


def dumps(trace: Trace) -> bytes:
    """Deterministic JSON text: meta and schedule first, then one op column per line."""
    dump = lambda x: json.dumps(x, separators=(",", ":"), sort_keys=True, allow_nan=False)  # noqa: E731
    lines = ['{"meta":' + dump(trace.meta) + ",", '"schedule":' + dump(trace.schedule) + ",", '"ops":{"n":%d' % trace.n_ops]
    for name in _column_names():
        arr = trace.ops[name] if name in trace.ops else getattr(trace, name)
        lines.append(f',"{name}":' + columns.encode_text(arr))
    lines.append("}}\n")
    return "\n".join(lines).encode("utf-8")


def save_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Validate, then write ``path`` atomically (gzip when it ends in .gz, with no name or
    time stamp in the gzip header, so the same trace gives the same bytes)."""
    validate(trace, str(path))
    data = dumps(trace)
    with atomic_file(path, "wb") as fh:
        if str(path).endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz:
                gz.write(data)
        else:
            fh.write(data)


# ----------------------------------------------------------------------- reading
# The most JSON text a trace may hold (after gzip): a bound checked while decompressing, so
# a gzip bomb stops here instead of filling memory. The shipped 16K traces are 1-6 MB.
MAX_TEXT_BYTES = 1 << 30


def _read_json(path: str):
    try:
        if os.path.isdir(path):
            raise TraceError(f"{path}: is a folder, not a trace file")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_TEXT_BYTES + 1)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(MAX_TEXT_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{path}: corrupt gzip data: {exc}") from None
    if len(raw) > MAX_TEXT_BYTES:
        raise TraceError(f"{path}: more than {MAX_TEXT_BYTES >> 20} MiB of JSON text; not a trace this emu loads")
    return parse_json_arrays(raw, path, TraceError, under="ops", columns=_COLUMN_NAMES)


def load_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a .json or .json.gz trace; TraceError names path, JSON path, problem."""
    path = str(path)
    try:
        trace = from_columns(*validate_document(_read_json(path), path))  # the document and its
        # int64 columns are gone before the checks below: they held twice the trace's memory
        trace.path = path
        validate(trace, path)
    except TraceError:
        raise
    except MemoryError:
        raise TraceError(f"{path}: too large to load in this machine's memory") from None
    except (RecursionError, OverflowError, ValueError, TypeError, KeyError, IndexError) as exc:
        # a value the checks above did not foresee: still the file's fault, and one line
        raise TraceError(f"{path}: cannot load: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    return trace
