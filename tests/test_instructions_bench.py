"""benchmarks/instructions.py counts the instructions a process executes (valgrind's cachegrind)
and says in one line what it lacks: valgrind, or the trace."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "instructions.py"
spec = importlib.util.spec_from_file_location("instructions", SCRIPT)
instructions = importlib.util.module_from_spec(spec)
spec.loader.exec_module(instructions)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_a_process_that_does_more_work_counts_more_instructions_and_its_output_comes_back():
    idle, out = instructions.counted([sys.executable, "-S", "-c", "print(7)"])
    busy, _ = instructions.counted([sys.executable, "-S", "-c", "x = 0\nfor i in range(200000): x += i\nprint(x)"])
    assert out.strip() == "7"
    # 200,000 interpreted additions: tens of instructions each, on top of the same start-up
    assert busy - idle > 200_000 * 10
    assert idle > 1_000_000  # the interpreter's start-up alone


def _run(args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env)


def test_without_valgrind_it_says_so_in_one_line(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no valgrind on this PATH
    proc = _run([str(tmp_path / "t.json")], env)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "instructions: valgrind not found (Debian: apt-get install valgrind)"


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_a_missing_trace_is_named(tmp_path):
    proc = _run([str(tmp_path / "missing.json")])
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"instructions: {tmp_path / 'missing.json'}: no such trace"
    assert "Traceback" not in proc.stderr
