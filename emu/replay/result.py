"""The Result object ``emu.replay`` returns: one replay's summary, and its tables as pandas
DataFrames (``emu.replay.summary`` makes and writes them).

A Result comes from ``emu.replay(...)`` (the engine object is still at hand) or from a
results folder (``emu.load(DIR)``); the tables are the same either way, the ones the folder
holds (docs/results.md), built on first use.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

FILES = {"ops": "ops.parquet", "links": "links.parquet", "nodes": "nodes.parquet", "deliveries": "deliveries.parquet"}


class Result:
    """``summary`` (a dict; its keys are attributes too: ``r.ttft_s``), ``path`` (the results folder
    or None), ``engine`` (the finished replay, or None when loaded from a folder) and the tables
    ``ops``, ``links`` (per link direction and time bin), ``nodes`` (KV memory per node over time),
    ``replicas`` (the cluster's replica factor over time) and ``deliveries``."""

    def __init__(self, summary: dict, *, path: str | Path | None = None, engine=None, name: str | None = None):
        self.summary = summary
        self.path = Path(path) if path is not None else None
        self.engine = engine
        self.name = name or (self.path.name if self.path else
                             (summary.get("trace") or summary.get("scheme") or "run").split(".")[0])

    @classmethod
    def load(cls, path: str | Path) -> "Result":
        """A results folder written by ``emu replay`` (or ``emu.replay(..., out=DIR)``)."""
        from ..reader import ResultsFolder

        folder = ResultsFolder(path)
        return cls(folder.summary(), path=folder.path)

    def __getattr__(self, name: str):
        summary = self.__dict__.get("summary", {})
        if name in summary:
            return summary[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r} (summary keys: {', '.join(summary)})")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.summary))

    def _table(self, name: str):
        from ..errors import EmuError
        from ..reader import ResultsFolder

        if self.engine is not None:
            from . import summary

            return getattr(summary, f"{name}_frame")(self.engine)
        if self.path is None:
            raise EmuError(f"{self.name}: no engine and no results folder to read {name} from")
        return ResultsFolder(self.path).table(FILES[name])

    @cached_property
    def ops(self):
        return self._table("ops")

    @cached_property
    def links(self):
        return self._table("links")

    @cached_property
    def nodes(self):
        return self._table("nodes")

    @cached_property
    def deliveries(self):
        return self._table("deliveries")

    @cached_property
    def replicas(self):
        from .summary import replicas_frame

        return replicas_frame(self.nodes)

    def compare(self, *others: "Result"):
        """This run beside ``others``: the table ``emu compare`` prints (``str()``), values in ``.frame``."""
        from ..compare import Comparison

        runs = [self, *others]
        return Comparison([r.summary for r in runs], [r.name for r in runs])

    def perfetto(self, out: str | Path, **window) -> int:
        """Write the run's timeline as Chrome trace-event JSON (emu.export.perfetto); bytes written.
        ``start_ps``, ``end_ps``, ``nodes`` ("0-3", "0,1,5", a range or a list of boards)."""
        from ..errors import EmuError
        from ..export.perfetto import write_perfetto

        if self.path is None:
            raise EmuError(f"{self.name}: the timeline is read from a results folder; replay with out=DIR")
        return write_perfetto(self.path, out, **window)

    def __repr__(self) -> str:
        s = self.summary
        where = f", path={str(self.path)!r}" if self.path else ""
        return (f"<Result {self.name}: {s.get('scheme')} on {s.get('nodes')} nodes, TTFT {s.get('ttft_s', 0):.4f} s, "
                f"{s.get('incomplete_ops', 0)} incomplete ops{where}>")
