"""Comparing runs in the dashboard: the parameters that tell them apart (from each folder's
topology and what-if note), the run a what-if changed, the metrics as text, and one colour per
run shared by every figure of a comparison. Which metrics changed, and whether for the better,
is emu.compare's (``diff``, ``judgement``), as `emu compare`'s table is."""

from __future__ import annotations

from pathlib import Path

from . import data as D

RUN_PALETTE = ["#d1495b", "#00798c", "#6a4c93", "#edae49", "#30638e", "#2a9d8f", "#8d99ae", "#e76f51"]


def run_colors(runs) -> dict[str, str]:
    """One colour per run of a comparison: the scheme's when the schemes tell the runs apart,
    else by position."""
    from .figures import SCHEME_COLORS

    schemes = [str(r.summary.get("scheme", "")).lower() for r in runs]
    if len(set(schemes)) == len(schemes) and all(s in SCHEME_COLORS for s in schemes):
        return {r.key: SCHEME_COLORS[s] for r, s in zip(runs, schemes)}
    return {r.key: RUN_PALETTE[i % len(RUN_PALETTE)] for i, r in enumerate(runs)}


def _rates(run, field: str):
    topo = run.topology() if not run.error else None
    vals = sorted({lk.get(field) for lk in (topo or {}).get("links", []) if isinstance(lk, dict)
                   and isinstance(lk.get(field), (int, float))})
    return vals


def _fmt_rate(v) -> str:
    for unit, k in (("Tbps", 1e12), ("Gbps", 1e9), ("Mbps", 1e6), ("kbps", 1e3)):
        if v >= k:
            return f"{v / k:g} {unit}"
    return f"{v:g} bps"


def _whatif_option(run, prefix: str):
    """An option of the replay a what-if ran (from the note the app left beside its folder):
    summary.json does not record loss."""
    if run.origin != "what-if":
        return None
    from .whatif import read_note

    argv = read_note(run.path.parent, run.path).get("argv")
    argv = argv if isinstance(argv, list) else []
    hit = [a[len(prefix):] for a in argv if isinstance(a, str) and a.startswith(prefix)]
    return hit[-1] if hit else ("0" if prefix == "--loss=" else None)


def params(run) -> dict[str, str]:
    """What ran, as short strings: the parameters a comparison may differ in."""
    s = run.summary
    try:
        rates = _rates(run, "rate_bps")
        lats = _rates(run, "latency_ps")
    except D.ResultsError:
        rates, lats = [], []
    out = {
        "scheme": s.get("scheme"), "nodes": s.get("nodes"), "prompt": s.get("seq"), "chunk": s.get("chunk"),
        "topology": s.get("topology"),
        "link rate": " / ".join(_fmt_rate(v) for v in rates) if rates else None,
        "link latency": " / ".join(D.fmt_s(v / 1e12) for v in lats) if lats else None,
        "loss": s.get("loss") if "loss" in s else _whatif_option(run, "--loss=") or "not recorded",
        "model": s.get("model"), "hardware": s.get("hw"), "seed": s.get("seed"), "decode tokens": s.get("decode_tokens"),
        "trace": Path(str(s.get("trace"))).name if s.get("trace") else None,
    }
    return {k: ("-" if v is None else str(v)) for k, v in out.items()}


def differing(runs) -> set[str]:
    """The parameter names whose values differ between the readable runs."""
    ok = [r for r in runs if not r.error]
    if len(ok) < 2:
        return set()
    ps = [params(r) for r in ok]
    # a value a folder does not record is unknown, not a difference
    return {k for k in ps[0] if len({p.get(k) for p in ps} - {"-", "not recorded"}) > 1}


def base_of(run, runs):
    """The run a what-if changed: a given (not what-if) run of the same trace, scheme, nodes and prompt."""
    if run.origin != "what-if" or run.error:
        return None
    s = run.summary
    name = Path(str(s.get("trace"))).name
    for r in runs:
        if r is run or r.error or r.origin == "what-if":
            continue
        t = r.summary
        if Path(str(t.get("trace"))).name == name and all(t.get(k) == s.get(k) for k in ("scheme", "nodes", "seq")):
            return r
    return None


def fmt_metric(v, unit: str) -> str:
    if v is None:
        return "-"
    return {"s": D.fmt_s, "bytes": D.fmt_bytes, "pct": lambda x: f"{x:.2%}", "rate": lambda x: f"{x:.2f}",
            "n": lambda x: f"{x:,.0f}"}[unit](v)


def fmt_pct(p) -> str:
    if p is None:
        return ""
    return f"{p:+.3%}" if abs(p) < 0.01 else f"{p:+.1%}"
