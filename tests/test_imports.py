"""The package's import structure: no cycles (counting imports inside functions), and a light `import emu`."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module_graph() -> nx.DiGraph:
    """Module -> module for every import statement in emu/, wherever in the file it is."""
    mods = {}
    for f in (ROOT / "emu").rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    G = nx.DiGraph()
    for m, f in mods.items():
        pkg = m if f.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            target = next((n for n in names if n in mods and n != m), None)
            if target:
                G.add_edge(m, target)
    return G


def test_no_import_cycles():
    G = _module_graph()
    assert G.has_edge("emu.workload.trace", "emu.workload.validate")  # the graph sees real imports
    assert G.has_edge("emu.workload.profiles", "emu.units")
    assert list(nx.simple_cycles(G)) == []


def test_import_emu_is_light():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(ROOT)}
    code = ("import sys, emu; heavy = sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'pandas', 'numba', 'scapy', 'networkx'});"
            "print(heavy, sorted(m for m in sys.modules if m.startswith('emu.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "[] []"


def _imported_by(*argv: str) -> set[str]:
    """The modules `python -X importtime -m emu ARGV` imports (read from the import log on stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "emu", *argv], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("argv", [("--help",), ("trace", "--help"), ("replay", "--help"), ("hw", "--help"),
                                  ("hw", "bringup", "--help"), ("tune", "--help"), ("profiles",), ("profiles", "list"),
                                  ("trace", "list")])
def test_the_cli_without_a_replay_leaves_the_engine_unimported(argv):
    """The CLI imports a command's machinery when the command runs, not to build its parser: help and
    the commands that do not replay start without numba or the compiled engine (docs/engine.md)."""
    mods = _imported_by(*argv)
    assert {"emu.cli", "emu.units"} <= mods  # the log is read (emu.units: the hw command's parser imports it)
    assert not mods & {"numba", "emu.net.kernel", "emu.engine.loop", "emu.nic.protocol"}, sorted(mods & {"numba", "emu.net.kernel"})


def test_a_replay_runs_its_loop_without_pandas_and_loads_it_for_the_summary():
    """pandas (95 MiB with pyarrow) is loaded once the loop is done: by the summary, not beside
    the loop's tables (emu.replay.session, emu.net.linkstats)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(ROOT)}
    code = ("import sys, emu\n"
            "from emu.engine import runner\n"
            "seen, run = [], runner._run\n"
            "def _run(rp):\n"
            "    seen.append('pandas' in sys.modules)\n"
            "    run(rp)\n"
            "    seen.append('pandas' in sys.modules)\n"
            "runner._run = _run\n"
            "r = emu.replay(emu.trace('mars', seq=1024, nodes=4, chunk=256, decode_tokens=1))\n"
            "print(seen, 'pandas' in sys.modules, r.summary['incomplete_ops'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=ROOT)
    assert out.stdout.split() == ["[False,", "False]", "True", "0"], out.stderr[-2000:]
