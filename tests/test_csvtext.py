"""CSV cells that a spreadsheet would run as formulas are written as text (emu/csvtext.py)."""

from __future__ import annotations

import csv
import io

import pandas as pd

from emu.csvtext import csv_cell, to_csv

FORMULAS = ['=HYPERLINK("http://198.51.100.7/x","click")', "=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(1,1)",
            "\t=1+1", "\r=1+1", "-", "=", "+"]


def test_formula_cells_get_a_leading_quote():
    for v in FORMULAS:
        assert csv_cell(v) == "'" + v
    for v in ("mars", "", "1+1", " =1", "'=1", "a=b"):
        assert csv_cell(v) == v
    for v in ("-1", "+2.5", "-.5e-3", "1e9", "-0"):  # plain numbers stay as they are
        assert csv_cell(v) == v
    for v in (-1, -2.5, 3, None, float("nan")):
        assert csv_cell(v) is v


def test_to_csv_neutralises_text_cells_and_names_and_keeps_numbers():
    df = pd.DataFrame({"scheme": FORMULAS, "ttft_s": [-1.5 + i for i in range(len(FORMULAS))],
                       "nodes": range(len(FORMULAS))})
    df["cat"] = pd.Categorical(["=1+1"] * len(FORMULAS))
    df["=name"] = pd.Series(["@x"] * len(FORMULAS), dtype="string")
    rows = list(csv.reader(io.StringIO(to_csv(df), newline="")))
    assert rows[0] == ["scheme", "ttft_s", "nodes", "cat", "'=name"]
    assert len(rows) == len(FORMULAS) + 1  # a CR or tab inside a cell never breaks a row
    for v, row in zip(FORMULAS, rows[1:]):
        assert row[0] == "'" + v and row[3] == "'=1+1" and row[4] == "'@x"
    assert [float(r[1]) for r in rows[1:]] == list(df["ttft_s"])  # numbers stay numbers, minus signs included
    assert rows[1][1] == "-1.5"
