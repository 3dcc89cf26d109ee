"""The directory's history, handed over by the compiled loop a block of rows at a time.

The loop appends a row to HIST and HN at every change of a node's KV memory
(emu.engine.directory.record): one or two rows an op, 13M rows (541 MiB) for MARS 16K on
128 boards. When they hold ``BLOCK`` rows, ``drive()`` returns DRIVE_HISTORY
(``RS_HIST_AT``): Python writes them to a file (emu.memory.Spill), folds their peaks, and the
loop writes its next rows from row 0 again. So a run holds one block however long its
history grows. After the run the history is the file's rows, mapped read-only: the summary
takes the peaks folded on the way, the results and ``Result.nodes`` read the rows.
"""

from __future__ import annotations

import numpy as np

from ..memory import Spill
from ..nic.directory import history_peaks
from . import layout as L

BLOCK = 1 << 18  # rows the loop holds before it hands them over (11 MiB)


def by_name(hist: np.ndarray, hn: np.ndarray) -> dict[str, np.ndarray]:
    """layout.HISTORY_COLUMNS, in order, as views of rows of HIST and HN: each column found by
    its name in the two tables' declarations."""
    views = {name: hist[:, i] for i, name in enumerate(L.HISTORY.columns)}
    views.update({name: hn[:, i] for i, name in enumerate(L.HISTORY_NARROW.columns)})
    return {name: views[name] for name in L.HISTORY_COLUMNS}


class History:
    """What the loop has handed over: its rows in files, and the peaks of KV bytes at one node
    (``history_peaks``) folded over them."""

    def __init__(self):
        self._wide = Spill(np.int64, L.HIST_NCOLS)
        self._narrow = Spill(np.int32, L.HN_NCOLS)
        self._peaks = (0, 0, 0)

    def take(self, st) -> None:
        """The rows the loop holds now: their peaks folded, to the files, and the loop's
        tables empty (it writes the next row at row 0)."""
        RS = st.table("RS")
        n = int(RS[L.RS_NHIST])
        hist, hn = st.table("HIST")[:n], st.table("HN")[:n]
        self._peaks = tuple(max(a, b) for a, b in zip(self._peaks, history_peaks(by_name(hist, hn))))
        self._wide.append(hist)
        self._narrow.append(hn)
        RS[L.RS_NHIST] = 0

    def columns(self) -> dict[str, np.ndarray]:
        """Every row handed over, by column name (after the last ``take``)."""
        return by_name(self._wide.rows(), self._narrow.rows())

    def peaks(self) -> tuple[int, int, int]:
        """``history_peaks`` of every row handed over, without reading them again."""
        return self._peaks
