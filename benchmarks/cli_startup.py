"""The CLI's start-up: `python -m emu ARGS` for help and commands that do not replay, against the
bare interpreter's start-up (`python -c pass`) timed in the same run. Each figure is the median
of --repeat runs, wall and CPU (the child's user + system). Goal: the CLI imports
neither numba nor the engine unless it replays, so these stay within a few interpreter start-ups.

    python benchmarks/cli_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

from measure import medians

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (("--help",), ("trace", "--help"), ("replay", "--help"), ("profiles", "list"))


def run_once(argv: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall": wall, "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}


def timed_median(argv: list[str], repeat: int) -> dict:
    return medians([run_once(argv) for _ in range(repeat)], ("wall", "cpu"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    ref = timed_median([sys.executable, "-c", "pass"], args.repeat)
    print(f"{'python -c pass':<26} wall {ref['wall']:.3f} s  cpu {ref['cpu']:.3f} s  (reference)")
    for cmd in COMMANDS:
        fig = timed_median([sys.executable, "-m", "emu", *cmd], args.repeat)
        print(f"{'emu ' + ' '.join(cmd):<26} wall {fig['wall']:.3f} s  cpu {fig['cpu']:.3f} s  "
              f"{fig['wall'] / ref['wall']:.1f}x the reference's wall")


if __name__ == "__main__":
    main()
