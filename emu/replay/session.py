"""Assemble and run one replay: the one place that turns a trace and options into a Result.

``emu replay``, the sweep worker, ``emu hw send`` and Python callers (``emu.replay``) all come
here, so an option means the same thing everywhere. Steps: resolve the trace (a Trace, a
path, or a shipped trace's name), check the options, open the capture, run the engine,
summarize, and write the results folder when ``out`` is given.

A capture given as an absolute path is written there (to a hidden name beside it, renamed
when the run is done); a relative name (a plain NAME.pcap or NAME.pcapng) goes into the
results folder, so it needs ``out``. The results folder is claimed, staged and published by
``emu.outputs.OutputFolder``: whatever happens, its files come from this run alone.
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


def _engine(engine, capture, flag: str) -> str:
    from .run import ENGINES

    if engine not in ENGINES:
        raise ConfigError(f"{flag}engine {engine!r}: one of {', '.join(ENGINES)}")
    if capture is not None:
        # The capture encodes each frame's header from its message's Meta, kept by the Python path.
        if engine == "compiled":
            raise ConfigError(f"{flag}engine compiled: not with {flag}capture; use {flag}engine auto or python")
        return "python"
    return engine


def resolve_trace(trace):
    """A Trace as it is; a path or a shipped trace's name, loaded and validated."""
    from ..workload.trace import Trace, load_trace

    if isinstance(trace, Trace):
        return trace
    from ..shipped import trace_path

    return load_trace(trace_path(trace))


class _CaptureTarget:
    """A capture at an absolute path: written under a hidden name beside it, moved there when the run is done."""

    def __init__(self, capture: Path, flag: str = ""):
        from ..outputs import check_writable

        if not capture.parent.is_dir():
            raise ConfigError(f"{flag}capture {capture}: no folder {capture.parent}")
        self.final = check_writable(capture, f"{flag}capture")
        self.temp = capture.parent / f".{capture.name}.{os.getpid()}.part"

    def discard(self) -> None:
        try:
            os.unlink(self.temp)
        except FileNotFoundError:
            pass


def replay(trace, *, topology: str = "auto", set=None, loss=0.0, fail=None, degrade=None, detect="100us",
           reliable=None, seed=0, capture=None, capture_filter=(), snaplen=DEFAULT_SNAPLEN,
           out=None, out_default=None, progress: bool = False, functional: bool = False, engine: str = "auto", trains: bool = True,
           flag: str = ""):
    """Replay ``trace`` (a Trace, a file path, or a shipped trace's name such as "mars_16k") on the
    emulated cluster and return its Result. ``set``: profile overrides ({"hw.link_rate": "10Gbps"});
    ``loss``: Bernoulli frame loss on every link; ``fail``/``degrade``: timeline clauses
    ("link 3-4 down at 0.5s"); ``detect``: failure detection delay; ``reliable``: None (on when
    frames can be lost), True or False; ``capture``: a pcap/pcapng file (see the module doc);
    ``out``: write a results folder there, which must not exist (None: keep everything in memory);
    ``out_default``: instead of ``out``, a folder name that takes the next free ``-2``, ``-3``...
    suffix when taken; ``functional``: carry real payload bytes and merge real attention states
    (the summary reports the error). ``engine``: "compiled" (the compiled loop, emu.replay.core),
    "python", or "auto" (compiled whenever it supports the run: timing mode, no capture,
    at most 64 boards). ``flag``: what error messages put before an option's name
    (the CLI passes "--", so a message names ``--loss``)."""
    import contextlib

    from ..outputs import OutputFolder, file_name
    from ..units import parse_float, parse_int, parse_time
    from .capture import Capture, parse_filters
    from .result import Result
    from .results import summarize, write_files
    from .run import Options, Replay

    tr = resolve_trace(trace)
    loss = parse_float(loss, f"{flag}loss")
    if not 0 <= loss <= 1:
        raise ConfigError(f"{flag}loss {loss}: must be a probability in [0, 1]")
    clauses = {"fail": _clauses(fail), "degrade": _clauses(degrade)}
    for what, cs in clauses.items():
        if any(not str(c).strip() for c in cs):
            raise ConfigError(f"{flag}{what} '': an empty clause; e.g. {flag}{what} 'link 0-1 down at 1s'")
    opt = Options(topology=topology, overrides=tuple(overrides_list(set)),
                  scenario=tuple(clauses["fail"] + clauses["degrade"]), loss=loss, seed=parse_int(seed, f"{flag}seed"),
                  reliable=_reliable(reliable), detect_ps=parse_time(detect, f"{flag}detect"), progress=progress,
                  functional=bool(functional), engine=_engine(engine, capture, flag),
                  trains=bool(trains))
    folder = OutputFolder(out, default=out_default) if out is not None or out_default is not None else None
    target = cap_name = None
    if capture is not None:
        flt = parse_filters(list(capture_filter))
        snaplen = parse_int(snaplen, f"{flag}snaplen")
        if not 62 <= snaplen <= 65535:
            raise ConfigError(f"{flag}snaplen {snaplen}: must be in 62..65535 (62: the headers only)")
        if Path(capture).is_absolute():
            target = _CaptureTarget(Path(capture), flag)
        else:
            if folder is None:
                raise ConfigError(f"{flag}capture {capture}: a relative name goes into the results folder; "
                                  "give a results folder (out, or drop --no-results) or an absolute path")
            cap_name = file_name(str(capture), f"{flag}capture", (".pcap", ".pcapng"))
    rp = Replay(tr, opt)
    # Claimed only now that every option is checked; from here on an error or a signal
    # removes what this run staged (emu.outputs).
    cap = None
    try:
        with folder or contextlib.nullcontext():
            if target is not None or cap_name is not None:
                cap = Capture(target.temp if target is not None else folder.staging / cap_name, flt, snaplen=snaplen)
                cap.attach(rp)
            try:
                rp.run()
            finally:
                if cap is not None:
                    cap.close()
            summary = summarize(rp)
            if folder is not None:
                write_files(rp, summary, folder.staging)
        if target is not None:
            os.replace(target.temp, target.final)
    except BaseException:
        if target is not None:
            target.discard()
        raise
    final = folder.path if folder is not None else None
    if final is not None:
        summary["results"] = str(final)
    if target is not None:
        summary["capture"] = str(target.final)
    elif cap_name is not None:
        summary["capture"] = str(final / cap_name)
    return Result(summary, path=final, engine=rp, name=final.name if final else None)
