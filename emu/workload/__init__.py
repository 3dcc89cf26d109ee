"""Workloads: model and hardware profiles, the trace format, and the trace generators.

Entry points: ``emu.workload.trace`` (``load_trace``, ``save_trace``, ``Trace``),
``emu.workload.generate`` (``Params``, ``generate``), ``emu.workload.profiles``,
``emu.workload.analytic`` (the paper's closed forms). See docs/workloads.md and
docs/trace-format.md.
"""
