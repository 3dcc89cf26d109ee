"""What numba compiles for the engine (emu.numba_compile): one version per function and plain
argument types, at LLVM -O2 unless the user says otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from numba import njit, types

from emu import numba_compile
from emu.nic.protocol import reduction_complete


def test_a_compiled_callers_constants_and_narrow_integers_are_plain_types():
    plain = numba_compile.plain
    assert plain(types.IntegerLiteral(0)) == types.int64
    assert plain(types.BooleanLiteral(True)) == types.boolean
    assert plain(types.int32) == types.int64 and plain(types.int8) == types.int64
    # what a conversion would change stays: unsigned, floats, arrays
    assert plain(types.uint32) == types.uint32 and plain(types.uint64) == types.uint64
    assert plain(types.float32) == types.float32
    assert plain(types.int64[:, ::1]) == types.int64[:, ::1]


@njit
def _with_constants(got):
    return reduction_complete(got, 1), reduction_complete(np.int32(got), np.int16(2))


def test_an_emu_function_called_with_constants_and_int32_is_compiled_once_for_int64():
    assert _with_constants(1) == (True, False)  # the converted values: 1 >= 1, 1 >= 2
    assert _with_constants(5) == (True, True)
    for sig in reduction_complete.signatures:
        assert sig == (types.int64, types.int64), sig  # no Literal[int](1), no int32 or int16 version


@njit
def _outside(a, b):
    return a + b


@njit
def _calls_outside(x):
    return _outside(np.int32(x), 1)


def test_a_function_outside_the_package_keeps_numbas_own_typing():
    assert _calls_outside(2) == 3
    assert any(types.int32 in sig for sig in _outside.signatures)


def _opt(env):
    code = "import emu.compiled_cache, numba, os; print(int(numba.config.OPT), os.environ['NUMBA_OPT'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_the_engine_compiles_at_O2_unless_numba_opt_is_set():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_OPT"}
    # the environment says it too: the processes that compile at install inherit it
    assert _opt(env) == ["2", "2"]
    assert _opt(dict(env, NUMBA_OPT="3")) == ["3", "3"]


_NEGATIVE = """
import numpy as np
from numba import njit
from emu.net import kernel as K

@njit
def outside(a, i):
    return a[i, 0]

MS = np.zeros((3, K.M_NCOLS), np.int64)
MD = np.zeros((3, K.D_NCOLS), np.int64)
MS[2, 0] = 5
print(outside(MS, -1))  # numba's wrap, outside the package: the last row
try:
    K.dest_row(MS, MD, -1, 0)
    print("no error")
except IndexError:
    print("IndexError")
"""


def test_an_emu_function_takes_a_negative_index_as_it_is_and_the_bounds_check_catches_it(tmp_path):
    # Checked indices (what tests/test_engine_boundscheck.py runs the kernel's tests with), in a fresh cache:
    # row -1 of an emu function's table is out of range, not the last row; numba's wrap stays
    # for a function outside the package.
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", _NEGATIVE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["5", "IndexError"]
