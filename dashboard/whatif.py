"""What-if runs: `python -m emu replay` in a child process, one at a time.

The app never imports the engine: a what-if is a subprocess writing a results folder into
the directory the app owns. Its progress comes from the replay's machine-readable progress
stream (``emu replay --progress json``: one JSON object a line on stderr, docs/api.md), read
through a plain pipe; any other line on stderr is the replay's own message. Every
value from the form is checked here before it becomes one argv element (no shell, no paths
from the browser: the trace is picked by key from the server's list).

A failure clause is checked by the replay itself, with the parser and the topology that
``emu replay --fail`` uses (emu.net.timeline, part of the engine, which the app does not
import): ``submit`` returns once the replay has passed its checks (its first progress, or
its end), and a replay that refuses its options is no job at all: its one-line message
comes back as a WhatIfError and nothing of it is left in the folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# the replay's own unit parser (a leaf module, no engine): a form value passes here exactly when
# `emu replay --set` reads it
from emu.errors import ConfigError
from emu.jsontext import parse_json
from emu.units import parse_rate, parse_time
from emu.reader import MAX_BOARDS  # as many as a trace may have

TOPOLOGIES = ("auto", "ring", "bring", "mesh", "torus", "star", "full", "fattree")
_SHAPE = re.compile(r"^\d{1,4}(x\d{1,4})?$")
# the characters of scenario clauses (keywords, numbers, units, U-V, U>V, *, ';' between
# clauses); what they say is the replay's to check
_CLAUSE_TEXT = re.compile(r"[A-Za-z0-9µ .*;>-]{1,200}")
_ERROR = re.compile(r"^emu replay: error: (.+)$")
STARTUP_WAIT_S = 60  # at most this long for a replay to pass its checks before the form answers


class WhatIfError(ValueError):
    """A form value that cannot become a replay option; the message says which and why."""


def trace_list(paths) -> dict[str, Path]:
    """The traces a what-if may replay, by key (file name), from files and folders."""
    out: dict[str, Path] = {}
    for p in paths or ():
        p = Path(p)
        files = sorted(q for q in p.iterdir() if q.is_file() and (q.name.endswith(".json") or q.name.endswith(".json.gz"))) \
            if p.is_dir() else [p] if p.is_file() else []
        for f in files:
            key, i = f.name, 2
            while key in out and out[key] != f.resolve():
                key, i = f"{f.name} ({i})", i + 1
            out[key] = f.resolve()
    return out




class FormTypeError(WhatIfError):
    """A form value that is not a string (or empty): the request itself is malformed."""


def shape_boards(topo: str, shape: str) -> int:
    """Boards a topology of this shape has (a fat-tree of k has k^3/4)."""
    dims = [int(x) for x in shape.split("x")]
    if topo == "fattree":
        k = dims[0]
        return k ** 3 // 4 if len(dims) == 1 else 10**9
    n = 1
    for d in dims:
        n *= d
    return n


def build_args(trace: Path, form: dict) -> tuple[list[str], str]:
    """argv after ``emu replay TRACE`` and a short description, from the form's values."""
    for k, v in form.items():
        if v is not None and not isinstance(v, str):
            raise FormTypeError(f"{k}: a text value expected, got {type(v).__name__}")
    args: list[str] = []
    desc: list[str] = []
    topo = (form.get("topology") or "auto").strip()
    shape = (form.get("shape") or "").strip()
    if topo not in TOPOLOGIES:
        raise WhatIfError(f"topology {topo!r}: one of {', '.join(TOPOLOGIES)}")
    if shape:
        if not _SHAPE.fullmatch(shape):
            raise WhatIfError(f"shape {shape!r}: a size like 16, 4x4 or 2x8")
        if topo == "auto":
            raise WhatIfError("a shape needs a topology other than auto")
        n = shape_boards(topo, shape)
        if not 2 <= n <= MAX_BOARDS or any(int(d) == 0 for d in shape.split("x")):
            raise WhatIfError(f"shape {shape!r}: {topo} of this shape has {n:,} boards; 2 to {MAX_BOARDS} are possible")
        topo = f"{topo}:{shape}"
    args.append(f"--topology={topo}")
    if topo != "auto":
        desc.append(topo)
    rate = (form.get("rate") or "").strip()
    if rate:
        try:
            ok = parse_rate(rate, "link rate") > 0
        except ConfigError:
            ok = False
        if not ok:
            raise WhatIfError(f"link rate {rate!r}: a rate like 10Gbps or 2.5Gbps")
        args.append(f"--set=hw.link_rate={rate.replace(' ', '')}")
        desc.append(rate.replace(" ", ""))
    lat = (form.get("latency") or "").strip()
    if lat:
        try:
            parse_time(lat, "latency")
        except ConfigError:
            raise WhatIfError(f"latency {lat!r}: a time like 2us or 500ns") from None
        args.append(f"--set=hw.link_latency_ps={lat.replace(' ', '')}")
        desc.append(f"lat {lat.replace(' ', '')}")
    loss = form.get("loss")
    if loss not in (None, ""):
        try:
            lv = float(loss)
        except (TypeError, ValueError):
            raise WhatIfError(f"loss {loss!r}: a probability like 0.01") from None
        if not 0 <= lv <= 1:
            raise WhatIfError(f"loss {loss!r}: must be in [0, 1]")
        if lv:
            args.append(f"--loss={lv!r}")
            desc.append(f"loss {lv:g}")
    fail = (form.get("failure") or "").strip()
    if fail:
        if not _CLAUSE_TEXT.fullmatch(fail):
            raise WhatIfError(f"failure {fail[:200]!r}: e.g. 'link 0-1 down at 0.5s', 'node 3 down at 1s' or "
                              "'link 0-1 degrade 0.25 at 1s until 2s'")
        args.append(("--fail=" if re.search(r"\b(down|up)\b", fail, re.I) else "--degrade=") + fail)
        desc.append(fail)
    return args, ", ".join(desc) or "as recorded"


@dataclass
class Job:
    id: int
    trace_key: str
    desc: str
    out: Path
    argv: list[str]
    state: str = "queued"  # running | done | failed | cancelled
    progress: float = 0.0
    sim_s: float = 0.0
    started: float = field(default_factory=time.time)
    ended: float | None = None
    message: str = ""
    run_key: str | None = None
    proc: subprocess.Popen | None = None
    tail: list[str] = field(default_factory=list)  # the last lines on stderr that are not progress
    began: bool = False  # the replay passed its checks and runs (its first progress line)
    ready: threading.Event = field(default_factory=threading.Event)  # began, or ended

    @property
    def elapsed(self) -> float:
        return (self.ended or time.time()) - self.started


def progress_row(line: bytes) -> tuple[float, float] | None:
    """(fraction of the ops done, simulated seconds) of one line of ``emu replay --progress json``,
    or None for a line that is not the replay's progress."""
    try:
        row = parse_json(line, "progress", ValueError)
    except ValueError:
        return None
    if not isinstance(row, dict) or row.get("progress") != "replay":
        return None
    total = row.get("ops_total") or 0
    return (row.get("ops_done", 0) / total if total else 0.0), float(row.get("simulated_s") or 0.0)


def read_note(out_dir: Path, run_dir: Path) -> dict:
    """The note the app left beside a what-if's results folder (its trace, its change, the replay's
    argv); empty when it is missing or not a JSON object (a what-if folder is the user's to edit)."""
    path = Path(out_dir) / f".{Path(run_dir).name}.json"
    try:
        note = parse_json(path.read_bytes(), str(path), ValueError)
    except (OSError, ValueError):
        return {}
    return note if isinstance(note, dict) else {}


def note_of(out_dir: Path, run_dir: Path) -> str | None:
    """What a what-if changed, from its note."""
    change = read_note(out_dir, run_dir).get("change")
    return change if isinstance(change, str) else None


class WhatIfs:
    """Runs what-ifs one at a time; a finished run is added to the registry."""

    def __init__(self, out_dir: Path, traces: dict[str, Path], registry):
        self.out_dir = Path(out_dir).resolve()  # absolute: the replay runs from another folder
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.traces = traces
        self.registry = registry
        self.jobs: list[Job] = []
        self._lock = threading.Lock()
        # replays run from an empty folder of their own: nothing planted beside the results
        # (an emu/ package, a sitecustomize) is on their import path
        self.cwd = Path(tempfile.mkdtemp(prefix="mcf-whatif-cwd-"))

    def close(self) -> None:
        shutil.rmtree(self.cwd, ignore_errors=True)

    def current(self) -> Job | None:
        with self._lock:
            for j in self.jobs:
                if j.state in ("queued", "running"):
                    return j
        return None

    def job(self, job_id) -> Job | None:
        with self._lock:
            return next((j for j in self.jobs if j.id == job_id), None)

    def submit(self, trace_key: str, form: dict) -> Job:
        if self.current():
            raise WhatIfError("a what-if is already running; wait for it or cancel it")
        trace = self.traces.get(trace_key) if isinstance(trace_key, str) else None
        if trace is None:
            raise WhatIfError("pick a trace from the list")
        opts, desc = build_args(trace, form)
        with self._lock:
            n = len(self.jobs) + 1
            stem = re.sub(r"[^A-Za-z0-9]+", "-", trace.name.split(".")[0]).strip("-")
            base = f"whatif-{n}-{stem}"
            out, i = self.out_dir / base, 2
            while out.exists():
                out, i = self.out_dir / f"{base}-{i}", i + 1
            # -P: the working directory is not put on sys.path; the installed package runs
            argv = [sys.executable, "-P", "-m", "emu", "replay", str(trace), f"--out={out}", "--progress=json", *opts]
            job = Job(n, trace_key, desc, out, argv)
            self.jobs.append(job)
        threading.Thread(target=self._run, args=(job,), name=f"whatif-{n}", daemon=True).start()
        job.ready.wait(STARTUP_WAIT_S)
        if job.state == "failed" and not job.began:  # refused its options: not a job, nothing left
            with self._lock:
                self.jobs.remove(job)
            self._log(job).unlink(missing_ok=True)
            raise WhatIfError(job.message)
        return job

    def _log(self, job: Job) -> Path:
        return self.out_dir / f".{job.out.name}.log"

    def cancel(self, job_id) -> None:
        j = self.job(job_id)
        if j and j.proc and j.state == "running":
            j.state = "cancelled"
            try:
                os.killpg(j.proc.pid, signal.SIGTERM)  # the child's own group: the replay and nothing else
            except (ProcessLookupError, PermissionError):
                pass

    def _run(self, job: Job) -> None:
        job.state = "running"
        try:
            self._follow(job)
        finally:
            job.ready.set()

    def _follow(self, job: Job) -> None:
        log = open(self._log(job), "wb")
        try:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            job.proc = subprocess.Popen(job.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.PIPE,
                                        cwd=str(self.cwd), env=env, start_new_session=True)
            for raw in job.proc.stderr:
                row = progress_row(raw)
                if row is None:  # the replay's own words (a note, its error): the last few are kept
                    job.tail = [*job.tail[-19:], raw.decode("utf-8", "replace").rstrip()[:1000]]
                    continue
                job.progress, job.sim_s = row
                job.began = True
                job.ready.set()
            rc = job.proc.wait()
        except Exception as exc:
            rc = -1
            job.message = f"could not start the replay: {exc}"
        finally:
            if job.proc is not None and job.proc.stderr is not None:
                job.proc.stderr.close()
            log.close()
        job.ended = time.time()
        if job.state == "cancelled":
            job.message = "cancelled"
            return
        if job.out.is_dir() and (job.out / "summary.json").is_file():
            note = {"trace": job.trace_key, "change": job.desc, "argv": job.argv[4:]}
            try:
                (self.out_dir / f".{job.out.name}.json").write_text(json.dumps(note, indent=1) + "\n")
            except OSError:
                pass
            run = self.registry.add(job.out, origin="what-if", key=job.out.name, note=job.desc)
            job.run_key = run.key
            job.progress = 1.0
            job.state = "done"
            job.message = "finished" if rc == 0 else "finished, but some ops never completed (see its summary)"
        else:
            job.state = "failed"
            lines = [ln.strip() for ln in job.tail if ln.strip()]
            err = [ln for ln in lines if "error" in ln.lower()]
            line = err[-1] if err else lines[-1] if lines else job.message or f"exit status {rc}"
            m = _ERROR.match(line)  # the replay's own one-line message, as the CLI prints it
            job.message = (m[1] if m else line)[:400]
