"""The tiny sweep that test_sweep.py and test_sweep_faults.py run, and writing a sweep file."""

from __future__ import annotations

from pathlib import Path

# Four tiny points (2 boards, 256-512 tokens): well under a second each.
GRID = """
[sweep]
name = "tiny"
description = "test"

[fixed]
nodes = 2
chunk = 128

[grid]
scheme = ["mars", "ring"]
seq = [256, 512]
"""

# The grid and two points that fail on purpose: a KV budget below the owner share, and a
# topology with 9 boards for 2 nodes.
TINY = GRID + """
[[include]]
scheme = "mars"
seq = 256
kv_budget = "1KiB"

[[include]]
scheme = "ring"
seq = 256
topology = "torus:3x3"
"""


def write(d: Path, text: str, name: str = "s.toml") -> Path:
    """``text`` as the sweep file ``d/name``; its path."""
    p = d / name
    p.write_text(text)
    return p
