"""What the commands say about themselves matches what they do: help text, units, names, --json."""

import json
import re
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


def test_every_replay_takes_the_compiled_loop(capsys):
    text = help_text(capsys, "replay")
    assert "lossless" not in text and "--engine" not in text  # no engine to choose: the product has one
    # loss and a failure timeline run compiled, and so does functional mode
    run = emu.replay(emu.trace("ring", **SMALL), loss=0.001, fail="link 0-1 down at 1ms up at 2ms")
    assert run.summary["engine"] == "compiled"
    assert emu.replay(emu.trace("mars", **SMALL), functional=True).summary["engine"] == "compiled"


def test_quickstart_states_the_readmes_replay_time():
    text = NOTEBOOK.read_text()
    assert "half a minute" not in text and "a few seconds each" in text


def test_sizes_print_with_binary_prefixes_and_rates_with_decimal_ones(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["trace", "mars", *("--nodes", "4", "--seq", "1024", "--chunk", "256"), "-o", str(out)]) == 0
    assert main(["trace", "show", str(out)]) == 0
    assert main(["trace", "list"]) == 0
    assert main(["profiles", "show", "kr260"]) == 0
    text = "\n".join(ln for ln in capsys.readouterr().out.splitlines() if ".description = " not in ln)  # prose
    sizes = re.findall(r"\d(?:\.\d+)?([kKMGTP]i?)B\b(?!/s)", text)  # sizes, not rates
    assert sizes and set(sizes) <= {"Ki", "Mi", "Gi", "Ti"}, sizes  # no kB, MB or GB beside KiB and MiB
    assert "hw.link_rate = 1Gbps" in text and "hw.mem_bw = 19.2GB/s" in text


def test_a_rate_reads_in_any_case_on_the_command_line(capsys):
    assert main(["profiles", "show", "kr260", "--set", "hw.link_rate=10gbps", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["link_rate"] == 10**10


@pytest.mark.parametrize("argv,hint", [
    (["profiles", "show", "kr260", "--set", "hw.linkrate=10Gbps"], "did you mean hw.link_rate"),
    (["profiles", "show", "kr260", "--set", "hww.link_rate=10Gbps"], "did you mean hw.link_rate"),
    (["trace", "ring", "--set", "model.layer=2", "-o", "never.json"], "did you mean model.layers"),
    (["sweep", "quik"], "did you mean quick? shipped: chunk_mars, mars_memory, nodes_16k, quick, ttft_vs_prompt"),
    (["replay", "mars16k"], "did you mean mars_16k?"),
    (["trace", "ring", "--hw", "kr26", "-o", "never.json"], "did you mean kr260 or kr260-10g?"),
    (["profiles", "show", "kr26"], "did you mean kr260 or kr260-10g?"),
])
def test_a_mistyped_name_gets_a_did_you_mean(argv, hint, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and hint in err, err
    assert not list(tmp_path.iterdir())


def test_wireshark_json(capsys):
    from emu.codec.dissector import LUA_FILE

    assert main(["wireshark", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["dissector"] == str(LUA_FILE) and facts["protocol"] == "mcfemu" and facts["ethertype"] == 0x88B5
    assert facts["installed"] is None and facts["personal_plugins"]
