"""The package's import structure: no cycles (counting imports inside functions), and a light `import emu`."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx

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
