"""``python -m emu.net.render_tables [FILE ...]``: write the column constants of each module's
Tables into its source (default: every module that declares tables, MODULES), after a Table's
columns change."""

from __future__ import annotations

import importlib
import sys

from .tables import render_file

MODULES = ["emu/net/kernel.py", "emu/engine/layout.py", "emu/nic/protocol.py", "emu/nic/rto.py"]


def main(argv: list[str]) -> None:
    for path in argv or MODULES:
        changed = render_file(path, importlib.import_module(path.removesuffix(".py").replace("/", ".")))
        print(f"{path}: {'rendered' if changed else 'up to date'}")


if __name__ == "__main__":
    main(sys.argv[1:])
