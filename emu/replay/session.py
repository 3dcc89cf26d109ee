"""Assemble and run one replay: the one place that turns a trace and options into a Result.

``emu replay``, the sweep worker, ``emu hw send`` and Python callers (``emu.replay``) all come
here, so an option means the same thing everywhere. Steps: resolve the trace (a Trace, a
path, or a shipped trace's name), check the options, open the capture, run the engine,
summarize, and write the results folder when ``out`` is given.

A capture given as an absolute path is written there (to a hidden name beside it, renamed
when the run is done); a relative name goes into the results folder, so it needs ``out``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError

DEFAULT_SNAPLEN = 62  # the MCF headers: frame and message metadata, no payload


def overrides_list(set_) -> list[str]:
    """``set=`` as given (a dict of field -> value, one "k=v" string, or a list of them) -> ["k=v", ...]."""
    if set_ is None:
        return []
    if isinstance(set_, dict):
        return [f"{k}={v}" for k, v in set_.items()]
    if isinstance(set_, str):
        return [set_]
    return [str(x) for x in set_]


def _clauses(x) -> list[str]:
    return [] if x is None else [x] if isinstance(x, str) else list(x)


def _reliable(x):
    if x is None or isinstance(x, bool):
        return x
    table = {"auto": None, "on": True, "off": False}
    if x not in table:
        raise ConfigError(f"reliable {x!r}: one of auto, on, off (or None, True, False)")
    return table[x]


def resolve_trace(trace):
    """A Trace as it is; a path or a shipped trace's name, loaded and validated."""
    from ..workload.trace import Trace, load_trace

    if isinstance(trace, Trace):
        return trace
    from ..shipped import trace_path

    return load_trace(trace_path(trace))


class _CaptureTarget:
    """Where a capture goes: written under a hidden name, moved to its place when the run is done."""

    def __init__(self, capture, out: Path | None):
        p = Path(capture)
        if p.is_absolute():
            if not p.parent.is_dir():
                raise ConfigError(f"capture {capture}: no folder {p.parent}")
            if p.is_dir():
                raise ConfigError(f"capture {capture}: is a folder")
            self.final, self.into_results = p, False
            self.temp = p.parent / f".{p.name}.{os.getpid()}.part"
        else:
            if out is None:
                raise ConfigError(f"capture {capture}: a relative name goes into the results folder; "
                                  "give a results folder (out, or drop --no-results) or an absolute path")
            self.final, self.into_results = Path(p.name), True
            self.temp = out.parent / f".{out.name}.{p.name}"

    def discard(self) -> None:
        try:
            os.unlink(self.temp)
        except FileNotFoundError:
            pass


def replay(trace, *, topology: str = "auto", set=None, loss=0.0, fail=None, degrade=None, detect="100us",
           reliable=None, seed=0, capture=None, capture_filter=(), snaplen=DEFAULT_SNAPLEN,
           out=None, progress: bool = False, functional: bool = False):
    """Replay ``trace`` (a Trace, a file path, or a shipped trace's name such as "mars_16k") on the
    emulated cluster and return its Result. ``set``: profile overrides ({"hw.link_rate": "10Gbps"});
    ``loss``: Bernoulli frame loss on every link; ``fail``/``degrade``: timeline clauses
    ("link 3-4 down at 0.5s"); ``detect``: failure detection delay; ``reliable``: None (on when
    frames can be lost), True or False; ``capture``: a pcap/pcapng file (see the module doc);
    ``out``: write a results folder there (None: keep everything in memory); ``functional``: carry
    real payload bytes and merge real attention states (the summary reports the error)."""
    from ..units import parse_float, parse_int, parse_time
    from .capture import Capture, parse_filters
    from .result import Result
    from .results import summarize, write
    from .run import Options, Replay

    tr = resolve_trace(trace)
    loss = parse_float(loss, "loss")
    if not 0 <= loss <= 1:
        raise ConfigError(f"loss {loss}: must be a probability in [0, 1]")
    out = Path(out) if out is not None else None
    if out is not None and out.exists():
        raise ConfigError(f"{out}: already exists; choose another --out")
    opt = Options(topology=topology, overrides=tuple(overrides_list(set)),
                  scenario=tuple(_clauses(fail) + _clauses(degrade)), loss=loss, seed=parse_int(seed, "seed"),
                  reliable=_reliable(reliable), detect_ps=parse_time(detect, "detect"), progress=progress,
                  functional=bool(functional))
    target = cap = None
    if capture is not None:
        target = _CaptureTarget(capture, out)
        flt = parse_filters(list(capture_filter))
        snaplen = parse_int(snaplen, "snaplen")
    rp = Replay(tr, opt)
    try:
        if target is not None:
            cap = Capture(target.temp, flt, snaplen=snaplen)
            cap.attach(rp)
        try:
            rp.run()
        finally:
            if cap is not None:
                cap.close()
        summary = summarize(rp)
        final = None
        if out is not None:
            final = write(rp, summary, out, capture_from=str(target.temp) if target and target.into_results else None)
            if target and target.into_results:
                os.replace(final / target.temp.name, final / target.final)
        if target is not None and not target.into_results:
            os.replace(target.temp, target.final)
    except BaseException:
        if target is not None:
            target.discard()
        raise
    if final is not None:
        summary["results"] = str(final)
    if target is not None:
        summary["capture"] = str(final / target.final if target.into_results else target.final)
    return Result(summary, path=final, engine=rp, name=final.name if final else None)
