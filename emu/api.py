"""The Python API (docs/api.md): generate traces, replay them, read results.

    import emu
    ring = emu.replay(emu.trace("ring", nodes=4, seq=2048, chunk=256))
    mars = emu.replay("mars_16k", set={"hw.link_rate": "10Gbps"}, out="results/mars-10g")
    print(mars.compare(ring)); mars.nodes  # KV memory per node over time, a DataFrame

``emu.replay`` is ``emu.replay.session.replay``; the rest is here. ``import emu`` loads none
of this until a name is used. Every argument is checked (emu.validate) before any work:
bad input raises ConfigError or TraceError with the one line the CLI prints.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path

from .workload.schemes import PD_MODES, RING_ORDERS, SCHEMES


def trace_params(scheme, *, seq=16384, nodes=16, chunk=1024, model="qwen2.5-1.5b", hw="kr260", decode_tokens=0,
                 kv_budget=None, alpha=1.0, set=None, pd_mode="bulk", prefill_nodes=None, topology=None,
                 ring_order="embedding", ulysses_degree=None, ring_forward="after-compute", ring_lookahead=False,
                 all_to_all="concurrent", first_token="prefill", uneven_heads=False, mars_lookahead=True,
                 flag: str = ""):
    """``emu.trace``'s arguments checked into the generator's Params (``emu trace`` comes here too;
    ``flag``: "--" names the options as the CLI spells them)."""
    from . import validate as V
    from .errors import ConfigError
    from .replay.session import overrides_list
    from .units import parse_budget
    from .workload.generate import Params

    def opt(name: str) -> str:
        return flag + name.replace("_", "-") if flag else name

    V.choice(scheme, "scheme", SCHEMES)
    counts = {"seq": (seq, 1), "nodes": (nodes, 2), "decode_tokens": (decode_tokens, 0),
              "prefill_nodes": (prefill_nodes, 1), "ulysses_degree": (ulysses_degree, 1)}
    ints = {k: None if v is None and k in ("prefill_nodes", "ulysses_degree") else V.integer(v, opt(k), lo=lo)
            for k, (v, lo) in counts.items()}
    if not (isinstance(chunk, str) and chunk in ("auto", "whole")):
        chunk = V.integer(chunk, opt("chunk"), lo=1, expect="at least 1 (tokens), 'auto' or 'whole'")
    if kv_budget is not None:
        if isinstance(kv_budget, bool) or not isinstance(kv_budget, (str, numbers.Integral)):
            raise ConfigError(f"{opt('kv_budget')} {V.show(kv_budget)}: expected bytes (an int), a size such as "
                              "'16MiB' or a multiple such as '2x'")
        kv_budget = kv_budget if isinstance(kv_budget, str) else int(kv_budget)
        parse_budget(kv_budget, opt("kv_budget"))
    profiles = {name: V.spec_or_path(v, opt(name)) for name, v in (("model", model), ("hw", hw))}
    return Params(
        scheme=scheme, **ints, chunk=chunk, **profiles, kv_budget=kv_budget, alpha=V.number(alpha, opt("alpha"), lo=0),
        overrides=overrides_list(set, opt("set")), pd_mode=V.choice(pd_mode, opt("pd_mode"), PD_MODES),
        topology=None if topology is None else V.spec_or_path(topology, opt("topology")),
        ring_order=V.choice(ring_order, opt("ring_order"), RING_ORDERS),
        ring_forward=V.choice(ring_forward, opt("ring_forward"), ("after-compute", "on-arrival")),
        all_to_all=V.choice(all_to_all, opt("all_to_all"), ("concurrent", "pairwise")),
        first_token=V.choice(first_token, opt("first_token"), ("prefill", "decode")),
        **{name: V.boolean(value, opt(name)) for name, value in (("ring_lookahead", ring_lookahead),
                                                                 ("uneven_heads", uneven_heads),
                                                                 ("mars_lookahead", mars_lookahead))})


def trace(scheme: str, *, seq: int = 16384, nodes: int = 16, chunk: int | str = 1024, model: str = "qwen2.5-1.5b",
          hw: str = "kr260", decode_tokens: int = 0, kv_budget: int | str | None = None, alpha: float = 1.0,
          set=None, pd_mode: str = "bulk", prefill_nodes: int | None = None, topology: str | None = None,
          ring_order: str = "embedding", ulysses_degree: int | None = None, ring_forward: str = "after-compute",
          ring_lookahead: bool = False, all_to_all: str = "concurrent", first_token: str = "prefill",
          uneven_heads: bool = False, mars_lookahead: bool = True):
    """A generated workload trace (``emu trace SCHEME``'s options, same defaults); save it with
    ``save_trace(t, path)`` or replay it directly. ``chunk`` is a token count, "auto" or "whole";
    the baseline options (docs/workloads.md) default to their authors' choices."""
    from .workload.generate import generate

    return generate(trace_params(scheme, seq=seq, nodes=nodes, chunk=chunk, model=model, hw=hw,
                                 decode_tokens=decode_tokens, kv_budget=kv_budget, alpha=alpha, set=set,
                                 pd_mode=pd_mode, prefill_nodes=prefill_nodes, topology=topology,
                                 ring_order=ring_order, ulysses_degree=ulysses_degree, ring_forward=ring_forward,
                                 ring_lookahead=ring_lookahead, all_to_all=all_to_all, first_token=first_token,
                                 uneven_heads=uneven_heads, mars_lookahead=mars_lookahead))


def load_trace(ref):
    """A trace from a file, or a shipped trace by name ("mars_16k"); validated."""
    from .replay.session import resolve_trace

    return resolve_trace(ref, "ref")


def save_trace(trace, path) -> None:
    """Write ``trace`` to ``path`` (.json or .json.gz), validated, atomically."""
    from . import validate as V
    from .errors import ConfigError
    from .outputs import check_writable
    from .workload.trace import Trace, save_trace as save

    if not isinstance(trace, Trace):
        raise ConfigError(f"trace {V.show(trace)}: expected a Trace (from emu.trace or emu.load_trace), "
                            f"got {type(trace).__name__}")
    save(trace, check_writable(V.path(path, "path"), "path"))


def load(path: str | Path):
    """The Result of a results folder written earlier."""
    from . import validate as V
    from .errors import ConfigError
    from .replay.result import Result

    p = V.path(path, "path")
    if not p.exists():
        raise ConfigError(f"{p}: no such results folder")
    if p.is_file() and p.name != "summary.json":  # a folder's summary.json stands for its folder
        what = "a trace file" if _is_trace(p) else "a file"
        raise ConfigError(f"{p}: {what}, not a results folder"
                            + ("; emu.load_trace reads traces" if what == "a trace file" else ""))
    return Result.load(p)


def _is_trace(p: Path) -> bool:
    """A trace by its first bytes: gzip, or JSON whose first key is "meta" (the writer puts it first)."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(64)
    except OSError:
        return False
    return head[:2] == b"\x1f\x8b" or head.lstrip().startswith(b'{"meta"') or os.fspath(p).endswith(".json.gz")


def shipped_traces() -> dict[str, Path]:
    """Names and files of the traces that ship with the package."""
    from .shipped import traces

    return traces()


def table(results):
    """Many runs in one DataFrame, a row each: the run's parameters (scheme, seq, nodes, chunk,
    topology, overrides ...) and ``Result.compare``'s values. ``results``: Results, or results
    folders; rows are labelled as compare labels its columns (what differs when names repeat)."""
    from . import validate as V
    from .errors import ConfigError
    from .compare import summary_table
    from .replay.result import Result

    if isinstance(results, (Result, str, Path)) or not hasattr(results, "__iter__"):
        raise ConfigError(f"results {V.show(results)}: expected a list of Results (or results folders)")
    runs = []
    for i, r in enumerate(results):
        if isinstance(r, (str, Path)):
            r = load(r)
        elif not isinstance(r, Result):
            raise ConfigError(f"results[{i}] {V.show(r)}: expected a Result (from emu.replay or emu.load) "
                              f"or a results folder, got {type(r).__name__}")
        runs.append(r)
    return summary_table([r.summary for r in runs], [r.name for r in runs])
