"""Named tables: the column layout of the engine's integer tables, declared once as data.

A kernel table is a 2-D NumPy array, one row per thing (link, frame, message, ...).
Its ``Table`` lists the columns in order, with what each holds; the kernel's column
constants (``L_RATE``, ``G_LINK``, ...) are derived from it, and readers outside the
kernel (capture, link statistics, results) take fields by name through ``records``
or ``col``, so a column added to a table changes no reader.
"""

from __future__ import annotations

import numpy as np


class Table:
    def __init__(self, name: str, prefix: str, columns: tuple[tuple[str, str], ...], dtype=np.int64):
        self.name = name
        self.prefix = prefix
        self.columns = tuple(c for c, _doc in columns)
        self.docs = dict(columns)
        self.dtype = np.dtype(dtype)
        self.index = {c: i for i, c in enumerate(self.columns)}
        self.record = np.dtype([(c, self.dtype) for c in self.columns])

    @property
    def width(self) -> int:
        return len(self.columns)

    def col(self, name: str) -> int:
        """Column number of field ``name``."""
        try:
            return self.index[name]
        except KeyError:
            raise KeyError(f"table {self.name} has no field {name!r}") from None

    def constants(self) -> dict[str, int]:
        """The kernel's constants: PREFIX_FIELD = column number, and PREFIX_NCOLS."""
        out = {f"{self.prefix}_{c.upper()}": i for i, c in enumerate(self.columns)}
        out[f"{self.prefix}_NCOLS"] = self.width
        return out

    def records(self, rows: np.ndarray) -> np.ndarray:
        """The rows as a structured array (fields by name), without copying when they are contiguous."""
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise ValueError(f"table {self.name}: expected rows of {self.width} columns, got shape {rows.shape}")
        return rows.view(self.record).reshape(rows.shape[0])
