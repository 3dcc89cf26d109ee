"""emu sweep under faults: a killed sweep leaves no worker running, a full disk or SIGTERM
leaves no staged run folder, two sweeps on one folder run each point once, a dry run
predicts the refusal of the real one."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from emu.cli import main
from emu.sweep import dataset, runner, spec
from emu.sweep.worker import run_point
from tiny_sweep import GRID, write
from waits import HANG_S

ROOT = Path(__file__).resolve().parents[1]

# A point that never ends: imported by the pool's workers (PYTHONPATH), it takes the place of
# the worker's run_point, reserves its --keep-runs folder and stages a file as a replay does,
# says so with a file named by its pid in $EMU_TEST_READY, then waits.
BLOCKER = '''
import os, threading
from pathlib import Path
import emu.sweep.worker as w

def _run_point(point, sweep="", index=0, keep_dir=None):
    from emu.outputs import OutputFolder
    if keep_dir is None:
        Path(os.environ["EMU_TEST_READY"], str(os.getpid())).write_text("")
        threading.Event().wait()
    with OutputFolder(keep_dir) as f:
        (f.staging / "summary.json").write_text("{}")
        Path(os.environ["EMU_TEST_READY"], str(os.getpid())).write_text(keep_dir)
        threading.Event().wait()

w.run_point = _run_point

def block(*args):
    return getattr(w, "pool_point", w.run_point)(*args)
'''

# The sweep command with every point blocked (the pool's function is the blocker's).
SWEEP = """
import sys
import blocker
import emu.sweep.runner as r
r.run_point = r.pool_point = blocker.block
from emu.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _gone(pid: int) -> bool:
    """Ended (a zombie left for a parent that does not reap counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p.name))
    return out


def _wait_for(cond, proc, what: str) -> None:
    """Wait on ``cond`` while the sweep runs (the sweep ending first is a failure)."""
    ev = threading.Event()
    while not cond():
        assert proc.poll() is None, f"the sweep ended before {what}: {proc.communicate()}"
        ev.wait(0.05)


@contextlib.contextmanager
def _blocked_sweep(tmp_path: Path, *args: str):
    (tmp_path / "blocker.py").write_text(BLOCKER)
    ready = tmp_path / "ready"
    ready.mkdir()
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", EMU_TEST_READY=str(ready))
    proc = subprocess.Popen([sys.executable, "-c", SWEEP, "sweep", str(write(tmp_path, GRID)), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    helpers: list[int] = []
    try:
        _wait_for(lambda: len(list(ready.iterdir())) >= 2, proc, "two workers started their points")
        helpers += _children(proc.pid)  # the pool's workers and multiprocessing's resource tracker
        yield proc, sorted(int(p.name) for p in ready.iterdir()), helpers
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in helpers:  # a failed test leaves none of its processes behind (they hold its pipes)
            if not _gone(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=HANG_S)


# ------------------------------------------------------------------------- a killed sweep


def test_sigkill_of_the_sweep_ends_its_workers(tmp_path):
    with _blocked_sweep(tmp_path, "--workers", "2", "--out", str(tmp_path / "out")) as (proc, workers, helpers):
        assert set(workers) < set(helpers)
        proc.kill()
        proc.wait()
        ev = threading.Event()
        for _ in range(1200):  # a hang guard only (60 s): the assertion is that they end
            if all(_gone(p) for p in helpers):
                break
            ev.wait(0.05)
        assert [p for p in helpers if not _gone(p)] == []


def test_sigterm_of_the_sweep_removes_the_runs_its_workers_staged(tmp_path):
    out = tmp_path / "out"
    with _blocked_sweep(tmp_path, "--workers", "2", "--out", str(out), "--keep-runs") as (proc, workers, _):
        staged = [p.name for p in (out / "runs").iterdir()]
        assert len([n for n in staged if n.endswith(".part")]) == 2  # the points are mid-write
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG_S)  # a hang guard only
    assert proc.returncode == 143, err
    assert err.count("\n") == 1 and "terminated" in err, err
    assert list((out / "runs").iterdir()) == []  # neither a hidden .part folder nor a reserved one
    assert not (out / "claims").exists() and all(_gone(p) for p in workers)


# ------------------------------------------------------------------------- a full disk


def test_point_on_a_full_disk_says_where_in_one_line(tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    pt = spec.normalize({**spec.PARAMS, "scheme": "mars", "seq": 256, "nodes": 2, "chunk": 128})
    runs = tmp_path / "runs"
    row = run_point(pt, "x", 0, str(runs / "mars-abc"))
    assert row["status"] == "failed"
    assert row["error"] == "runs/mars-abc: write failed (No space left on device)"
    assert list(runs.iterdir()) == []


UNSHARE = shutil.which("unshare")


@pytest.mark.skipif(os.geteuid() != 0 or not UNSHARE, reason="needs root and unshare for a private tmpfs")
@pytest.mark.parametrize("size", ["120k", "300k"])
def test_full_disk_with_keep_runs_leaves_nothing_partial(tmp_path, size):
    """A tmpfs too small for the runs (120k: too small for every part as well) in a private
    mount namespace; what the sweep left is copied out before the namespace goes."""
    f = write(tmp_path, GRID)
    mnt, copy = tmp_path / "mnt", tmp_path / "copy"
    mnt.mkdir()
    script = (f"mount -t tmpfs -o size={size} tmpfs {mnt} || exit 99; cd {tmp_path}; "
              f"{sys.executable} -m emu sweep {f} --out mnt/out --keep-runs --workers 2 >stdout 2>stderr; "
              f"echo $? >rc; cp -a {mnt}/out {copy}")
    subprocess.run([UNSHARE, "-m", "sh", "-c", script], check=True, timeout=HANG_S, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    rc, err = int((tmp_path / "rc").read_text()), (tmp_path / "stderr").read_text()
    assert rc in (1, 2) and "Traceback" not in err, err
    if rc == 2:  # the sweep stopped: one line naming the file that did not fit
        assert err.count("\n") == 1 and err.startswith("emu sweep: error: mnt/out/") and "No space left" in err, err
    left = [p.relative_to(copy) for p in copy.rglob("*")]
    assert not [p for p in left if p.name.startswith(".")], left  # no staged run, no temporary part
    runs = [p.name for p in (copy / "runs").iterdir()] if (copy / "runs").exists() else []
    parts = {p.stem for p in (copy / "parts").glob("*.parquet")} if (copy / "parts").exists() else set()
    assert all(n.split("-", 1)[1] in parts and any((copy / "runs" / n).iterdir()) for n in runs), (runs, parts)
    assert not (copy / "claims").exists()
    if (copy / "results.parquet").exists():
        for e in pd.read_parquet(copy / "results.parquet")["error"].dropna():
            assert "pyarrow" not in e and "Errno" not in e and e.startswith("runs/"), e


# ------------------------------------------------------------------------- two sweeps, one folder


class _Recording(cf.ThreadPoolExecutor):
    def __init__(self):
        super().__init__(2)
        self.sent: list[int] = []

    def submit(self, fn, *args, **kwargs):
        self.sent.append(args[2])
        return super().submit(fn, *args, **kwargs)


def _claim_as(out: Path, pid_: str, proc_pid: int) -> None:
    """The claim file a sweep process ``proc_pid`` holds on a point (docs/sweeps.md)."""
    try:  # the process's start time, as in /proc/PID/stat (field 22)
        start = int(Path(f"/proc/{proc_pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except OSError:
        start = None
    d = out / "claims"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{pid_}.claim").write_text(json.dumps({"pid": proc_pid, "host": socket.gethostname(), "start": start}))


def test_a_point_another_live_sweep_runs_is_waited_for_not_run(tmp_path, monkeypatch):
    sweep = spec.load(write(tmp_path, GRID))
    out, ids = tmp_path / "out", sweep.ids()
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        _claim_as(out, ids[2], other.pid)  # the other sweep is running point 2
        # the loop looks at the other sweep's point each turn; once this sweep's own three
        # are written, the other "finishes" point 2 (its part appears)
        real = dataset.read_part
        theirs = run_point(sweep.points[2], sweep.name, 2)

        def read_part(o, pid):
            if pid == ids[2] and all(dataset.part_path(out, ids[i]).exists() for i in (0, 1, 3)) \
                    and not dataset.part_path(out, ids[2]).exists():
                dataset.write_part(out, theirs)
            return real(o, pid)

        monkeypatch.setattr(dataset, "read_part", read_part)
        monkeypatch.setattr(runner, "POLL_S", 0.05, raising=False)
        ex = _Recording()
        rep = runner.run(sweep, out, make_executor=lambda: ex)
    finally:
        other.stdin.close()
        other.wait()
    assert sorted(ex.sent) == [0, 1, 3]  # point 2 was never computed here
    assert rep.ran == 3 and rep.elsewhere == 1 and len(rep.rows) == 4 and rep.ok
    assert (out / "claims" / f"{ids[2]}.claim").exists()  # still the other sweep's: not removed
    assert not [p for p in (out / "claims").iterdir() if p.name != f"{ids[2]}.claim" and p.suffix == ".claim"]


def test_a_claim_whose_owner_died_is_taken_over(tmp_path):
    sweep = spec.load(write(tmp_path, GRID))
    out, ids = tmp_path / "out", sweep.ids()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _claim_as(out, ids[1], dead.pid)  # a sweep killed while it ran point 1
    ex = _Recording()
    rep = runner.run(sweep, out, make_executor=lambda: ex)
    assert sorted(ex.sent) == [0, 1, 2, 3] and rep.ran == 4 and rep.ok
    assert not (out / "claims").exists()


def test_two_identical_sweeps_at_once_run_each_point_once(tmp_path):
    f, out = write(tmp_path, GRID), tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "emu", "sweep", str(f), "--out", str(out), "--workers", "1", "--json"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    res = [p.communicate(timeout=HANG_S) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], res
    reps = [json.loads(o) for o, _ in res]
    assert sum(r["ran"] for r in reps) == 4  # every point computed once, by one of them
    assert all(len(r["rows"]) == 4 and r["ok"] == 4 for r in reps)
    assert len(dataset.read(out)[0]) == 4 and not (out / "claims").exists()


# ------------------------------------------------------------------------- dry run


def test_dry_run_predicts_the_refusal(tmp_path, capsys):
    f = write(tmp_path, GRID)
    other = tmp_path / "other"
    other.mkdir()
    (other / "sweep.json").write_text('{"name": "long"}')
    assert main(["sweep", str(f), "--dry-run", "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds sweep 'long', not 'tiny'" in err, err
    assert main(["sweep", str(f), "--out", str(other)]) == 2  # the same refusal, for real
    assert "holds sweep 'long', not 'tiny'" in capsys.readouterr().err


# ------------------------------------------------------------------------- a Dask scheduler lost


class _SchedulerGone(cf.Executor):
    """What Dask's executor gives when its scheduler goes away: every future cancelled."""

    def submit(self, fn, *args, **kwargs):
        fut = cf.Future()
        fut.cancel()
        fut.set_running_or_notify_cancel()
        return fut


def test_a_lost_scheduler_is_said_once_with_how_to_resume(tmp_path, monkeypatch, capsys):
    f, out = write(tmp_path, GRID), tmp_path / "out"
    monkeypatch.setattr(runner, "executor", lambda scheduler, workers: contextlib.nullcontext(_SchedulerGone()))
    assert main(["sweep", str(f), "--out", str(out), "--scheduler", "tcp://127.0.0.1:8786"]) == 1
    err = capsys.readouterr().err
    assert "CancelledError" not in err and err.count("\n") == 1, err
    assert "lost the scheduler tcp://127.0.0.1:8786: 4 points not run" in err and "again to resume" in err, err
    assert not (out / "parts").exists() or not list((out / "parts").iterdir())
    assert not (out / "claims").exists()
