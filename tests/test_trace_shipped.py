"""The committed traces: they load, validate, match the paper's setup and the closed
forms, and the commands in traces/README.md regenerate them byte for byte."""

import re
import shlex
from pathlib import Path

import pytest

from emu.cli import main
from emu.workload import analytic
from emu.workload.analysis import delivered_bytes, kv_memory
from emu.workload.enums import MsgOp, Stage
from emu.workload.generate import GENERATOR
from emu.workload.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
NAMES = ["mars", "ring", "zigzag", "pd", "ulysses", "usp"]


def readme_commands() -> dict[str, list[str]]:
    text = (TRACES / "README.md").read_text()
    cmds = {}
    for line in re.findall(r"^emu trace .*$", text, flags=re.M):
        argv = shlex.split(line)[1:]
        cmds[Path(argv[argv.index("-o") + 1]).name] = argv
    return cmds


@pytest.mark.parametrize("name", NAMES)
def test_shipped_trace_loads_and_matches_the_setup(name):
    t = load_trace(TRACES / f"{name}_16k.json")  # how fast: benchmarks/timing_goals.py
    m = t.meta
    assert (m["seq"], m["nodes"], m["chunk"], m["decode_tokens"]) == (16384, 16, 1024, 32)
    assert (m["model"]["name"], m["hw"]["name"], m["scheme"]["name"]) == ("qwen2.5-1.5b", "kr260", name)
    assert m["generator"] == GENERATOR, "generator changed: regenerate the shipped traces (traces/README.md)"
    assert (TRACES / f"{name}_16k.json").stat().st_size < 6 * 2**20


@pytest.mark.parametrize("name", ["ring", "zigzag"])
def test_shipped_ring_traces_move_eq21_bytes(name):
    t = load_trace(TRACES / f"{name}_16k.json")
    assert delivered_bytes(t, MsgOp.kv_transfer, Stage.prefill) == analytic.c_ring(16, 16, 1024 * 7168)


def test_shipped_mars_trace_respects_its_budget():
    t = load_trace(TRACES / "mars_16k.json")
    mem = kv_memory(t)
    assert mem.max() == t.schedule["kv_budget_bytes"] == 2 * 1024 * 7168
    assert (mem[-1] == 1024 * 7168).all()


@pytest.mark.parametrize("name", ["pd", "mars", "ring", "ulysses", "usp"])
def test_readme_command_regenerates_the_identical_file(tmp_path, name):
    argv = readme_commands()[f"{name}_16k.json"]
    out = tmp_path / f"{name}.json"
    argv[argv.index("-o") + 1] = str(out)
    assert main(argv) == 0
    assert out.read_bytes() == (TRACES / f"{name}_16k.json").read_bytes()


def test_readme_lists_every_shipped_trace():
    assert sorted(readme_commands()) == sorted(p.name for p in TRACES.glob("*.json"))
    assert all(readme_commands()[f"{n}_16k.json"][1] == n for n in NAMES)
