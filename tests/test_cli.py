import subprocess
import sys

import emu
from emu.cli import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.strip() == f"mcf-emu {emu.__version__}"


def test_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "emu", "--help"], capture_output=True, text=True, check=True).stdout
    assert "usage: emu" in out
