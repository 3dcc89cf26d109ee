"""One sweep point, run where a worker runs it: a small dict in, a small dict (one row) out.

``run_point`` generates the point's trace and replays it in this process; nothing but the
parameters and the row crosses a process boundary. It never raises for a problem of the
point itself (a parameter the generator or the replay refuses, or a bug): that becomes a
row with ``status = "failed"`` and the error, so a sweep records it and goes on.

In the local pool, ``init_pool_worker`` ties each worker to the sweep process: it dies with
it (a parent-death signal), leaves Ctrl-C to it, and on SIGTERM removes what its point had
staged before it exits.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import sys
import threading
import traceback
from pathlib import Path

import numpy as np

from .spec import overrides, point_id

_LIST_MAX = ("final_node_kv_bytes", "owner_only_node_kv_bytes")
_SKIP = {"trace", "incomplete", "loss"}  # the trace has no file; incomplete: the count is incomplete_ops; loss: the point says it


def base_row(point: dict, sweep: str, index: int) -> dict:
    """The parameter columns of a point (see docs/sweeps.md)."""
    row = {"sweep": sweep, "index": index, "point": point_id(point), "status": None, "error": None}
    for k, v in point.items():
        if k == "set":
            continue
        row[k] = str(v) if (k in ("kv_budget", "link_rate") or "." in k) and v is not None else v
    row["chunk_mode"] = "auto" if point["chunk"] == "auto" else "fixed"
    row["chunk"] = None if point["chunk"] == "auto" else point["chunk"]
    row["overrides"] = "; ".join(overrides(point))
    return row


def flatten_summary(s: dict) -> dict:
    """The replay summary's scalars; nested values become scalar columns."""
    out = {}
    for k, v in s.items():
        if k in _SKIP:
            continue
        if k == "dropped_by_cause":
            out.update({f"dropped_{c}": int(n) for c, n in v.items()})
        elif k == "busiest_link":
            out.update({f"busiest_link_{f}": x for f, x in v.items()})
        elif k in _LIST_MAX:
            out[f"{k}_max"] = int(max(v)) if v else 0
        elif k == "directory_errors":
            out[k] = len(v)
        elif isinstance(v, (list, dict)):
            continue
        else:
            out[k] = v
    return out


def replica_stats(rp, prefill_s: float) -> dict:
    """Measured cluster replica factor (copies per owned block): peak, and its time average
    over the prefill; the most replica KV any node held (the summary has owner + replica
    and transient peaks)."""
    h = rp.cluster.directory.history()
    if not len(h):
        return {"replica_factor_peak": 1.0, "replica_factor_mean": 1.0, "peak_node_replica_bytes": 0}
    t = h["t_ps"].to_numpy(np.int64)
    f = h["replica_factor"].to_numpy(np.float64)
    end = int(round(prefill_s * 1e12))
    # the factor at a time is the last record at or before it
    last = np.r_[t[1:] != t[:-1], True]
    t, f = t[last], f[last]
    nxt = np.minimum(np.r_[t[1:], max(end, t[-1])], end)
    w = np.clip(nxt - np.minimum(t, end), 0, None)
    span = int(w.sum())
    mean = float((f * w).sum() / span) if span > 0 else float(f[0])
    return {"replica_factor_peak": float(h["replica_factor"].max()), "replica_factor_mean": mean,
            "peak_node_replica_bytes": int(h["replica_bytes"].max())}


def trace_stats(trace) -> dict:
    """What the generator decided: chunk size, S_node, the replica factor plan r(c)."""
    sch, meta = trace.schedule, trace.meta
    r = [int(x) for x in sch.get("r", [])]
    return {"chunk": int(meta["chunk"]), "n_chunks": int(meta["n_chunks"]),
            "kv_budget_bytes": int(sch["kv_budget_bytes"]), "owner_share_bytes": int(sch["owner_share_bytes"]),
            "r_schedule": ",".join(map(str, r)), "r_max": max(r) if r else None,
            "r_mean": float(np.mean(r)) if r else None}


_DISK = {errno.ENOSPC: "write failed", errno.EDQUOT: "write failed", errno.EFBIG: "write failed",
         errno.EROFS: "cannot write", errno.EACCES: "cannot write", errno.EIO: "write failed"}


def _error(exc: BaseException, run: Path | None = None) -> str:
    from ..errors import EmuError

    if isinstance(exc, OSError) and exc.errno in _DISK:  # the machine, not the point: where and why, one line
        where = f"{run.parent.name}/{run.name}" if run is not None else (exc.filename or "output")
        return f"{where}: {_DISK[exc.errno]} ({os.strerror(exc.errno)})"
    msg = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    if not isinstance(exc, EmuError):  # a bug, not a parameter: say where
        tb = traceback.extract_tb(exc.__traceback__)
        if tb:
            f = tb[-1]
            text += f" (at {os.path.relpath(f.filename) if f.filename.startswith(os.getcwd()) else f.filename}:{f.lineno})"
    return text[:1000]


def run_point(point: dict, sweep: str = "", index: int = 0, keep_dir: str | None = None) -> dict:
    """Generate and replay one point; return its dataset row (never raises for the point's problems)."""
    row = base_row(point, sweep, index)
    run = Path(keep_dir) if keep_dir else None
    try:
        from ..replay.session import replay
        from ..workload.generate import Params, generate

        ov = overrides(point)
        trace = generate(Params(
            scheme=point["scheme"], seq=point["seq"], nodes=point["nodes"], chunk=point["chunk"],
            model=point["model"], hw=point["hw"], decode_tokens=point["decode_tokens"],
            kv_budget=point["kv_budget"], alpha=point["alpha"] if point["alpha"] is not None else 1.0,
            overrides=ov, pd_mode=point["pd_mode"] or "bulk", prefill_nodes=point["prefill_nodes"],
            topology=None if point["topology"] == "auto" else point["topology"]))
        row.update(trace_stats(trace))
        if run is not None:
            clear_run(run)
        res = replay(trace, topology=point["topology"], set=ov, loss=point["loss"], seed=point["seed"], out=run)
        rp, s = res.engine, dict(res.summary)
        s.pop("results", None)  # the folder is the run_dir column
        if run is not None:
            row["run_dir"] = f"{run.parent.name}/{run.name}"
        flat = flatten_summary(s)
        for k in ("scheme", "nodes", "seq", "chunk", "model", "hw", "seed", "decode_tokens"):
            flat.pop(k)  # parameters already in the row (chunk: the resolved one, from the trace)
        row["topology_name"] = flat.pop("topology")
        row["link_rate_bps"] = int(rp.hw["link_rate"])
        row.update(flat)
        row.update(replica_stats(rp, s["prefill_s"]))
        row["status"] = "incomplete" if s["incomplete_ops"] else "ok"
    except Exception as exc:  # noqa: BLE001 - a point's failure is data; KeyboardInterrupt still stops
        row["status"] = "failed"
        row["error"] = _error(exc, run)
    return row


def clear_run(run: Path) -> None:
    """Remove what an earlier, stopped try of this point left in ``runs/``: its folder (whole,
    or the empty one it reserved) and its hidden staging folders (emu.outputs)."""
    for p in [run, *run.parent.glob(f".{run.name}.*.part")]:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


# ---------------------------------------------------------------------------- the local pool

_RUNNING = threading.Event()  # set while this pool worker runs a point
PR_SET_PDEATHSIG = 1


def _terminated(signum, frame):
    """SIGTERM in a pool worker: unwind the point (its staging folder is removed on the way),
    then exit; idle, just exit."""
    from ..outputs import Terminated

    if _RUNNING.is_set():
        raise Terminated(signum)
    os._exit(128 + signum)


def _watch_parent(parent: int) -> None:  # pragma: no cover - where prctl is missing
    while os.getppid() == parent:
        threading.Event().wait(1.0)
    os._exit(128 + signal.SIGKILL)


def init_pool_worker(parent: int) -> None:
    """Run in each local pool worker as it starts (``ProcessPoolExecutor(initializer=...)``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the sweep, which stops its workers
    signal.signal(signal.SIGTERM, _terminated)
    tied = False
    if sys.platform.startswith("linux"):
        try:  # the kernel kills this worker when the sweep process dies, even by SIGKILL
            tied = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            tied = False
    if os.getppid() != parent:  # the sweep died before the signal was armed
        os._exit(128 + signal.SIGKILL)
    if not tied:  # pragma: no cover - not Linux
        threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()


def pool_point(point: dict, sweep: str = "", index: int = 0, keep_dir: str | None = None) -> dict:
    """``run_point`` in a local pool worker: a SIGTERM unwinds the point, then ends the worker."""
    from ..outputs import Terminated

    _RUNNING.set()
    try:
        return run_point(point, sweep, index, keep_dir)
    except Terminated as exc:
        os._exit(128 + exc.signum)
    finally:
        _RUNNING.clear()

