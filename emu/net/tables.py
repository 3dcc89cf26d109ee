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


# ---- column constants written into the source ----------------------------------
# The kernel's compiled code reads its column numbers as module constants (L_RATE, G_LINK,
# ...). They are written out in the source, rendered from each Table, so that grep, an IDE
# and pyflakes see them; ``python -m emu.net.render_tables`` renders them again after a
# Table changes, and tests/test_tables.py checks that FILE holds exactly what it renders.

def rendered(var: str, table: Table, width: int = 96) -> str:
    """The source block of ``table``'s constants (``var`` is the Table's name in its module)."""
    names = [f"{table.prefix}_{c.upper()}" for c in table.columns]
    lines, line = [], "("
    for i, name in enumerate(names):
        item = name + (", " if i < len(names) - 1 else f") = range({table.width})")
        if len(line) + len(item.rstrip()) > width:
            lines.append(line.rstrip())
            line = " "
        line += item
    lines.append(line)
    return (f"# {var}'s columns, rendered from it by `python -m emu.net.render_tables` (do not edit)\n"
            + "\n".join(lines) + f"\n{table.prefix}_NCOLS = {table.width}\n")


def _blocks(source: str, var: str, table: Table) -> list[tuple[int, int]]:
    """Where ``var``'s rendered block (or the line it replaces) is in ``source``: (start, end) spans."""
    import re
    head = re.escape(f"# {var}'s columns, rendered from it by")
    block = re.compile(rf"^{head}.*?^{table.prefix}_NCOLS = \d+\n", re.M | re.S)
    return [m.span() for m in block.finditer(source)]


def render_file(path: str, module) -> bool:
    """Render every Table of ``module`` into ``path`` (its source); True if the file changed."""
    with open(path) as f:
        source = f.read()
    new = source
    for var, table in vars(module).items():
        if isinstance(table, Table):
            spans = _blocks(new, var, table)
            if len(spans) != 1:
                raise SystemExit(f"{path}: {len(spans)} rendered blocks of {var} (expected 1)")
            a, b = spans[0]
            new = new[:a] + rendered(var, table) + new[b:]
    if new != source:
        with open(path, "w") as f:
            f.write(new)
    return new != source

