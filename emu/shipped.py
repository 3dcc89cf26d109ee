"""The traces and sweep files that ship with the package, by name.

``emu replay mars_16k`` and ``emu sweep quick`` name them; a path to a file works as well,
and wins when both exist. They are package data (``emu/data``), found through
importlib.resources, so they are there after a plain ``pip install`` too.
"""

from __future__ import annotations

import gzip
import json
import os
from importlib import resources
from pathlib import Path

from .errors import ConfigError
from .names import did_you_mean

TRACE_SUFFIXES = (".json", ".json.gz")


def _folder(kind: str) -> Path:
    return Path(str(resources.files("emu.data") / kind))


def _named(kind: str, suffixes: tuple[str, ...]) -> dict[str, Path]:
    folder = _folder(kind)
    out = {}
    if folder.is_dir():
        for f in sorted(folder.iterdir()):
            for suf in suffixes:
                if f.name.endswith(suf) and f.is_file():
                    out.setdefault(f.name[: -len(suf)], f)
    return out


def traces() -> dict[str, Path]:
    """Shipped traces: name (file name without .json/.json.gz) -> file."""
    return _named("traces", TRACE_SUFFIXES)


def sweeps() -> dict[str, Path]:
    """Shipped sweep files: name -> file."""
    return _named("sweeps", (".toml",))


def _looks_like_path(ref: str) -> bool:
    return os.sep in ref or "/" in ref or ref.endswith(TRACE_SUFFIXES + (".toml", ".gz"))


def trace_path(ref: str | os.PathLike) -> Path:
    """A trace file: ``ref`` itself when it is a path or an existing file, else the shipped trace of that name."""
    ref = os.fspath(ref)
    p = Path(ref)
    have = traces()
    if not p.exists() and p.name == ref and ref in {f.name for f in have.values()}:
        return next(f for f in have.values() if f.name == ref)  # "mars_16k.json": the shipped file itself
    if p.exists() or _looks_like_path(ref):
        return p
    if ref in have:
        return have[ref]
    raise ConfigError(f"{ref}: no such file, and no shipped trace of that name; {did_you_mean(ref, have)}"
                      f"shipped: {', '.join(have) or 'none'} (emu trace list)")


def sweep_path(ref: str | os.PathLike) -> Path:
    """A sweep file: ``ref`` itself when it is a path or an existing file, else the shipped sweep of that name."""
    ref = os.fspath(ref)
    p = Path(ref)
    if p.exists() or _looks_like_path(ref):
        return p
    have = sweeps()
    if ref in have:
        return have[ref]
    raise ConfigError(f"{ref}: no such file, and no shipped sweep of that name; {did_you_mean(ref, have)}"
                      f"shipped: {', '.join(have) or 'none'} (emu sweep list)")


def peek_meta(path: Path) -> dict:
    """A trace's meta without decoding its columns: the writer puts it on the first line."""
    with (gzip.open if path.name.endswith(".gz") else open)(path, "rt", encoding="utf-8") as fh:
        first = fh.readline().strip()
    prefix = '{"meta":'
    if first.startswith(prefix) and first.endswith(","):
        try:
            return json.loads(first[len(prefix):-1])
        except json.JSONDecodeError:
            pass
    from .workload.trace import load_trace  # not one of ours: read it whole

    return load_trace(path).meta
