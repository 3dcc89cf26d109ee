"""scripts/mutants' list can only be kept, never rot: every listed original is found exactly
once in its file (the mutation run itself is too slow for the suite: scripts/mutants), and a
list whose original is not there, or is there twice, is refused in one line."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENTRY = '''
[[mutant]]
rule = "arbiter: round robin"
doc = "docs/engine.md"
file = "emu/net/kernel.py"
original = "{original}"
mutant = "local = True"
tests = ["tests/test_engine_port.py"]
'''


def check(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "mutants"), "--check", *args],
                          capture_output=True, text=True)


def test_every_listed_original_is_found_once_in_the_tree():
    p = check()
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("mutants, each original found once in its file")


def test_a_list_whose_original_is_not_found_exactly_once_is_refused(tmp_path):
    for original, found in (("local = LK[link, L_LAST] == 2", 0), ("LK[link, L_LAST] = ", 2)):
        data = tmp_path / "m.toml"
        data.write_text(ENTRY.format(original=original))
        p = check("--data", str(data))
        assert p.returncode == 2 and p.stdout == ""
        assert p.stderr.count("\n") == 1 and f"original text found {found} times in emu/net/kernel.py" in p.stderr
