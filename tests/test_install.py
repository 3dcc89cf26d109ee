"""A plain (non-editable) `pip install .` into a fresh venv works outside the checkout: the shipped
traces and sweeps are installed as package data, and a replay by name gives the exact wire bytes
counted independently from the checkout's copy of the trace.

The venv sees the system site-packages (the dependencies are already there, so nothing else is
installed: --no-deps) but imports emu from its own site-packages, which the test checks.
"""

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from waits import HANG_S

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", "results", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                ".ci", "*.pcap", "*.pcapng")


def test_installed_package_replays_a_shipped_trace_by_name(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=IGNORE)  # a build writes into its source folder
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py, exe = venv / "bin" / "python", venv / "bin" / "emu"
    # When the suite itself runs in a venv (scripts/test's .venv), a venv made from it sees only
    # the base interpreter's packages: point it at this interpreter's too, after its own. Paths
    # in a .pth are not site dirs, so their editable-install hooks stay inactive.
    own = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                         text=True, check=True).stdout.strip()
    Path(own, "zz_test_parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", str(src)],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert pip.returncode == 0, pip.stderr[-3000:]
    shutil.rmtree(src)  # nothing may point back into the copy the package was built from
    away = tmp_path / "elsewhere"
    away.mkdir()

    def emu(*args) -> str:
        p = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, cwd=away, timeout=HANG_S)
        assert p.returncode == 0, p.stderr[-3000:]
        return p.stdout

    where = subprocess.run([str(py), "-c", "import emu, emu.shipped; print(emu.__file__)"], capture_output=True,
                           text=True, env=env, cwd=away, check=True).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    traces = {t["name"]: t for t in json.loads(emu("trace", "list", "--json"))}
    assert set(traces) >= {"mars_16k", "ring_16k", "zigzag_16k", "pd_16k"}
    assert all(Path(t["path"]).is_relative_to(venv) for t in traces.values())
    assert (ROOT / "traces" / "pd_16k.json").read_bytes() == Path(traces["pd_16k"]["path"]).read_bytes()
    sweeps = {s["name"] for s in json.loads(emu("sweep", "list", "--json"))}
    assert sweeps >= {"quick", "nodes_16k", "ttft_vs_prompt"}
    assert len(json.loads(emu("sweep", "quick", "--dry-run", "--json"))["points"]) == 16

    s = json.loads(emu("replay", "pd_16k", "--no-results", "--json"))
    from emu.replay.run import Options, Replay
    from emu.workload.trace import load_trace
    from test_replay_shipped import expected_wire_bytes

    rp = Replay(load_trace(str(ROOT / "traces" / "pd_16k.json")), Options())
    assert s["trace"] == "pd_16k.json" and s["incomplete_ops"] == 0
    assert s["wire_bytes"] == expected_wire_bytes(rp)
