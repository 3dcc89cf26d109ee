"""mcf-emu: a trace-driven emulator of an FPGA compute-NIC cluster for long-context LLM inference.

Python API (docs/api.md): ``emu.trace(...)``, ``emu.replay(...)``, ``emu.load(DIR)``,
``emu.load_trace(...)``, ``emu.save_trace(...)``, ``emu.table(results)``, ``emu.tune(...)``. Names are
imported on first use, so ``import emu`` stays fast.
"""

__version__ = "0.1.0"

_API = ("trace", "load", "load_trace", "save_trace", "shipped_traces", "table")
__all__ = ["replay", *_API, "Result", "Trace", "tune"]


def __getattr__(name: str):
    import importlib

    if name == "replay":  # the package emu.replay is callable: emu.replay(trace, ...) runs one
        return importlib.import_module(".replay", __name__)
    if name in _API:
        return getattr(importlib.import_module(".api", __name__), name)
    if name == "tune":  # each scheme at its best on a cluster (emu.tuning, `emu tune`)
        return importlib.import_module(".tuning", __name__).tune
    if name == "Result":
        return importlib.import_module(".replay.result", __name__).Result
    if name == "Trace":
        return importlib.import_module(".workload.trace", __name__).Trace
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
