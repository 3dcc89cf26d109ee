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

from .. import validate as V
from ..errors import ConfigError

DEFAULT_SNAPLEN = V.SNAPLEN_MIN  # the MCF headers: frame and message metadata, no payload
PROBABILITY = "a probability in [0, 1]"


def overrides_list(set_, what: str = "set") -> list[str]:
    """``set=`` as given (a dict of field -> value, one "k=v" string, or a list of them) -> ["k=v", ...]."""
    import numbers

    if not isinstance(set_, dict):
        return V.texts(set_, what, "an override ('hw.link_rate=10Gbps')")
    out = []
    for k, v in set_.items():
        if not isinstance(k, str):
            raise ConfigError(f"{what} {V.show(k)}: a field is named by text, e.g. 'hw.link_rate'")
        if not isinstance(v, (str, numbers.Real)):
            raise ConfigError(f"{what} {k}={V.show(v)}: a value is a number, a bool or text such as '10Gbps'")
        out.append(V.printable(f"{k}={v}", what))
    return out


def _clauses(x, what: str) -> list[str]:
    cs = V.texts(x, what, "a clause")
    if any(not c.strip() for c in cs):
        raise ConfigError(f"{what} '': an empty clause; e.g. {what} 'link 0-1 down at 1s'")
    return cs


def _reliable(x, what: str):
    if x is None or isinstance(x, bool):
        return x
    table = {"auto": None, "on": True, "off": False}
    if not isinstance(x, str) or x not in table:
        raise ConfigError(f"{what} {V.show(x)}: one of auto, on, off (or None, True, False)")
    return table[x]


def _progress(x, what: str) -> str | None:
    """``progress``: False (none), True or "bar" (a bar), "json" (JSON lines): the mode or None."""
    from ..progress import MODES

    import numpy as np

    if isinstance(x, str) and x in MODES:
        return x
    if isinstance(x, (bool, np.bool_)):
        return "bar" if x else None
    raise ConfigError(f"{what} {V.show(x)}: True or \"bar\" (a bar on stderr), \"json\" (JSON lines on stderr) "
                      "or False")


def resolve_trace(trace, what: str = "trace"):
    """A Trace as it is; a path or a shipped trace's name, loaded and validated."""
    from ..workload.trace import Trace, load_trace

    if isinstance(trace, Trace):
        return trace
    V.path(trace, what)
    from ..shipped import trace_path

    return load_trace(trace_path(os.fspath(trace)))


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
           out=None, out_default=None, progress: bool | str = False, functional: bool = False, engine: str = "auto", trains: bool = True,
           routing: str = "shortest", flag: str = ""):
    """Replay ``trace`` (a Trace, a file path, or a shipped trace's name such as "mars_16k") on the
    emulated cluster and return its Result. ``set``: profile overrides ({"hw.link_rate": "10Gbps"});
    ``loss``: Bernoulli frame loss on every link; ``fail``/``degrade``: timeline clauses
    ("link 3-4 down at 0.5s"); ``detect``: failure detection delay; ``reliable``: None (on when
    frames can be lost), True or False; ``capture``: a pcap/pcapng file (see the module doc);
    ``out``: write a results folder there, which must not exist (None: keep everything in memory);
    ``out_default``: instead of ``out``, a folder name that takes the next free ``-2``, ``-3``...
    suffix when taken; ``functional``: carry real payload bytes and merge real attention states
    (the summary reports the error). ``progress``: True or "bar" draws a bar on stderr (ops,
    simulated and wall time, ETA), "json" writes one JSON object per line there (emu.progress).
    ``engine``: "auto" or "compiled" (the compiled loop, emu.engine.loop, which runs every
    replay); "python" is the test suite's reference path (tests/pyreplay.py), refused elsewhere.
    ``routing``: "shortest" or "dateline" (dimension order with a dateline on a torus, mesh or
    ring: routes back-pressure cannot deadlock, emu.topology.dateline). ``flag``: what error messages put before an option's name
    (the CLI passes "--", so a message names ``--loss``). Every option is checked, types as
    docs/api.md lists them, before the trace is read: ConfigError in one line."""
    import contextlib

    from .capture import Capture
    from .result import Result
    from .run import Replay

    flt, snaplen, target, cap_name, folder, opt = _options(
        topology=topology, set=set, loss=loss, fail=fail, degrade=degrade, detect=detect, reliable=reliable,
        seed=seed, capture=capture, capture_filter=capture_filter, snaplen=snaplen, out=out,
        out_default=out_default, progress=progress, functional=functional, engine=engine, trains=trains,
        routing=routing, flag=flag)
    tr = resolve_trace(trace)
    rp = Replay(tr, opt)
    rp.page_out_trace = tr is not trace  # loaded here: its arrays are the replay's to move
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
            from .summary import summarize, write_files  # pandas: loaded after the run, not beside it

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


def _options(*, topology, set, loss, fail, degrade, detect, reliable, seed, capture, capture_filter, snaplen,
             out, out_default, progress, functional, engine, trains, routing, flag):
    """Every option checked (types first, then values), before the trace is read or a file made:
    (capture filter, snaplen, absolute capture target, capture name in the folder, folder, Options)."""
    from ..outputs import OutputFolder, file_name
    from .capture import parse_filters
    from ..topology.routing import ROUTINGS
    from .run import ENGINES, Options

    V.choice(flag, "flag", ("", "--"))
    progress = _progress(progress, "progress")  # API only: the CLI passes a mode or None
    for name, value in (("functional", functional), ("trains", trains)):
        V.boolean(value, name)  # API only: the CLI's switches are bools already
    clauses = {what: _clauses(x, f"{flag}{what}") for what, x in (("fail", fail), ("degrade", degrade))}
    if clauses["fail"] or clauses["degrade"]:
        from ..net.timeline import parse as parse_scenario

        parse_scenario(clauses["fail"] + clauses["degrade"])  # a clause's own mistakes, before the trace loads
    flt = parse_filters(V.texts(capture_filter, f"{flag}capture-filter" if flag else "capture_filter", "a filter"))
    snaplen = V.snaplen(snaplen, f"{flag}snaplen")
    opt = Options(topology=V.spec_or_path(topology, f"{flag}topology"), overrides=tuple(overrides_list(set, f"{flag}set")),
                  scenario=tuple(clauses["fail"] + clauses["degrade"]),
                  loss=V.number(loss, f"{flag}loss", 0, 1, expect=PROBABILITY),
                  seed=V.integer(seed, f"{flag}seed", lo=0), reliable=_reliable(reliable, f"{flag}reliable"),
                  detect_ps=V.time_ps(detect, f"{flag}detect"), progress=progress, functional=functional,
                  engine=V.choice(engine, f"{flag}engine", ENGINES), trains=trains,
                  routing=V.choice(routing, f"{flag}routing", ROUTINGS))
    for what, p in (("out", out), ("out_default", out_default)):
        if p is not None:
            V.path(p, f"{flag}{what}")
    folder = OutputFolder(out, default=out_default) if out is not None or out_default is not None else None
    target = cap_name = None
    if capture is not None:
        cap = V.path(capture, f"{flag}capture")
        if cap.is_absolute():
            target = _CaptureTarget(cap, flag)
        else:
            if folder is None:
                raise ConfigError(f"{flag}capture {capture}: a relative name goes into the results folder; "
                                  "give a results folder (out, or drop --no-results) or an absolute path")
            cap_name = file_name(os.fspath(capture), f"{flag}capture", (".pcap", ".pcapng"))
    return flt, snaplen, target, cap_name, folder, opt
