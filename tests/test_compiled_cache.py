"""numba's disk cache follows every source a compiled function is built from (emu.compiled_cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emu import compiled_cache as cc

EMU = Path(cc.ROOT)


def rel(paths) -> set[str]:
    return {os.path.relpath(p, cc.ROOT) for p in paths}


def test_a_closure_follows_names_to_the_module_that_defines_them():
    kernel = rel(cc.closure(str(EMU / "net" / "kernel.py")))
    assert kernel == {"net/kernel.py", "net/ethernet.py", "net/framing.py", "net/tables.py", "codec/mac.py", "heap.py", "bits.py", "compiled_cache.py",
                      "numba_compile.py", "numba_inline.py"}
    # `from ..codec import Collective, Op` reaches the enums through the package's re-export,
    # not the scapy layer or the pcap reader
    protocol = rel(cc.closure(str(EMU / "nic" / "protocol.py")))
    assert "codec/enums.py" in protocol and "nic/rto.py" in protocol
    assert not {"codec/layer.py", "codec/pcap.py", "codec/__init__.py"} & protocol
    loop = rel(cc.closure(str(EMU / "engine" / "loop.py")))
    assert {"net/kernel.py", "net/ethernet.py", "codec/enums.py", "workload/enums.py",
            "engine/layout.py", "nic/protocol.py"} <= loop


def test_every_cached_function_of_the_package_is_stamped_by_its_closure():
    from emu.net import kernel
    from emu.nic import protocol, rto
    from emu.engine import loop
    from emu.replay import capture_frames

    for fn in (kernel.advance, protocol.reduction_next, rto.rto_sample, loop.drive, capture_frames.stamp):
        loc = fn._cache._impl.locator
        assert isinstance(loc, cc._Stamped)
        assert loc.get_source_stamp() == cc.stamp(fn.py_func.__code__.co_filename)


def test_a_stamp_changes_with_any_file_of_the_closure(tmp_path, monkeypatch):
    pkg = tmp_path / "emu"
    (pkg / "net").mkdir(parents=True)
    (pkg / "net" / "ethernet.py").write_text("IFG = 12\n")
    (pkg / "net" / "kernel.py").write_text("from .ethernet import IFG\n")
    monkeypatch.setattr(cc, "ROOT", str(pkg))
    kernel = str(pkg / "net" / "kernel.py")
    before = cc.stamp(kernel)
    (pkg / "net" / "ethernet.py").write_text("IFG = 120\n")  # another size: seen within one mtime tick
    assert cc.stamp(kernel) != before


PROBE = """
import json
from emu.nic import protocol
op, where = protocol.reduction_next(False, 0)
s = protocol.reduction_next.stats
print(json.dumps(dict(op=int(op), hits=sum(s.cache_hits.values()), misses=sum(s.cache_misses.values()))))
"""


def run_probe(tree: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=tree, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_compiled_in_constant_changed_in_another_file_recompiles(tmp_path):
    """``reduction_next`` freezes ``Op.partial_state`` from emu/codec/enums.py into its machine
    code; a copy of the package with that value changed must not load the old code."""
    from emu.nic import protocol

    protocol.reduction_next(False, 0)  # the suite's own cache has this entry
    tree = tmp_path / "tree"
    shutil.copytree(EMU, tree / "emu", copy_function=shutil.copy2)  # __pycache__ and its cache too
    first = run_probe(tree)
    # the same sources elsewhere: the stamp is their content, so the copied cache is used
    assert first["op"] == 8 and first["hits"] == 1 and first["misses"] == 0
    enums = tree / "emu" / "codec" / "enums.py"
    text = enums.read_text()
    assert text.count("    partial_state = 8\n") == 1
    enums.write_text(text.replace("    partial_state = 8\n", "    partial_state = 99\n"))
    second = run_probe(tree)
    assert second["op"] == 99 and second["misses"] == 1


def test_the_engine_knows_whether_its_cache_is_compiled(monkeypatch):
    from emu.engine import loop, cache

    loop.drive  # noqa: B018 (imported: the suite has compiled it)
    assert cache.compiled()
    monkeypatch.setattr(cc, "stamp", lambda path: b"other sources")
    assert not cache.compiled()


def test_a_cold_first_replay_says_it_compiles_and_install_skips_a_warm_cache(monkeypatch, capsys):
    import emu
    from emu.engine import cache, compile_share, warm

    monkeypatch.setattr(cache, "compiled", lambda: False)
    shared = []  # a cold replay compiles as install does, in two processes (emu.engine.compile_share)
    monkeypatch.setattr(compile_share, "compile_engine", lambda: shared.append(1))
    emu.replay(emu.trace("ring", nodes=2, seq=256, chunk=128, decode_tokens=1))
    err = capsys.readouterr().err
    assert cache.NOTICE in err and "replay engine compiled and cached" in err
    assert shared == ([1] if compile_share.processes() > 1 else [])
    monkeypatch.undo()
    monkeypatch.setattr(warm, "warm", lambda: pytest.fail("replayed although compiled"))
    monkeypatch.setattr(compile_share, "compile_engine", lambda: pytest.fail("replayed although compiled"))
    assert warm.main() == 0
    assert "already compiled" in capsys.readouterr().err


# ---- one compile shared by processes (emu.engine.compile_share) ---------------------------

SHARER = """
import json, sys, time
from emu.engine import compile_share
from emu.nic import rto
compile_share.install(sys.argv[1])
if sys.argv[2] == "slow":  # compiles slowly, so that the other process comes while it does
    real = compile_share._compile
    def slow(disp, sig):
        print("compiling", flush=True)
        time.sleep(2)
        return real(disp, sig)
    compile_share._compile = slow
t = time.perf_counter()
rto.rto_backoff(rto.rto_table(2, 1, 5, 100), 1, 100)
s = rto.rto_backoff.stats
print(json.dumps(dict(hits=sum(s.cache_hits.values()), misses=sum(s.cache_misses.values()),
                      s=time.perf_counter() - t)))
"""


def sharer(tmp_path, locks, mode):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    return subprocess.Popen([sys.executable, "-c", SHARER, str(locks), mode], env=env,
                            stdout=subprocess.PIPE, text=True)


def test_a_function_another_process_is_compiling_is_waited_for_and_loaded_not_compiled_again(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    first = sharer(tmp_path, locks, "slow")
    assert first.stdout.readline().strip() == "compiling"  # it holds the function's lock
    second = sharer(tmp_path, locks, "plain")
    out2, out1 = second.communicate(timeout=120)[0], first.communicate(timeout=120)[0]
    one, two = json.loads(out1.strip().splitlines()[-1]), json.loads(out2.strip().splitlines()[-1])
    assert (one["misses"], one["hits"]) == (1, 0)
    assert (two["misses"], two["hits"]) == (0, 1)  # loaded from the cache the first one wrote
    # and a third, after both, loads it at once
    third = sharer(tmp_path, locks, "plain")
    assert json.loads(third.communicate(timeout=120)[0].strip().splitlines()[-1])["hits"] == 1


def test_how_many_processes_compile_the_engine(monkeypatch, capsys):
    from emu.engine import compile_share as share, warm
    from emu.errors import ConfigError

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.delenv(share.PROCESSES, raising=False)
    assert share.processes() == 2
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert share.processes() == 1
    monkeypatch.setenv(share.PROCESSES, "2")
    assert share.processes() == 2
    monkeypatch.setenv(share.PROCESSES, "1")
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert share.processes() == 1
    monkeypatch.setenv(share.PROCESSES, "many")
    with pytest.raises(ConfigError, match="EMU_COMPILE_PROCESSES='many': expected 1 or 2"):
        share.processes()
    monkeypatch.setattr(warm.cache, "compiled", lambda: False)
    assert warm.main() == 2  # one line, nothing compiled
    assert capsys.readouterr().err.strip() == "mcf-emu: EMU_COMPILE_PROCESSES='many': expected 1 or 2 (processes that compile the replay engine)"


def test_the_compile_at_install_runs_its_two_parts_in_two_processes(monkeypatch):
    from emu.engine import compile_share

    started = []

    class Worker:
        def __init__(self, argv, env):
            started.append((argv, env))

        def wait(self):
            return 0

    monkeypatch.setattr(compile_share.subprocess, "Popen", Worker)
    compile_share.compile_engine()
    assert [a[-3:-1] for a, _ in started] == [["--part", "loop"], ["--part", "kernel"]]
    assert started[0][0][-1] == started[1][0][-1]  # one directory of locks for both
    # this emu package, whatever the working directory holds
    assert all(a[1] == "-P" and e["PYTHONPATH"].split(os.pathsep)[0] == str(EMU.parent) for a, e in started)


def test_a_compiling_process_that_dies_is_named_with_how_it_ended(monkeypatch):
    # A process the kernel kills (the out-of-memory killer) prints no error of its own.
    from emu.engine import compile_share

    codes = iter([0, -9])

    class Worker:
        def __init__(self, argv, env):
            self.code = next(codes)

        def wait(self):
            return self.code

    monkeypatch.setattr(compile_share.subprocess, "Popen", Worker)
    with pytest.raises(RuntimeError) as e:
        compile_share.compile_engine()
    assert str(e.value) == ("compiling the replay engine's kernel (killed by SIGKILL: out of memory?) failed "
                            "(its error, if it printed one, is above)")
    codes = iter([3, 0])
    with pytest.raises(RuntimeError, match=r"engine's loop \(exit status 3\) failed"):
        compile_share.compile_engine()


# ---- numba's inliner made cheaper (emu.numba_inline) ---------------------------------------

def test_the_inliner_patches_are_in_place():
    from numba.core import inline_closurecall

    from emu import numba_inline

    assert inline_closurecall.copy.deepcopy is numba_inline._deepcopy
    assert inline_closurecall.InlineWorker.run_untyped_passes is numba_inline._untyped_ir


def test_the_blocks_of_one_ir_copy_share_one_copy_of_their_scope():
    """numba's copy_ir deep-copies a callee block by block; under the patch the blocks of one
    call share one memo, so the scope (which holds every variable) is copied once, and a
    second copy is a copy of its own."""
    from numba.core import ir

    from emu.numba_inline import _deepcopy

    loc = ir.Loc("f.py", 1)
    scope = ir.Scope(None, loc)
    blocks = []
    for k in range(3):
        b = ir.Block(scope, loc)
        b.append(ir.Assign(ir.Const(k, loc), scope.define(f"v{k}", loc), loc))
        blocks.append(b)

    def copy_ir(blocks):  # named as numba's function is: the patch knows its calls by that name
        out = []
        for b in blocks:
            out.append(_deepcopy(b))
        return out

    first, second = copy_ir(blocks), copy_ir(blocks)
    assert all(c.scope is first[0].scope for c in first) and first[0].scope is not scope
    assert second[0].scope is not first[0].scope and all(c.scope is second[0].scope for c in second)
    assert [c.body[0].target.name for c in first] == ["v0", "v1", "v2"]
    assert first[1].body[0].target is not blocks[1].body[0].target


def test_an_inlined_function_runs_its_untyped_passes_once_per_compile(monkeypatch):
    """A callee inlined at several call sites (and through other inlined callees) is taken
    through numba's frontend once per compile; every site still gets its own copy."""
    from numba import njit

    from emu import numba_inline

    runs = []
    original = numba_inline._run_untyped_passes
    monkeypatch.setattr(numba_inline, "_run_untyped_passes",
                        lambda self, func, ssa=False: runs.append(func.__name__) or original(self, func, ssa))

    @njit(inline="always")
    def step(x):
        if x > 2:
            return x * 3
        return x + 1

    @njit(inline="always")
    def twice(x):
        return step(step(x))

    @njit
    def run(x):
        return twice(x) + step(x) + twice(x + 1)

    assert run(1) == twice.py_func(1) + step.py_func(1) + twice.py_func(2) == 3 + 2 + 9
    assert sorted(runs) == ["step", "twice"]
