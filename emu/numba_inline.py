"""numba's inliner made cheaper: one copy of a callee's IR per inlining, one frontend run per
function and compile.

The replay's compiled code inlines its steps (``inline="always"``) into a few large loops
(docs/engine.md, "Why it is fast"); numba's inliner made that cost minutes of compile, in two
places (numba.core.inline_closurecall, read against the pinned numba of pyproject.toml):
- ``inline_ir`` deep-copies the callee's IR block by block (its ``copy_ir``), each
  ``copy.deepcopy`` with a memo of its own. Every variable of a block refers to the function's
  one scope, which holds every variable of the function, so each block's copy copies the whole
  scope again: B blocks and V variables cost B x V. Here the blocks of one ``copy_ir`` call
  share one memo: the scope is copied once and the copied blocks share it, as the original's do.
- ``inline_function`` runs the callee's untyped passes again at every call site, and those
  passes inline the callee's own callees, so a tree of inlined steps is rebuilt at every
  transitive call site (numba issues 8989 and 9204 describe the same costs). The IR those
  passes give depends on the function and the compile's flags only; here it is kept for the
  compile under way (the flags object numba hands down to every nested inlining) and each
  call site inlines its own copy (``inline_ir`` copies the IR it is given before changing it).
Only the copying and the repeated frontend runs go; what is inlined where does not change (the
replays' results are identical, docs/engine.md "The compiled code's cache", which also says
what it saves); tests/test_compiled_cache.py checks that both patches are in place and what
they keep.
"""

from __future__ import annotations

import copy
import sys
import types

from numba.core import inline_closurecall

_COPIER = "copy_ir"  # the function of inline_closurecall that copies a callee's blocks
_copying: list = [None, None]  # the copy_ir call (its frame, held) whose blocks are copied, its memo
_compile: list = [None, {}]  # the flags of the compile under way (held), its callees' untyped IR
_run_untyped_passes = inline_closurecall.InlineWorker.run_untyped_passes


def _deepcopy(x, memo=None):
    if memo is None:
        frame = sys._getframe(1)
        if frame.f_code.co_name == _COPIER:
            if _copying[0] is not frame:  # a new copy_ir call: a new memo (the held frame cannot be reused)
                _copying[0], _copying[1] = frame, {}
            memo = _copying[1]
    return copy.deepcopy(x, memo)


def _untyped_ir(self, func, enable_ssa=False):
    """InlineWorker.run_untyped_passes, once per function in one compile."""
    if _compile[0] is not self.flags:
        _compile[0], _compile[1] = self.flags, {}
    key = (func, enable_ssa)
    if key not in _compile[1]:
        _compile[1][key] = _run_untyped_passes(self, func, enable_ssa)
    self.flags.enable_ssa = enable_ssa  # what the passes leave in the flags, as a run does
    return _compile[1][key]


def install() -> None:
    inline_closurecall.copy = types.SimpleNamespace(deepcopy=_deepcopy, copy=copy.copy)
    inline_closurecall.InlineWorker.run_untyped_passes = _untyped_ir


install()
