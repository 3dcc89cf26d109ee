"""Summaries of several replays side by side: the table `emu compare` prints and `Result.compare` returns."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import EmuError

ROWS = [
    ("scheme", "scheme", "{}"),
    ("nodes", "nodes", "{}"),
    ("seq", "prompt tokens", "{}"),
    ("topology", "topology", "{}"),
    ("ttft_s", "TTFT s", "{:.4f}"),
    ("prefill_s", "prefill s", "{:.4f}"),
    ("decode_tokens_per_s", "decode tokens/s", "{:.2f}"),
    ("wire_bytes", "wire MiB", "{:.1f}"),
    ("kv_bytes", "KV payload MiB", "{:.1f}"),
    ("frames", "frame-hops", "{:,}"),
    ("dropped_frames", "dropped frames", "{:,}"),
    ("retransmitted_frames", "retransmitted", "{:,}"),
    ("peak_node_kv_bytes", "peak node KV MiB", "{:.2f}"),
    ("final_layout_owner_only", "owner-only at end", "{}"),
    ("wall_s", "wall s", "{:.2f}"),
]
MIB = {"wire_bytes", "kv_bytes", "peak_node_kv_bytes"}


def load_summary(path: str) -> dict:
    p = Path(path)
    f = p / "summary.json" if p.is_dir() else p
    try:
        return json.loads(f.read_text())
    except FileNotFoundError:
        raise EmuError(f"{path}: no summary.json (is it a results folder?)") from None
    except json.JSONDecodeError as exc:
        raise EmuError(f"{f}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


@dataclass
class Comparison:
    """Runs side by side: ``frame`` holds the values (MiB for the byte rows), ``str()`` the printed table."""

    summaries: list[dict]
    names: list[str]

    @property
    def frame(self):
        import pandas as pd

        data = {name: [self._value(s, key) for key, _, _ in ROWS] for name, s in zip(self.names, self.summaries)}
        return pd.DataFrame(data, index=[label for _, label, _ in ROWS], dtype=object)

    @staticmethod
    def _value(s: dict, key: str):
        v = s.get(key)
        return v / 2**20 if v is not None and key in MIB else v

    def rows(self) -> list[list[str]]:
        table = [["", *self.names]]
        for key, label, fmt in ROWS:
            row = [label]
            for s in self.summaries:
                v = self._value(s, key)
                row.append("-" if v is None else fmt.format(v))
            table.append(row)
        return table

    def __str__(self) -> str:
        table = self.rows()
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        return "\n".join("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
                         for r in table)

    def _repr_html_(self) -> str:
        return self.frame.to_html()

    __repr__ = __str__
