"""`emu tune`: each scheme at its best on one cluster, and where MARS's gain comes from.

For a cluster (prompt length, boards, model, hardware, topology) every scheme's options are
searched by replaying candidates (docs/workloads.md, "Each scheme at its best"):

- ring, zigzag, pd: the chunk (the whole prompt, or halvings of it) and the history
  lookahead, which needs sets forwarded on arrival (behind ring-flash-attention's double
  buffer the history ring waits for each attention step); without lookahead forwarding stays
  the double buffer (it changes memory, not TTFT);
- mars: the chunk (eq. 8's on the common granule 2N and on N, or halvings of the prompt),
  then alpha at the best chunk;
- usp: the chunk at the default degree, then every degree the model allows at that chunk;
- ulysses: the chunk, where the board count is a degree the model allows.

Chunks are multiples of one granule for every scheme (2N: Zigzag's pieces). The search
prunes with a lower bound: a candidate's compute bound (its busiest board's compute, from
a one-layer trace scaled to the model's layers, ``analytic.compute_bound``) is a TTFT no
replay of it can beat, so a candidate whose bound is not below the best TTFT found is not
replayed. Candidates of a round run on the sweep machinery's executor (a process pool or a
Dask cluster, ``emu.sweep.runner.executor``), or in this process with one worker.

The attribution replays MARS at its best configuration with replication off (alpha 0: r = 1
for every chunk), with the one-layer lookahead off (pushes wait for the consumer's QKV), and
with both off.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from .errors import ConfigError
from .workload.options import param_options

SCHEMES = ("mars", "ring", "zigzag", "usp", "ulysses", "pd")
ALPHAS = (0.5, 2.0)  # tried at MARS's best chunk, beside the default 1
HALVINGS = 4  # chunk candidates: the whole prompt and S/2 .. S/2**HALVINGS
DASK_BATCH = 8


@dataclass
class Cluster:
    seq: int = 16384
    nodes: int = 16
    model: str = "qwen2.5-1.5b"
    hw: str = "kr260"
    topology: str | None = None
    overrides: list[str] = field(default_factory=list)
    kv_budget: str | None = None

    def params(self, scheme: str, **options) -> dict:
        return {"scheme": scheme, "seq": self.seq, "nodes": self.nodes, "model": self.model, "hw": self.hw,
                "topology": self.topology, "overrides": list(self.overrides), "kv_budget": self.kv_budget,
                **options}


# ---------------------------------------------------------------- one candidate

def evaluate(point: dict) -> dict:
    """Generate and replay one candidate (a dict of ``Params`` fields); never raises for the
    candidate's own problem (it becomes the row's error). Runs where a worker runs it."""
    from .replay.session import replay
    from .workload.generate import Params, generate

    row = {"point": point, "error": None}
    try:
        trace = generate(Params(**point))
        s = replay(trace, topology=point.get("topology") or "auto", set=point.get("overrides")).summary
        row.update(chunk=int(trace.meta["chunk"]), ttft_s=s["ttft_s"], wire_bytes=s["wire_bytes"],
                   kv_bytes=s["kv_bytes"], peak_node_kv_bytes=s["peak_node_kv_bytes"],
                   incomplete_ops=s["incomplete_ops"])
    except ConfigError as exc:
        row["error"] = str(exc)
    return row


def lower_bound(point: dict) -> tuple[float, float]:
    """(the candidate's compute bound, the cluster's balanced bound), in seconds, from a
    one-layer trace of it (every layer's ops are the same)."""
    from .workload import analytic, profiles
    from .workload.generate import Params, generate

    layers = profiles.load_pair(point["model"], point["hw"], point["overrides"])[0]["layers"]
    one = generate(Params(**{**point, "overrides": [*point["overrides"], "model.layers=1"]}))
    return analytic.compute_bound(one, layers), analytic.balanced_bound(one, layers)


# ---------------------------------------------------------------- the search

def _chunks(cl: Cluster) -> list:
    """The whole prompt, then halvings of it as multiples of the common granule 2N."""
    g = 2 * cl.nodes
    out = ["whole"]
    for k in range(1, HALVINGS + 1):
        b = cl.seq // 2**k // g * g
        if b >= g and b not in out and b < cl.seq:
            out.append(b)
    return out


def _eq8_fine(cl: Cluster) -> int:
    """Eq. 8's chunk on the finer granule N (MARS alone needs no 2N granule): 656 rather than
    672 tokens at 16K on 16 KR260s, 12.79 s rather than 13.00 s."""
    from .units import parse_budget, resolve_budget
    from .workload import analytic, profiles
    from .workload.costs import Model
    from .workload.placement import Net

    model_p, hw_p = profiles.load_pair(cl.model, cl.hw, cl.overrides)
    if cl.kv_budget is not None:
        hw_p["kv_budget"] = parse_budget(cl.kv_budget, "--kv-budget")
    m = Model.from_profile(model_p)
    s_node = resolve_budget(hw_p["kv_budget"], -(-cl.seq // cl.nodes) * m.m_token)
    return analytic.choose_chunk(cl.seq, cl.nodes, m, hw_p, Net(cl.topology, cl.nodes, hw_p), 1.0, s_node,
                                 granule=cl.nodes)["chunk"]


def _degrees(cl: Cluster, model: dict) -> list[int]:
    """USP degrees the references accept: dividing the query heads and the boards, 1 < u < N."""
    return [u for u in range(2, cl.nodes) if model["heads"] % u == 0 and cl.nodes % u == 0]


def _default_degree(cl: Cluster, model: dict) -> int:
    """USP's degree when none is given (emu.workload.generate): the KV heads, or less, dividing N."""
    u = model["kv_heads"]
    while cl.nodes % u:
        u -= 1
    return u


class Search:
    def __init__(self, cluster: Cluster, run_round, log=None, batch: int = 1):
        self.cl, self.run_round, self.log = cluster, run_round, log or (lambda msg: None)
        self.batch = batch  # candidates replayed side by side (the executor's workers)
        self.replayed = self.pruned = 0

    def best_of(self, scheme: str, rounds) -> dict:
        """Run the rounds of candidates (each a function of the best so far), pruned by bound."""
        best, tried, bounds = None, [], {}
        for k, make in enumerate(rounds):
            if k and best is None:  # a later round refines the best: none to refine
                break
            cands = [c for c in make(best["options"] if best else None) if c not in [t["options"] for t in tried]]
            todo = []
            for opts in cands:
                pt = self.cl.params(scheme, **opts)
                try:
                    bounds[len(tried)] = lower_bound(pt)
                except ConfigError as exc:
                    tried.append({"options": opts, "error": str(exc)})
                    continue
                tried.append({"options": opts, "bound_s": bounds[len(tried)][0]})
                todo.append(len(tried) - 1)
            todo.sort(key=lambda i: (tried[i]["bound_s"], i))  # the most promising first
            while todo:
                for i in list(todo):  # a bound no better than the best TTFT found: not replayed
                    if best is not None and tried[i]["bound_s"] >= best["ttft_s"]:
                        tried[i]["pruned"] = True
                        self.pruned += 1
                        todo.remove(i)
                batch, todo = todo[:self.batch], todo[self.batch:]
                for i, row in zip(batch, self.run_round([self.cl.params(scheme, **tried[i]["options"]) for i in batch])):
                    self.replayed += 1
                    t = tried[i]
                    t.update({k: v for k, v in row.items() if k != "point"})
                    if row["error"] is None and not row["incomplete_ops"] and \
                            (best is None or row["ttft_s"] < best["ttft_s"]):
                        best = t
                    self.log(f"{scheme} {param_options(t['options'])}: "
                             + (f"{row['ttft_s']:.3f} s (bound {t['bound_s']:.3f} s)" if row["error"] is None
                                else row["error"]))
        out = {"scheme": scheme, "candidates": tried}
        if best is None:
            errors = [t["error"] for t in tried if t.get("error")]
            out["error"] = errors[0] if errors else "no candidate completed"
            return out
        i = tried.index(best)
        out.update(best=best, compute_bound_s=bounds[i][0], balanced_bound_s=bounds[i][1],
                   over_bound=best["ttft_s"] / bounds[i][0] - 1)
        return out

    def rounds(self, scheme: str, model: dict) -> list:
        chunks = _chunks(self.cl)
        if scheme in ("ring", "zigzag", "pd"):
            # the history ring runs ahead only when forwarded on arrival: behind ring-flash-attention's
            # double buffer it waits for each attention step (16K/16, chunk 1024: 16.16 s vs 13.45 s)
            return [lambda best: [o for c in chunks for o in
                                  ({"chunk": c}, {"chunk": c, "ring_lookahead": True, "ring_forward": "on-arrival"})]]
        if scheme == "mars":
            return [lambda best: [{"chunk": c} for c in dict.fromkeys(["auto", _eq8_fine(self.cl), *chunks[1:]])],
                    lambda best: [{**best, "alpha": a} for a in ALPHAS]]
        if scheme == "usp":
            return [lambda best: [{"chunk": c} for c in chunks],
                    lambda best: [{**best, "ulysses_degree": u} for u in _degrees(self.cl, model)
                                  if u != _default_degree(self.cl, model)]]
        if scheme == "ulysses":
            return [lambda best: [{"chunk": c} for c in chunks]]
        raise ConfigError(f"emu tune: unknown scheme {scheme!r}; expected some of {', '.join(SCHEMES)}")


def tune(cluster: Cluster, schemes=SCHEMES, *, attribution: bool = True, scheduler: str | None = None,
         workers: int = 1, log=None) -> dict:
    """Each scheme at its best on ``cluster`` (and MARS's attribution); a JSON-able dict."""
    from .workload import profiles

    bad = [s for s in schemes if s not in SCHEMES]
    if bad:
        raise ConfigError(f"unknown scheme {bad[0]!r}; expected some of {', '.join(SCHEMES)}")
    model = profiles.load_pair(cluster.model, cluster.hw, cluster.overrides)[0]
    with _runner(scheduler, workers) as run_round:
        # candidates side by side: one per local worker; a Dask cluster takes DASK_BATCH at a time
        search = Search(cluster, run_round, log, batch=max(1, workers) if scheduler is None else DASK_BATCH)
        if "ulysses" in schemes and model["heads"] % cluster.nodes:
            ok = ", ".join(str(u) for u in range(1, model["heads"] + 1) if model["heads"] % u == 0)
            results = [{"scheme": "ulysses", "candidates": [],
                        "error": f"{cluster.nodes} boards is not a Ulysses degree the model allows ({ok})"}]
            schemes = [s for s in schemes if s != "ulysses"]
        else:
            results = []
        results = [search.best_of(s, search.rounds(s, model)) for s in schemes] + results
        if not any("best" in r for r in results):  # the cluster itself is wrong: say it once
            raise ConfigError(next((r["error"] for r in results if r.get("error")), "no candidate completed"))
        out = {"cluster": dataclasses.asdict(cluster), "schemes": results,
               "replayed": search.replayed, "pruned": search.pruned}
        mars = next((r for r in results if r["scheme"] == "mars" and "best" in r), None)
        if attribution and mars is not None:
            out["attribution"] = attribute(cluster, mars["best"], run_round)
    return out


def attribute(cluster: Cluster, best: dict, run_round) -> list[dict]:
    """MARS at ``best`` with replication and the one-layer lookahead turned off, alone and together."""
    base = best["options"]
    variants = [("MARS (best)", {}), ("replication off (alpha 0)", {"alpha": 0.0}),
                ("lookahead off", {"mars_lookahead": False}),
                ("both off", {"alpha": 0.0, "mars_lookahead": False})]
    rows = run_round([cluster.params("mars", **{**base, **v}) for _, v in variants[1:]])
    out = [{"variant": variants[0][0], "options": base, "ttft_s": best["ttft_s"], "wire_bytes": best["wire_bytes"]}]
    for (name, v), row in zip(variants[1:], rows):
        out.append({"variant": name, "options": {**base, **v}, "ttft_s": row.get("ttft_s"),
                    "wire_bytes": row.get("wire_bytes"), "error": row["error"]})
    return out


class _runner:
    """A function that evaluates a list of candidates: in this process (one worker) or on the
    sweep machinery's executor (a process pool of ``workers``, or a Dask cluster)."""

    def __init__(self, scheduler, workers):
        self.scheduler, self.workers, self.ctx = scheduler, workers, None

    def __enter__(self):
        if self.scheduler is None and self.workers <= 1:
            return lambda points: [evaluate(p) for p in points]
        from .sweep.runner import executor

        self.ctx = executor(self.scheduler, self.workers)
        ex = self.ctx.__enter__()
        return lambda points: list(ex.map(evaluate, points))

    def __exit__(self, *exc):
        return self.ctx.__exit__(*exc) if self.ctx is not None else False


def format_table(res: dict) -> str:
    cl = res["cluster"]
    gib = 2**30
    lines = [f"{cl['seq']} tokens on {cl['nodes']} x {cl['hw']} ({cl['topology'] or 'default topology'}), {cl['model']}"
             + (f", {'; '.join(cl['overrides'])}" if cl["overrides"] else ""),
             f"{'scheme':8s} {'TTFT s':>8s} {'bound s':>8s} {'over':>7s} {'wire GiB':>8s} {'peak MiB':>8s}  configuration"]
    ranked = sorted(res["schemes"], key=lambda r: r["best"]["ttft_s"] if "best" in r else math.inf)
    for r in ranked:
        if "best" not in r:
            lines.append(f"{r['scheme']:8s} {'-':>8s} {'':8s} {'':7s} {'':8s} {'':8s}  {r['error']}")
            continue
        b = r["best"]
        over = r["over_bound"] if abs(r["over_bound"]) >= 5e-5 else 0.0  # on its bound, to rounding
        lines.append(f"{r['scheme']:8s} {b['ttft_s']:8.3f} {r['compute_bound_s']:8.3f} {over:+7.1%} "
                     f"{b['wire_bytes'] / gib:8.2f} {b['peak_node_kv_bytes'] / 2**20:8.1f}  "
                     f"{param_options(b['options'])} (chunk {b['chunk']})")
    bal = min((r["balanced_bound_s"] for r in res["schemes"] if "best" in r), default=None)
    if bal is not None:
        lines.append(f"bound: the scheme's busiest board's compute (TTFT if messages took no time); the cluster's "
                     f"compute spread evenly: {bal:.3f} s")
    lines.append(f"{res['replayed']} replays, {res['pruned']} candidates pruned by their bound")
    att = res.get("attribution")
    if att:
        lines.append("MARS attribution (its best configuration, mechanisms turned off):")
        base = att[0]["ttft_s"]
        for a in att:
            if a.get("error"):
                lines.append(f"  {a['variant']:28s} {a['error']}")
            else:
                lines.append(f"  {a['variant']:28s} {a['ttft_s']:8.3f} s  {a['ttft_s'] / base - 1:+7.1%}  "
                             f"wire {a['wire_bytes'] / gib:.2f} GiB")
    return "\n".join(lines)
