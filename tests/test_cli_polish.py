"""What the commands say about themselves matches what they do: help text, units, names, --json."""

import json
from pathlib import Path

import pytest

import emu
from emu.cli import main

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"
SMALL = dict(nodes=4, seq=1024, chunk=256)


def help_text(capsys, *argv) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_replay_help_says_which_runs_take_the_compiled_loop(capsys):
    text = help_text(capsys, "replay")
    assert "lossless" not in text and "--loss, --fail and --degrade too" in text
    # and so they do: loss and a failure timeline run compiled under --engine auto
    run = emu.replay(emu.trace("ring", **SMALL), loss=0.001, fail="link 0-1 down at 1ms up at 2ms")
    assert run.summary["engine"] == "compiled"


def test_quickstart_states_the_readmes_replay_time():
    text = NOTEBOOK.read_text()
    assert "half a minute" not in text and "a few seconds each" in text
