"""What numba compiles for the engine, and how hard it optimises it: the least that gives the
same machine speed.

- **One version per function and argument types, not per constant.** numba compiles a
  function once per distinct tuple of argument types. A compiled caller that passes a
  constant (``_cut_train(..., 0)``, ``_take_deferred(..., True)``) gives that argument the
  constant's *literal* type, and a link id read from a forwarding row gives ``int32`` where
  other callers pass ``int64``: each such call site compiled its callee once more. The frame
  kernel's ``add_stream`` and ``_cut_train`` were compiled four times each, ``_take_deferred``,
  ``_datapath_feeders`` and ``open_message`` three times. Here a compiled call to an ``emu``
  function asks numba for the version of its arguments' plain types (``plain``): a literal
  becomes its type (``Literal[int](0)`` is ``int64``) and a signed integer narrower than 64
  bits becomes ``int64`` (the type of every table the engine indexes, so what its other
  callers pass). numba converts the call's arguments to that version's types, as for any
  call that matches a version by a safe conversion: the values, and so every result, are
  the same. Calls from Python are untouched (numba types a Python int as ``int64``).
- **LLVM at -O2.** numba optimises at -O3 unless ``NUMBA_OPT`` says otherwise. The engine's
  loops gain nothing from -O3's extra passes (the same replay and ring speeds, medians of
  alternating runs: docs/engine.md, "The compiled code's cache"), which cost a tenth of the
  compile. A ``NUMBA_OPT`` the user sets wins; the level is set through the environment so
  the processes that compile the engine at install (emu.engine.compile_share) use it too.
- **No wrap of a negative index.** numba turns a signed index ``i`` into ``i + n`` when it is
  negative, as Python does, on every index it cannot prove non-negative: a shift, an ``and``
  with the dimension (loaded from the stack) and an add for each row the engine reads by a
  frame, link, message or node id (``FP[e, F_LEN]``, ``LK[link, L_TX_END]``). The engine
  never indexes from the end: -1 marks "none" in its tables and is tested before any use.
  So in emu's own compiled functions (``_fix_integer_index``) an index is taken as it is;
  the same replays run 6-10% faster (docs/engine.md, "The compiled code's cache"). A negative index
  there is out of range, as in C: ``NUMBA_BOUNDSCHECK=1`` checks every index, negative ones
  included, and raises IndexError, and tests/test_engine_boundscheck.py runs the engine's
  tests so. numba's own functions and any function outside the package keep the wrap.

Imported with emu.compiled_cache, before any compiled function.
"""

from __future__ import annotations

import os

from numba.core import config, dispatcher, types
from numba.np import arrayobj

OPT_LEVEL = "2"  # LLVM optimisation level of the engine's compile, unless NUMBA_OPT is set

_ROOT = os.path.dirname(os.path.abspath(__file__)) + os.sep  # the emu package
_get_call_template = dispatcher.Dispatcher.get_call_template
_fix_integer_index_numba = arrayobj.fix_integer_index
_PACKAGE = __name__.split(".")[0]
_MANGLED = f"_ZN{len(_PACKAGE)}{_PACKAGE}"  # how numba's mangled name of an emu function begins


def plain(t):
    """The type an emu function is compiled for, where a compiled caller passes type ``t``."""
    t = types.unliteral(t)
    if isinstance(t, types.Integer) and t.signed and t.bitwidth < 64:
        return types.int64
    return t


def _get_call_template_plain(self, args, kws):
    """Dispatcher.get_call_template (a compiled call's typing), for an emu function with its
    arguments' plain types."""
    code = getattr(self.py_func, "__code__", None)
    if code is not None and code.co_filename.startswith(_ROOT):
        args = tuple(plain(a) for a in args)
        kws = {k: plain(v) for k, v in kws.items()}
    return _get_call_template(self, args, kws)


def _fix_integer_index(context, builder, idxty, idx, size):
    """numba's index fix (arrayobj.fix_integer_index) with no wrap of a negative signed index in
    the code of an emu function (what numba inlines into one included)."""
    if idxty.signed and builder.function.name.startswith(_MANGLED):
        return context.cast(builder, idx, idxty, types.intp)
    return _fix_integer_index_numba(context, builder, idxty, idx, size)


def install() -> None:
    dispatcher.Dispatcher.get_call_template = _get_call_template_plain
    arrayobj.fix_integer_index = _fix_integer_index
    if "NUMBA_OPT" not in os.environ:
        os.environ["NUMBA_OPT"] = OPT_LEVEL
        config.reload_config()  # numba read its environment at import; the compiler re-reads it on a change only


install()
