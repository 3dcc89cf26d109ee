"""Run a sweep's points on a ``concurrent.futures`` executor: a local process pool or a Dask
cluster's (``distributed.Client(address).get_executor()``), through the same code.

Points go out as small dicts and come back as rows (``worker.run_point``); the process that
runs the sweep writes each row as a part as soon as it arrives, so stopping a sweep at any
moment loses no finished point, and the next run submits only the points without a part.
A point is claimed (``claims``) before it is sent, so two sweeps on one folder share the
work: each skips what the other runs, and waits for its parts at the end.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import multiprocessing
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import atomic_file
from ..errors import ConfigError
from ..outputs import remove_own_staged
from . import dataset
from .claims import Claims
from .spec import Sweep
from .worker import clear_run, init_pool_worker, pool_point, run_point

CONNECT_TIMEOUT_S = 10
POLL_S = 1.0  # how often the loop looks at the points another sweep on the folder runs


@dataclass
class Report:
    sweep: Sweep
    out: Path
    earlier: int = 0        # points finished by an earlier run, not run again
    ran: int = 0            # points run now
    elsewhere: int = 0      # points another sweep on the same folder ran meanwhile
    lost: list[str] = field(default_factory=list)  # points whose worker died: "index: error"
    scheduler_lost: int = 0  # points not run because the Dask scheduler went away
    rows: list[dict] = field(default_factory=list)  # every finished point, in sweep order
    wall_s: float = 0.0
    results: Path | None = None

    def count(self, status: str) -> int:
        return sum(r["status"] == status for r in self.rows)

    @property
    def ok(self) -> bool:
        return not self.lost and not self.scheduler_lost and all(r["status"] == "ok" for r in self.rows) and len(self.rows) == len(self.sweep.points)


class Progress:
    """``sweep NAME [####....] 12/40  done 11  failed 1  remaining 28  0:42`` on a terminal."""

    def __init__(self, name: str, total: int, enabled: bool, stream=None):
        self.name, self.total, self.enabled = name, total, enabled
        self.stream = stream or sys.stderr
        self.done = self.failed = 0
        self.t0 = time.monotonic()

    def add(self, status: str) -> None:
        if status == "ok":
            self.done += 1
        else:
            self.failed += 1
        self.show()

    def show(self) -> None:
        if not self.enabled:
            return
        n = self.done + self.failed
        fill = int(30 * n / self.total) if self.total else 30
        el = int(time.monotonic() - self.t0)
        print(f"\r  sweep {self.name} [{'#' * fill:<30}] {n}/{self.total}  done {self.done}  failed {self.failed}  "
              f"remaining {self.total - n}  {el // 60}:{el % 60:02d}", end="", file=self.stream, flush=True)

    def close(self) -> None:
        if self.enabled:
            print(file=self.stream, flush=True)


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def executor(scheduler: str | None = None, workers: int | None = None):
    """A ``concurrent.futures.Executor``: a Dask cluster's when ``scheduler`` is given, else a
    pool of ``workers`` fresh processes (spawned: no state inherited from this process)."""
    if scheduler:
        if not re.fullmatch(r"((tcp|tls|ucx|ws|wss|inproc)://)?\[?[\w.:-]+\]?(:\d+)?/?", scheduler):
            raise ConfigError(f"--scheduler {scheduler}: expected an address such as tcp://10.0.0.1:8786")
        try:
            from distributed import Client
        except ImportError:
            raise ConfigError("--scheduler needs dask.distributed: pip install 'mcf-emu[dask]'") from None
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ConfigError(f"--scheduler {scheduler}: cannot connect ({' '.join(str(exc).split())})") from None
        ex = client.get_executor(pure=False)
        try:
            if not client.scheduler_info().get("workers"):
                print(f"emu sweep: {scheduler} has no workers yet; points wait for them", file=sys.stderr)
            yield ex
        except BaseException:
            ex.shutdown(wait=False)
            raise
        finally:
            client.close()
    else:
        # each worker dies with this process, even when it is SIGKILLed (worker.init_pool_worker)
        ex = cf.ProcessPoolExecutor(max_workers=workers or default_workers(),
                                    mp_context=multiprocessing.get_context("spawn"),
                                    initializer=init_pool_worker, initargs=(os.getpid(),))
        try:
            yield ex
        except BaseException:
            # Interrupted: drop the queue and stop the points in flight (their parts were
            # never written, so the next run redoes them).
            procs = list((getattr(ex, "_processes", None) or {}).values())
            ex.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                proc.terminate()
            for proc in procs:  # none may outlive the sweep
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
            # the pool's manager thread, now without workers, ends and closes its wake-up pipe:
            # joined here, or the interpreter's exit hook races it (EBADF, "Exception ignored")
            with contextlib.suppress(Exception):
                ex.shutdown(wait=True)
            raise
        ex.shutdown(wait=True)


def _cost(point: dict) -> tuple:
    """Longest first (replay cost grows with the square of the prompt), so the pool drains evenly."""
    return (-point["seq"] ** 2, -point["nodes"], -point["decode_tokens"])


def check_out(sweep: Sweep, out: Path) -> None:
    """Refuse (``ConfigError``) an output folder that is a file or holds another sweep."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    info = out / "sweep.json"
    if info.is_file():
        try:
            name = json.loads(info.read_text()).get("name")
        except (OSError, ValueError):
            name = None
        if name != sweep.name:
            raise ConfigError(f"--out {out}: holds sweep {name!r}, not {sweep.name!r}; choose another --out")


def status(sweep: Sweep, out: Path) -> list[dict | None]:
    """The finished row of each point (None: not run yet)."""
    return [dataset.read_part(out, pid) for pid in sweep.ids()] if out.is_dir() else [None] * len(sweep.points)


def run(sweep: Sweep, out: str | Path, *, scheduler: str | None = None, workers: int | None = None,
        keep_runs: bool = False, retry_failed: bool = False, progress: bool = False,
        make_executor=None) -> Report:
    """Run the points of ``sweep`` that have no result in ``out`` yet; consolidate; report."""
    out = Path(out)
    check_out(sweep, out)
    t0 = time.monotonic()
    rep = Report(sweep, out)
    have = status(sweep, out)
    todo = [i for i, row in enumerate(have)
            if row is None or (retry_failed and row["status"] in ("failed", "incomplete"))]
    rep.earlier = len(sweep.points) - len(todo)
    # (a part written when the grid was different has an older index; a failed point run
    # again keeps its old row until the new one arrives)
    rows: dict[int, dict] = {i: {**row, "index": i, "sweep": sweep.name} for i, row in enumerate(have) if row is not None}

    meta = sweep.to_json()
    runs = (out / "runs").resolve() if keep_runs else None
    bar = Progress(sweep.name, len(sweep.points), progress)
    again = set(todo)
    bar.done = sum(row["status"] == "ok" for i, row in rows.items() if i not in again)
    bar.failed = rep.earlier - bar.done
    ids = sweep.ids()
    claims = Claims(out)

    def keep_dir(i: int) -> Path | None:
        return runs / f"{sweep.points[i]['scheme']}-{ids[i]}" if runs else None

    def unrecorded(i: int) -> None:
        """A point still claimed got no part (lost, or the sweep stopped): remove what its run
        left in runs/, free the claim."""
        if ids[i] in claims.mine:
            if runs:
                clear_run(keep_dir(i))
            claims.release(ids[i])

    with contextlib.ExitStack() as stack:
        # Claims are let go last, once the executor has stopped every worker.
        stack.callback(claims.close)
        stack.callback(lambda: [unrecorded(i) for i in range(len(ids))])
        # A signal can land between a part's temporary file and its removal: this process's own.
        stack.callback(lambda: [remove_own_staged(d) for d in (out, out / "parts")])
        # The executor first: a scheduler that refuses leaves no folder behind.
        ex = None
        if todo:
            make = make_executor or (lambda: executor(scheduler, min(workers or default_workers(), len(todo))))
            ex = stack.enter_context(make())
        out.mkdir(parents=True, exist_ok=True)
        with dataset.naming(out / "sweep.json"), atomic_file(out / "sweep.json", "w") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")
        def finish() -> None:
            bar.close()
            rep.rows = [rows[i] for i in sorted(rows)]
            meta_short = {k: v for k, v in meta.items() if k != "points"} | {"points": len(sweep.points)}
            rep.results = dataset.consolidate(out, rep.rows, meta_short)
            rep.wall_s = time.monotonic() - t0

        # Interrupted or not, what finished is in the dataset (the workers are stopped by the
        # executor's exit, after this).
        try:
            if ex is not None:
                bar.show()
                _drive(ex, sweep, out, rep, rows, todo, have, claims, keep_dir, bar, unrecorded)
        except BaseException:
            with contextlib.suppress(OSError):  # the first failure is the one to report (a full disk)
                finish()
            raise
        finish()
    return rep


def _cancelled(exc: BaseException) -> bool:
    """A future the cluster dropped (Dask cancels every future when its scheduler goes away)."""
    return isinstance(exc, cf.CancelledError)


def _drive(ex, sweep, out, rep, rows, todo, have, claims, keep_dir, bar, unrecorded) -> None:
    """Send the points to ``ex`` as it has room, each claimed first; write each row as it
    arrives; wait for the points another sweep on the folder holds."""
    ids = sweep.ids()
    queue = sorted(todo, key=lambda i: (_cost(sweep.points[i]), i))
    room = getattr(ex, "_max_workers", None) or len(queue)  # a pool's size; a cluster takes them all
    fn = pool_point if isinstance(ex, cf.ProcessPoolExecutor) else run_point
    futures: dict = {}
    held: set[int] = set()  # points another live sweep runs
    said_waiting = False

    def done_elsewhere(i: int) -> bool:
        row = dataset.read_part(out, ids[i])
        if row is None or (have[i] is not None and row == have[i]):
            return False
        rows[i] = {**row, "index": i, "sweep": sweep.name}
        rep.elsewhere += 1
        bar.add(row["status"])
        return True

    while queue or futures or held:
        while queue and len(futures) < room:
            i = queue.pop(0)
            if not claims.take(ids[i]):
                held.add(i)
                continue
            if done_elsewhere(i):  # finished by another sweep since this one looked
                claims.release(ids[i])
                continue
            k = keep_dir(i)
            if k is not None:
                clear_run(k)  # what a killed earlier try of this point left
            dataset.clear_part_temps(out, ids[i])
            futures[ex.submit(fn, sweep.points[i], sweep.name, i, str(k) if k else None)] = i
        if futures:
            done, _ = cf.wait(futures, timeout=POLL_S, return_when=cf.FIRST_COMPLETED)
        else:
            if not said_waiting:
                who = next((claims.held_elsewhere(ids[i]) for i in sorted(held)), None) or {}
                print(f"emu sweep: waiting for {len(held)} point{'s' if len(held) != 1 else ''} another sweep on {out} runs "
                      f"(pid {who.get('pid')} on {who.get('host')})", file=sys.stderr)
                said_waiting = True
            done = set()
            time.sleep(POLL_S)  # only another sweep's points are left: look again in a while
        for fut in sorted(done, key=futures.get):
            i = futures.pop(fut)
            try:
                row = fut.result()
            except Exception as exc:  # the worker, not the point: not recorded, rerun resumes it
                if _cancelled(exc):
                    rep.scheduler_lost += 1
                else:
                    rep.lost.append(f"point {i}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500])
                bar.add("lost")
                unrecorded(i)
                continue
            dataset.write_part(out, row)
            claims.release(ids[i])
            rows[i] = row
            rep.ran += 1
            bar.add(row["status"])
        for i in sorted(held):
            if done_elsewhere(i):
                held.discard(i)
            elif claims.held_elsewhere(ids[i]) is None:  # its owner stopped without a part: run it here
                held.discard(i)
                queue.insert(0, i)
        claims.refresh()
        bar.show()  # the clock moves while long points run
