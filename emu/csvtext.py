"""CSV text for spreadsheets: every CSV mcf-emu writes goes through ``to_csv``.

A spreadsheet runs a cell that begins with ``=``, ``+``, ``-`` or ``@`` as a formula (and a
leading tab or carriage return hides such a start), so a text from a file (a sweep's scheme
or topology name, a column name) could call ``=HYPERLINK(...)`` or a DDE command when the
CSV is opened. Such text cells are written with a leading ``'``, which spreadsheets show as
text; numbers, and texts that are plain numbers (``-1``, ``+2.5e3``), are written as they are.
"""

from __future__ import annotations

import re

import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def csv_cell(v):
    """``v`` as a spreadsheet reads it as data: a text that would start a formula gets a leading ``'``."""
    if isinstance(v, str) and v.startswith(FORMULA_START) and not _NUMBER.fullmatch(v):
        return "'" + v
    return v


def to_csv(df: pd.DataFrame) -> str:
    """The frame as CSV text (no index), text cells and column names through ``csv_cell``."""
    cols = {}
    for i in range(df.shape[1]):
        col = df.iloc[:, i]
        cols[i] = col if pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col) else \
            col.astype(object).map(csv_cell)
    out = pd.DataFrame(cols, index=df.index)
    out.columns = [csv_cell(str(c)) for c in df.columns]
    # RFC 4180 line ends: a field holding a CR or LF is then quoted, never read as a row break
    return out.to_csv(index=False, lineterminator="\r\n")
