"""What the app serves, held on the server: the runs, the sweep datasets, the frame indexes,
the what-if runner and a figure cache. Callbacks reach it through ``current()`` (the Flask
app the request came to), so two apps in one process never mix."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import flask

from . import data as D
from .frames import CaptureIndexes
from .sweep import SweepError, load_sweeps
from .whatif import WhatIfs, note_of, trace_list


def user_cache_dir() -> Path:
    """The frame indexes' home: $XDG_CACHE_HOME/mcf-emu/frames (default ~/.cache/mcf-emu/frames)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mcf-emu" / "frames"


@dataclass
class Config:
    results: list
    sweep: str | list | None = None
    traces: list | None = None
    whatif_dir: str | None = None
    cache_dir: str | None = None  # frame indexes; default user_cache_dir()


class AppState:
    def __init__(self, cfg: Config):
        self.registry = D.Registry()
        found: list[Path] = []
        for p in cfg.results:
            self.registry.add_tree(p, sweeps=found)
        self._own_whatif = not cfg.whatif_dir
        self.whatif_dir = Path(cfg.whatif_dir) if cfg.whatif_dir else Path(tempfile.mkdtemp(prefix="mcf-whatif-"))
        self.whatif_dir.mkdir(parents=True, exist_ok=True)
        for p in sorted(self.whatif_dir.iterdir()):
            if p.is_dir() and not p.name.startswith(".") and (p / "summary.json").is_file():
                self.registry.add(p, origin="what-if", note=note_of(self.whatif_dir, p))
        self.cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else user_cache_dir()
        self.captures = CaptureIndexes(self.cache_dir)
        given = cfg.sweep if isinstance(cfg.sweep, (list, tuple)) else ([cfg.sweep] if cfg.sweep else [])
        self.sweep_paths = [Path(p) for p in given] + [p for p in found if Path(p) not in {Path(g) for g in given}]
        self.sweep_df = None
        self.sweep_meta: dict = {}
        self.sweep_error = None
        if self.sweep_paths:
            try:
                self.sweep_df, self.sweep_meta = load_sweeps(self.sweep_paths)
            except SweepError as exc:
                self.sweep_error = str(exc)
        self.traces = trace_list(cfg.traces or [])
        self.whatifs = WhatIfs(self.whatif_dir, self.traces, self.registry)
        self.figs = D.LRU(160)

    def close(self) -> None:
        """Stop running what-ifs and drop unfinished frame indexes (finished ones stay in the cache)."""
        for j in self.whatifs.jobs:
            self.whatifs.cancel(j.id)
        self.whatifs.close()
        self.captures.close()
        if self._own_whatif and not any(p.is_dir() for p in self.whatif_dir.iterdir() if not p.name.startswith(".")):
            shutil.rmtree(self.whatif_dir, ignore_errors=True)

    # -- selections from a URL or a picker --------------------------------------------------

    def pick(self, keys, default_first: bool = True) -> list[D.Run]:
        """The runs named by ``keys`` (a list, or a comma-separated string from a URL) that the
        registry knows, in order, without repeats; else the first readable run."""
        if isinstance(keys, str):
            keys = [k for k in keys.split(",") if k]
        out, seen = [], set()
        for k in keys or []:
            r = self.registry.get(k)
            if r is not None and k not in seen:
                out.append(r)
                seen.add(k)
        if not out and default_first:
            runs = self.registry.runs()
            first = next((r for r in runs if not r.error), runs[0] if runs else None)
            out = [first] if first else []
        return out


def current() -> AppState:
    return flask.current_app.config["EMU_STATE"]
