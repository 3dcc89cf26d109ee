"""Named tables: the column layout of the engine's integer tables, declared once as data.

A table is a 2-D NumPy array, one row per thing (link, frame, message, op, transfer, ...):
the frame kernel's (emu.net.kernel), the compiled replay's (emu.engine.layout) and the NIC
protocol's sender tables (emu.nic.protocol). Its ``Table`` lists the columns in order, with
what each holds, under a prefix no other table uses; the column constants (``L_RATE``,
``NT_BUSY``, ...) are derived from it, and readers outside the compiled code (capture, link
statistics, results) take fields by name through ``records`` or ``col``, so a column added
to a table changes no reader.
"""

from __future__ import annotations

import numpy as np


class Table:
    def __init__(self, name: str, prefix: str, columns: tuple[tuple[str, str], ...], dtype=np.int64,
                 sets: tuple[tuple[str, str], ...] = (), tail: str = ""):
        """``sets``: the board sets a row ends with (from its last column on, a width the run
        decides), named in order; ``tail``: how the row goes on past its declared columns."""
        self.name = name
        self.prefix = prefix
        self.columns = tuple(c for c, _doc in columns)
        self.docs = dict(columns)
        self.dtype = np.dtype(dtype)
        self.index = {c: i for i, c in enumerate(self.columns)}
        self.record = np.dtype([(c, self.dtype) for c in self.columns])
        self.sets = tuple(c for c, _doc in sets)
        self.set_docs = dict(sets)
        self.tail = tail

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
        """The kernel's constants: PREFIX_FIELD = column number, PREFIX_NCOLS, and with board
        sets PREFIX_SET_NAME = the set's number and PREFIX_SETS."""
        out = {f"{self.prefix}_{c.upper()}": i for i, c in enumerate(self.columns)}
        out.update({f"{self.prefix}_SET_{c.upper()}": k for k, c in enumerate(self.sets)})
        if self.sets:
            out[f"{self.prefix}_SETS"] = len(self.sets)
        out[f"{self.prefix}_NCOLS"] = self.width
        return out

    def records(self, rows: np.ndarray) -> np.ndarray:
        """The rows as a structured array (fields by name), without copying when they are contiguous."""
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise ValueError(f"table {self.name}: expected rows of {self.width} columns, got shape {rows.shape}")
        return rows.view(self.record).reshape(rows.shape[0])


# ---- column constants written into the source ----------------------------------
# The compiled code reads its column numbers as module constants (L_RATE, G_LINK, RS_NOW,
# ...). They are written out in the declaring module's source, rendered from each Table, so
# that grep, an IDE and pyflakes see them; ``python -m emu.net.render_tables`` renders them
# again after a Table changes, and tests/test_tables.py checks that each module holds exactly
# what it renders.

def _unpacked(names: list[str], width: int) -> list[str]:
    """``(A, B, ...) = range(n)`` in lines of at most ``width`` characters."""
    lines, line = [], "("
    for i, name in enumerate(names):
        item = name + (", " if i < len(names) - 1 else f") = range({len(names)})")
        if len(line) + len(item.rstrip()) > width:
            lines.append(line.rstrip())
            line = " "
        line += item
    lines.append(line)
    return lines


def rendered(var: str, table: Table, width: int = 96) -> str:
    """The source block of ``table``'s constants (``var`` is the Table's name in its module)."""
    p = table.prefix
    lines = _unpacked([f"{p}_{c.upper()}" for c in table.columns], width)
    if table.sets:
        lines += _unpacked([f"{p}_SET_{c.upper()}" for c in table.sets], width) + [f"{p}_SETS = {len(table.sets)}"]
    if table.tail:
        lines.append(f"# {table.tail}")
    return (f"# {var}'s columns, rendered from it by `python -m emu.net.render_tables` (do not edit)\n"
            + "\n".join(lines) + f"\n{p}_NCOLS = {table.width}\n")


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

