"""numba's on-disk cache, fresh only if every source a compiled function was built from is.

numba checks a cached function against its own file only. But a compiled function freezes
the module globals it reads (``Op.KV_PUSH``, ``IFG``, a table's column numbers) and embeds
the machine code of every compiled function it calls, and those live in other files: after
a change to ``emu/codec/enums.py`` or ``emu/net/ethernet.py`` numba would go on loading the
old code. So every cached function of the ``emu`` package is stamped with a hash of its
file's *import closure*: the file and, recursively, every ``emu`` module it imports from,
each name followed to the module that defines it (``from ..codec import Op`` reaches
``emu/codec/enums.py`` through the package's re-export, not the whole codec). Any change
to one of them recompiles exactly the functions built from it.

Imported by every module that defines a cached function, before it defines one.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os

from numba.core import caching

from . import numba_compile  # noqa: F401  (one version per argument types, -O2: emu.numba_compile)
from . import numba_inline  # noqa: F401  (numba's inliner made cheaper: emu.numba_inline)

ROOT = os.path.dirname(os.path.abspath(__file__))  # the emu package
PACKAGE = os.path.basename(ROOT)


def _module_file(parts: list[str]) -> str | None:
    """The file of the emu module ``parts`` (relative to the package root), if one exists."""
    base = os.path.join(ROOT, *parts)
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _parts_of(path: str) -> list[str]:
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    return rel[:-1] if rel[-1] == "__init__" else rel


def _package_of(path: str) -> list[str]:
    parts = _parts_of(path)
    return parts if path.endswith("__init__.py") else parts[:-1]


@functools.lru_cache(maxsize=None)
def _imports(path: str) -> tuple[tuple[tuple[str, ...], tuple[str, ...] | None], ...]:
    """The module-level ``emu`` imports of a file: (module parts, names or None for a plain import)."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    found = []
    todo = list(tree.body)
    while todo:  # module level, including under if/try (not inside functions: numba compiles none of those)
        node = todo.pop()
        if isinstance(node, (ast.If, ast.Try)):
            todo += node.body + node.orelse + getattr(node, "finalbody", []) + [
                s for h in getattr(node, "handlers", []) for s in h.body]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = _package_of(path)
                pkg = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                mod = pkg + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == PACKAGE:
                mod = node.module.split(".")[1:]
            else:
                continue
            found.append((tuple(mod), tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == PACKAGE:
                    found.append((tuple(a.name.split(".")[1:]), None))
    return tuple(found)


def _defining(mod: tuple[str, ...], name: str, seen: frozenset = frozenset()) -> str | None:
    """The file that defines ``name`` as imported from module ``mod``: a submodule of that
    name, the module a package re-exports it from, or the module itself."""
    sub = _module_file([*mod, name])
    if sub:
        return sub
    path = _module_file(list(mod))
    if path is None or path in seen:
        return path
    for src, names in _imports(path):
        if names and (name in names or "*" in names):
            found = _defining(src, name, seen | {path})
            if found:
                return found
    return path


@functools.lru_cache(maxsize=None)
def closure(path: str) -> tuple[str, ...]:
    """``path`` and every emu source it is built from, sorted."""
    done, todo = set(), [os.path.abspath(path)]
    while todo:
        p = todo.pop()
        if p in done:
            continue
        done.add(p)
        for mod, names in _imports(p):
            deps = [_module_file(list(mod))] if names is None else [_defining(mod, n) for n in names]
            todo += [d for d in deps if d and d not in done]
    return tuple(sorted(done))


def stamp(path: str) -> bytes:
    """One hash of the contents of ``path``'s import closure (re-read when a file changes)."""
    files = closure(os.path.abspath(path))
    return _hash(tuple((p, os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in files))


@functools.lru_cache(maxsize=256)
def _hash(key: tuple) -> bytes:
    h = hashlib.sha256()
    for path, _, _ in key:
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, ROOT).encode() + b"\0" + f.read())
    return h.digest()


class _Stamped:
    """A cache locator for the emu package's functions, whose freshness is ``stamp(file)``."""

    def get_source_stamp(self):
        return stamp(self._py_file)

    @classmethod
    def from_function(cls, py_func, py_file):
        inside = os.path.abspath(py_file).startswith(ROOT + os.sep)
        return super().from_function(py_func, py_file) if inside else None


_LOCATORS = [type(f"Emu{base.__name__}", (_Stamped, base), {})
             for base in (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator,
                          caching.UserWideCacheLocator)]
if not any(getattr(k, "__name__", "").startswith("EmuUser") for k in caching.CacheImpl._locator_classes):
    caching.CacheImpl._locator_classes[:0] = _LOCATORS
