"""Replays compared by their summaries, in one place: the table `emu compare` prints and
`Result.compare` returns, `emu.table`'s rows, and one run against another (the metrics that
changed, by how much, better or worse), which the dashboard's what-if shows. Imports nothing
of the engine (the dashboard reads it)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from .errors import EmuError

ROWS = [
    ("scheme", "scheme", "{}"),
    ("nodes", "nodes", "{}"),
    ("seq", "prompt tokens", "{}"),
    ("topology", "topology", "{}"),
    ("overrides", "overrides", "{}"),
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
# What a run was asked to do: the labels of same-named runs show the ones that vary, and
# emu.table gives each a column.
PARAMS = ("scheme", "nodes", "seq", "chunk", "model", "hw", "topology", "decode_tokens", "loss", "seed",
          "scenario", "overrides", "engine")
MIB = {"wire_bytes", "kv_bytes", "peak_node_kv_bytes", "peak_node_owner_replica_bytes", "peak_node_transient_bytes"}


def table_fields(summary: dict) -> dict:
    """What the table prints of a summary and labels its run by (the rest need not be kept for it)."""
    return {key: summary.get(key) for key in (*PARAMS, *(key for key, _, _ in ROWS))}


def override_text(v, where: str = "summary") -> str | None:
    """The overrides as one cell: ``hw.link_rate=10Gbps hw.mtu=9000``, None when there are none."""
    if v is None or v == []:
        return None
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise EmuError(f"{where}: overrides: expected a list of texts, got {json.dumps(v)[:60]}")
    return " ".join(v)


def param_text(key: str, v) -> str:
    """A parameter as a label shows it: ``seq=2048``, the overrides as written, ``no overrides``."""
    if key in ("overrides", "scenario"):
        items = v if isinstance(v, list) else [] if v is None else [v]
        return " ".join(str(x) for x in items) if items else f"no {key}"
    return f"{key}={v}"


def json_key(v) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def varying(summaries: list[dict]) -> list[str]:
    """The parameters (PARAMS) whose values are not the same in every summary."""
    return [k for k in PARAMS if len({json_key(s.get(k)) for s in summaries}) > 1]


def labels(summaries: list[dict], names: list[str]) -> list[str]:
    """One distinct label per run: its name when no other run has it; otherwise the name and
    the parameters that vary across the runs (``mars seq=1024``, ``m4 hw.link_rate=10Gbps``),
    and ``#2``, ``#3`` for runs alike in all of them."""
    if len(set(names)) == len(names):
        return list(names)
    keys = varying(summaries)
    by_name = {}
    for n, s in zip(names, summaries):
        by_name.setdefault(n, set()).add(json_key(s.get("scheme")))
    if all(len(v) == 1 for v in by_name.values()):  # the name already says the scheme
        keys = [k for k in keys if k != "scheme"]
    out = [" ".join([n, *(param_text(k, s.get(k)) for k in keys)]) for n, s in zip(names, summaries)]
    seen: dict[str, int] = {}
    for i, label in enumerate(out):
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            out[i] = f"{label} #{seen[label]}"
    return out


def cell(s: dict, key: str, fmt: str, where: str = "summary") -> str:
    """One printed value of the table; EmuError when the summary holds something else there."""
    v = s.get(key)
    if key == "overrides":
        v = override_text(v, where)
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
    """Runs side by side, one column each (``labels``: the run's name, and what differs when names
    repeat): ``frame`` holds the values (MiB for the byte rows), ``str()`` the printed table."""

    summaries: list[dict]
    names: list[str]

    @property
    def labels(self) -> list[str]:
        return labels(self.summaries, self.names)

    @property
    def frame(self):
        import pandas as pd

        columns = self.labels
        data = [[self._value(s, key) for s in self.summaries] for key, _, _ in ROWS]
        return pd.DataFrame(data, index=[label for _, label, _ in ROWS], columns=columns, dtype=object)

    @staticmethod
    def _value(s: dict, key: str):
        v = s.get(key)
        if key == "overrides":
            return override_text(v)
        return v / 2**20 if v is not None and key in MIB else v

    def rows(self) -> list[list[str]]:
        names = self.labels
        table = [["", *names]]
        for key, label, fmt in ROWS:
            table.append([label, *(cell(s, key, fmt, name) for s, name in zip(self.summaries, names))])
        return table

    def __str__(self) -> str:
        table = self.rows()
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        return "\n".join("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
                         for r in table)

    def _repr_html_(self) -> str:
        return self.frame.to_html()

    __repr__ = __str__


def summary_table(summaries: list[dict], names: list[str]):
    """Many runs as a DataFrame, a row each (indexed by ``labels``): every parameter (PARAMS, the
    overrides as one text) and the compare table's values (MiB for the byte rows)."""
    import pandas as pd

    rows = []
    for name, s in zip(names, summaries):
        row = {"name": name}
        for key in PARAMS:
            v = s.get(key)
            row[key] = (override_text(v, name) or "") if key == "overrides" else (
                json.dumps(v) if isinstance(v, (list, dict)) else v)
        for key, label, _ in ROWS:
            if key not in row:
                row[label] = Comparison._value(s, key)
        rows.append(row)
    frame = pd.DataFrame(rows, index=pd.Index(labels(summaries, names), name="run"))
    return frame


# ------------------------------------------------------------------ one run against another
# (summary key, label, unit); HIGHER_IS_BETTER / NEUTRAL say how a change reads (else lower is better)
HIGHER_IS_BETTER = {"decode_tokens_per_s"}
NEUTRAL = {"busiest_link_utilization", "frames", "control_frames", "sim_end_s"}
METRICS = [("ttft_s", "TTFT", "s"), ("prefill_s", "prefill", "s"), ("decode_tokens_per_s", "decode tokens/s", "rate"),
           ("wire_bytes", "bytes on the wire", "bytes"), ("kv_bytes", "KV payload", "bytes"), ("frames", "frame-hops", "n"),
           ("dropped_frames", "dropped frames", "n"), ("retransmitted_frames", "retransmitted frames", "n"),
           ("control_frames", "control frames", "n"), ("peak_node_kv_bytes", "peak KV per node", "bytes"),
           ("busiest_link_utilization", "busiest link utilization", "pct"), ("sim_end_s", "simulated end", "s")]


def metric(s: dict, key: str):
    """Metric ``key`` of summary ``s`` as a finite number, None when the summary has none."""
    if key == "busiest_link_utilization":
        v = (s.get("busiest_link") or {}).get("utilization")
    else:
        v = s.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def judgement(key: str, delta) -> str:
    """'better', 'worse' or '' for a change of metric ``key``."""
    if not delta or key in NEUTRAL:
        return ""
    return "better" if (delta > 0) == (key in HIGHER_IS_BETTER) else "worse"


def diff(base: dict, run: dict) -> tuple[list[dict], list[str]]:
    """Summary ``run`` against summary ``base`` (the dashboard's what-if against its base run):
    (changed metrics as rows {key, metric, base, run, delta, pct, unit}, labels of the unchanged)."""
    rows, same = [], []
    for key, label, unit in METRICS:
        a, b = metric(base, key), metric(run, key)
        if a is None and b is None:
            continue
        if a == b:
            same.append(label)
            continue
        d = None if a is None or b is None else b - a
        pct = None if d is None or not a else d / abs(a)
        rows.append({"key": key, "metric": label, "base": a, "run": b, "delta": d, "pct": pct, "unit": unit})
    return rows, same
