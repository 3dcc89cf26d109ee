"""Replay: run a trace's op DAG on compute engines, NICs and links; summarize and write results.

Calling the package runs one replay: ``emu.replay(trace, topology=..., set={...}, ...)`` is
``emu.replay.session.replay`` (see there, and docs/api.md). The package is callable because
``emu.replay`` is both this package and the public entry point.
"""

import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, trace, **options):
        from .session import replay

        return replay(trace, **options)


sys.modules[__name__].__class__ = _CallablePackage
