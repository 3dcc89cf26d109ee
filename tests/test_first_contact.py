"""First contact: the README's commands as written, and help that helps."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from emu.cli import build_parser
from waits import HANG_S

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _subparsers(parser: argparse.ArgumentParser, prefix=()):
    """Every (path, parser) of the command tree."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _subparsers(sub, (*prefix, name))


def test_every_subcommand_shows_an_example():
    missing = [" ".join(path) for path, p in _subparsers(build_parser()) if "example" not in (p.epilog or "")]
    assert missing == []


def test_trace_help_describes_each_scheme():
    text = build_parser()._subparsers._group_actions[0].choices["trace"].format_help()
    for scheme, words in (("mars", "replicas"), ("ring", "Ring Attention"), ("zigzag", "balanced"),
                          ("pd", "prefill pool"), ("full", "every board")):
        line = re.search(rf"^\s+{scheme}\s+(.*)$", text, re.M)
        assert line and words in text and f"{scheme} trace" not in line[1], scheme


def _help(*path) -> str:
    p = build_parser()
    for name in path:
        p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return " ".join(p.format_help().split())


@pytest.mark.parametrize("path,option,default", [
    (("replay",), "--loss", "(default 0)"),
    (("trace", "pd"), "--pd-mode", "(default bulk)"),
    (("hw", "send"), "--rate", "default: unpaced"),
])
def test_defaults_are_shown(path, option, default):
    text = _help(*path)
    assert option in text and default in text


def test_trace_show_and_profiles_show_have_help():
    assert "trace file (.json or .json.gz)" in _help("trace", "show")
    assert "Exit 2 naming the JSON path" in _help("trace", "show")
    show = _help("profiles", "show")
    assert "profile name" in show and "override a field" in show


def test_the_readme_scenario_examples_name_links_of_the_default_topology():
    from emu.net.timeline import parse
    from emu.topology import default_for

    G = default_for(16, 4)  # what `emu replay traces/mars_16k.json` runs on: 16 KR260s, 4 ports
    clauses = re.findall(r"--(?:fail|degrade) '([^']+)'", README)
    assert clauses
    for change in parse(clauses):
        for u, v in change.items:
            assert G.has_edge(u, v), f"README example {change.clause!r}: no link {u}-{v} in {G.graph['name']}"


def test_the_readme_installs_into_a_venv_not_into_debians_python():
    block = re.search(r"```sh\n(.*?)\n```", README, re.S)[1]
    assert block == "./scripts/install && .venv/bin/emu replay traces/mars_16k.json"
    for script in ("scripts/install", "scripts/test"):
        text = (ROOT / script).read_text()
        assert os.access(ROOT / script, os.X_OK)
        assert "python3 -m pip install" not in text  # the command PEP 668 refuses on Debian
    assert '"$py" -m venv' in (ROOT / "scripts/install").read_text()
    assert "./scripts/install test" in (ROOT / "scripts/test").read_text()


@pytest.mark.skipif(os.environ.get("EMU_TEST_INSTALL") != "1",
                    reason="downloads every dependency; set EMU_TEST_INSTALL=1 to run")
def test_scripts_install_on_debians_own_python(tmp_path):
    """The README's first command, with Debian's externally managed /usr/bin/python3."""
    if not list(Path("/usr/lib").glob("python3*/EXTERNALLY-MANAGED")):
        pytest.skip("not a Debian Python")
    env = {**os.environ, "PATH": "/usr/bin:/bin", "EMU_VENV": str(tmp_path / "venv")}
    env.pop("PYTHONPATH", None)
    subprocess.run([str(ROOT / "scripts/install")], env=env, check=True, capture_output=True, timeout=HANG_S)
    out = subprocess.run([str(tmp_path / "venv/bin/emu"), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("mcf-emu ")
    assert shutil.which("emu", path=str(tmp_path / "venv/bin"))
