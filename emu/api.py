"""The Python API (docs/api.md): generate traces, replay them, read results.

    import emu
    ring = emu.replay(emu.trace("ring", nodes=4, seq=2048, chunk=256))
    mars = emu.replay("mars_16k", set={"hw.link_rate": "10Gbps"}, out="results/mars-10g")
    print(mars.compare(ring)); mars.nodes  # KV memory per node over time, a DataFrame

``emu.replay`` is ``emu.replay.session.replay``; the rest is here. ``import emu`` loads none
of this until a name is used.
"""

from __future__ import annotations

from pathlib import Path


def trace(scheme: str, *, seq: int = 16384, nodes: int = 16, chunk="1024", model: str = "qwen2.5-1.5b",
          hw: str = "kr260", decode_tokens: int = 0, kv_budget=None, alpha: float = 1.0, set=None,
          pd_mode: str = "bulk", prefill_nodes: int | None = None, topology: str | None = None):
    """A generated workload trace (``emu trace SCHEME``'s options, same defaults); save it with
    ``save_trace(t, path)`` or replay it directly. ``chunk`` is a token count or "auto"."""
    from .replay.session import overrides_list
    from .units import parse_int
    from .workload.generate import Params, generate

    return generate(Params(
        scheme=scheme, seq=parse_int(seq, "seq"), nodes=parse_int(nodes, "nodes"),
        chunk="auto" if chunk == "auto" else parse_int(chunk, "chunk"), model=model, hw=hw,
        decode_tokens=parse_int(decode_tokens, "decode_tokens"), kv_budget=kv_budget, alpha=alpha,
        overrides=overrides_list(set), pd_mode=pd_mode, prefill_nodes=prefill_nodes, topology=topology))


def load_trace(ref):
    """A trace from a file, or a shipped trace by name ("mars_16k"); validated."""
    from .replay.session import resolve_trace

    return resolve_trace(ref)


def save_trace(trace, path) -> None:
    """Write ``trace`` to ``path`` (.json or .json.gz), validated, atomically."""
    from .workload.trace import save_trace as save

    save(trace, path)


def load(path: str | Path):
    """The Result of a results folder written earlier."""
    from .replay.result import Result

    return Result.load(path)


def shipped_traces() -> dict[str, Path]:
    """Names and files of the traces that ship with the package."""
    from .shipped import traces

    return traces()
