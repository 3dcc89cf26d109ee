"""Summaries of several replays side by side: the table `emu compare` prints and `Result.compare` returns."""

from __future__ import annotations

import json
from dataclasses import dataclass

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
    ("peak_node_owner_replica_bytes", "peak owner+replica MiB", "{:.2f}"),
    ("peak_node_transient_bytes", "peak transient MiB", "{:.2f}"),
    ("final_layout_owner_only", "owner-only at end", "{}"),
    ("wall_s", "wall s", "{:.2f}"),
]
MIB = {"wire_bytes", "kv_bytes", "peak_node_kv_bytes", "peak_node_owner_replica_bytes", "peak_node_transient_bytes"}


def load_summary(path: str) -> dict:
    """The summary object of a results folder (or of its summary.json), checked by the one
    reader of results folders (emu.replay.reader); EmuError names the file."""
    from ..reader import ResultsFolder

    return ResultsFolder(path).summary()


def table_fields(summary: dict) -> dict:
    """What the table prints of a summary (the rest need not be kept for it)."""
    return {key: summary.get(key) for key, _, _ in ROWS}


def cell(s: dict, key: str, fmt: str, where: str = "summary") -> str:
    """One printed value of the table; EmuError when the summary holds something else there."""
    v = s.get(key)
    if v is None:
        return "-"
    number = fmt != "{}"
    if number and (isinstance(v, bool) and key != "final_layout_owner_only" or not isinstance(v, (int, float))):
        raise EmuError(f"{where}: {key}: expected a number, got {json.dumps(v)[:60]}")
    if not number and not isinstance(v, (str, int, float, bool)):
        raise EmuError(f"{where}: {key}: expected a single value, got {json.dumps(v)[:60]}")
    try:
        return fmt.format(v / 2**20 if key in MIB else v)
    except (ValueError, OverflowError):
        raise EmuError(f"{where}: {key}: {json.dumps(v)[:60]} is not a number that prints") from None


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
            table.append([label, *(cell(s, key, fmt, name) for s, name in zip(self.summaries, self.names))])
        return table

    def __str__(self) -> str:
        table = self.rows()
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        return "\n".join("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
                         for r in table)

    def _repr_html_(self) -> str:
        return self.frame.to_html()

    __repr__ = __str__
