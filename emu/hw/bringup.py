"""`emu hw bringup IFACE...`: the scripted bring-up plan of docs/hardware.md, one report.

On each interface (a port of the board under test, cabled back to back), in order:

1. **listen**: what the board says unprompted for ``listen_s``; fails on malformed frames;
2. **check SCENARIO**: every `emu hw check` scenario (one that does not apply to the
   board's place in the topology is reported as skipped, not failed);
3. **rate R**: a ramp: ``frames`` fragments of unicast messages the board must relay, sent
   with `emu hw send --rate R` pacing at each rate; fails if a forwarded copy is missing
   (a send that fell behind its schedule is said, with the rate reached: the host, not
   the board, was short);
4. **loss**: the same frames unpaced, as fast as the interface takes them; fails if the
   board lost any;
5. **golden**: the golden diff of a small trace (`emu hw send TRACE --to K`,
   ``emu.hw.golden``), generated for the board's topology unless one is given.

The report is one JSON object (``as_dict``) and one self-contained HTML page
(``html``: inline style, no script, nothing fetched), each step with pass or fail.
"""

from __future__ import annotations

import html as _html
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..codec.batch import encode_frames
from ..codec.pcap import CaptureWriter
from ..errors import ConfigError, EmuError
from . import check as C
from . import board as M
from .defaults import DEFAULT_RATES
from .rawsock import RawSocket



@dataclass
class Step:
    iface: str
    name: str
    ok: bool
    summary: str
    details: dict = field(default_factory=dict)
    skipped: bool = False

    def as_dict(self) -> dict:
        return {"iface": self.iface, "step": self.name, "result": "skipped" if self.skipped else
                ("pass" if self.ok else "fail"), "summary": self.summary, "details": self.details}


def _listen(sock: RawSocket, seconds: float) -> Step:
    from .listen import listen

    st = listen(sock, timeout=seconds).as_dict()
    bad = sum(st.get("malformed", {}).values()) if isinstance(st.get("malformed"), dict) else 0
    frames = st.get("frames", 0)
    return Step(sock.iface, "listen", bad == 0,
                f"{frames:,} frames in {seconds:g} s unprompted, {bad:,} malformed", st)


def _check(sock: RawSocket, name: str, board: M.Board, timeout: float) -> Step:
    try:
        sc = C.build(name, board)
    except ConfigError as exc:
        return Step(sock.iface, f"check {name}", True, f"skipped: {exc}", skipped=True)
    res = C.run(sc, sock, timeout=timeout)  # a silent board (NoAnswer): the plan marks the step failed
    d = C.as_dict(res, sock.iface)
    text = (f"all {len(sc.expected)} frames match" if res.ok else
            f"{len(res.problems)} differences: " + "; ".join(f"{f}: {t}" for _, _, f, t in res.problems[:3]))
    return Step(sock.iface, f"check {name}", res.ok, text, d)


def _relay_frames(board: M.Board, frames: int, path: Path) -> int:
    """A capture of ``frames`` fragments of unicast messages the board relays (the forward
    scenario, fresh msg_ids each); returns the frames written, 0 if it relays none."""
    n = 0
    with CaptureWriter(path) as w:
        while n < frames:
            try:
                sc = C.build("forward", board, reliable=False)
            except ConfigError:
                return 0
            for s in sc.sends:
                buf, offsets = encode_frames(s.headers, s.payload, eth_src=s.eth_src)
                w.write(buf, offsets, np.zeros(len(offsets) - 1, np.int64))
                n += len(offsets) - 1
    return n


def _forwarded_back(sock: RawSocket, K: int, want: int, timeout: float) -> int:
    """Count the board's frames until ``want`` came or ``timeout`` passed."""
    got, end = 0, time.monotonic() + timeout
    while got < want and time.monotonic() < end:
        buf, offsets, _ = sock.recv(timeout=min(0.05, max(0.0, end - time.monotonic())))
        if len(offsets) > 1:
            got += len(C.received(buf, offsets, K))
    return got


def _blast(sock, board, path, n, rate_bps, timeout, label) -> Step:
    from . import send as S

    sock.drain()
    st = S.send(sock, path, rate_bps=rate_bps)
    got = _forwarded_back(sock, board.node, n, timeout)
    ok = got == n  # the board's verdict: a host that fell behind sent slower, said in the summary
    text = (f"{st.frames:,} frames sent in {st.elapsed:.3f} s ({st.bytes * 8 / max(st.elapsed, 1e-9) / 1e6:,.1f} "
            f"Mbit/s), {got:,} of {n:,} forwarded back" + (f", {n - got:,} lost" if got < n else "")
            + ("; BEHIND SCHEDULE: this host sent slower than asked (the rate reached is above)" if st.behind else ""))
    return Step(sock.iface, label, ok, text, {"sent": st.frames, "forwarded_back": got, "elapsed_s": st.elapsed,
                                              "late_ns": st.late_ns, "behind_schedule": st.behind})


def _golden(sock, board, trace, timeout) -> Step:
    from . import golden as G
    import shutil

    work = G.scratch()
    try:
        plan = G.plan(trace, board.node, topology=board.topology)
        r = G.run(plan, sock, work, timeout=timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    d = r.diff
    ok = G.passed(d)
    text = (f"{len(plan.inbound):,} frames sent, {len(plan.expected):,} expected back, {len(r.got):,} received: "
            f"{len(d.missing)} missing, {len(d.extra)} extra, {len(d.differing)} differing fields, "
            f"{len(d.reordered)} reordered (not judged)")
    return Step(sock.iface, "golden", ok, text, G.as_dict(r))


def small_trace(board: M.Board):
    """A small MARS trace for the board's cluster: one layer, a 512-token prompt in two chunks."""
    from ..api import trace

    return trace("mars", seq=512, nodes=board.boards, chunk=256, set=["model.layers=1"])


def plan(ifaces, board: M.Board, *, listen_s: float = 1.0, rates=DEFAULT_RATES, frames: int = 200,
         timeout: float = 2.0, trace=None, say=None) -> list[Step]:
    from ..units import parse_rate

    bps = [parse_rate(r, "--rates") for r in rates]
    steps: list[Step] = []
    tr = trace if trace is not None else small_trace(board)
    tmp = Path(tempfile.mkdtemp(prefix="mcfemu-bringup-"))
    try:
        relay = tmp / "relay.pcap"
        n = _relay_frames(board, frames, relay)
        for iface in ifaces:
            with RawSocket(iface) as sock:
                todo = [("listen", lambda: _listen(sock, listen_s))]
                todo += [(f"check {s}", lambda s=s: _check(sock, s, board, timeout)) for s in C.SCENARIOS]
                if n:
                    todo += [(f"rate {r}", lambda r=r, b=b: _blast(sock, board, relay, n, b, timeout, f"rate {r}"))
                             for r, b in zip(rates, bps)]
                    todo.append(("loss", lambda: _blast(sock, board, relay, n, None, timeout, "loss")))
                else:
                    steps.append(Step(iface, "rate ramp and loss", True, f"skipped: node {board.node} relays no "
                                      f"unicast route of {board.topology}", skipped=True))
                todo.append(("golden", lambda: _golden(sock, board, tr, timeout)))
                for name, step in todo:
                    try:
                        s = step()
                    except EmuError as exc:  # the interface went down, the MTU is too small, ...: this step failed
                        s = Step(iface, name, False, str(exc))
                    steps.append(s)
                    if say:
                        say(line(s))
    finally:
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return steps


def line(s: Step) -> str:
    mark = "SKIP" if s.skipped else ("PASS" if s.ok else "FAIL")
    return f"{mark}  {s.iface}  {s.name}: {s.summary}"


def as_dict(steps: list[Step], board: M.Board) -> dict:
    return {"board": board.node, "topology": board.topology, "ok": all(s.ok for s in steps),
            "passed": sum(s.ok and not s.skipped for s in steps), "failed": sum(not s.ok for s in steps),
            "skipped": sum(s.skipped for s in steps), "steps": [s.as_dict() for s in steps]}


_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
          "padding:4px 8px;text-align:left;vertical-align:top}.pass{background:#dfd}.fail{background:#fdd}"
          ".skipped{background:#eee}details pre{white-space:pre-wrap;font-size:85%}")


def html(report: dict) -> str:
    """The report as one self-contained page: inline style, no script, no outside request."""
    e = _html.escape
    verdict = "PASS" if report["ok"] else "FAIL"
    rows = []
    for s in report["steps"]:
        detail = e(json.dumps(s["details"], indent=1, default=str)) if s["details"] else ""
        rows.append(f'<tr class="{s["result"]}"><td>{e(s["iface"])}</td><td>{e(s["step"])}</td>'
                    f'<td>{s["result"].upper()}</td><td>{e(s["summary"])}'
                    + (f"<details><summary>details</summary><pre>{detail}</pre></details>" if detail else "")
                    + "</td></tr>")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>bring-up of board {report['board']}: "
            f"{verdict}</title><style>{_STYLE}</style></head><body>"
            f"<h1>Bring-up of board {report['board']} ({e(report['topology'])}): {verdict}</h1>"
            f"<p>{report['passed']} passed, {report['failed']} failed, {report['skipped']} skipped.</p>"
            f"<table><tr><th>interface</th><th>step</th><th>result</th><th>what happened</th></tr>"
            + "".join(rows) + "</table></body></html>\n")


def write(report: dict, json_path, html_path) -> None:
    from ..atomic import atomic_file

    for path, text in ((json_path, json.dumps(report, indent=2, default=str) + "\n"), (html_path, html(report))):
        if path:
            with atomic_file(path, "w") as f:
                f.write(text)


__all__ = ["plan", "as_dict", "html", "write", "Step", "DEFAULT_RATES"]
