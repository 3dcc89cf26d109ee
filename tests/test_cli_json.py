"""Every command that prints a summary takes --json, and the JSON says what the text says."""

import json
import subprocess

import pytest

from emu.cli import main
from waits import HANG_S


def run_json(capsys, *argv, status=0):
    assert main(list(argv)) == status
    return json.loads(capsys.readouterr().out)


def test_trace_generate_and_show(tmp_path, capsys):
    out = tmp_path / "t.json"
    made = run_json(capsys, "trace", "ring", "--nodes", "4", "--seq", "1024", "--chunk", "256", "-o", str(out), "--json")
    assert made["bytes"] == out.stat().st_size and made["chunk"] == 256
    shown = run_json(capsys, "trace", "show", str(out), "--json")
    assert shown["ops"] == made["ops"] and shown["nodes"] == 4 and shown["n_chunks"] == 4
    assert sum(shown["kinds"].values()) == made["ops"]
    assert shown["messages"]["kv_transfer"]["count"] > 0


def test_profiles(capsys):
    names = run_json(capsys, "profiles", "list", "--json")
    assert "kr260" in names["hw"] and "qwen2.5-1.5b" in names["model"]
    hw = run_json(capsys, "profiles", "show", "kr260", "--set", "hw.link_rate=10Gbps", "--json")
    assert hw["kind"] == "hw" and hw["link_rate"] == 10**10 and hw["link_latency_ps"] > 0


def test_sweep_list_dry_run_and_run(tmp_path, capsys):
    listed = {s["name"]: s for s in run_json(capsys, "sweep", "list", "--json")}
    assert listed["quick"]["points"] == 16 and listed["quick"]["description"]
    dry = run_json(capsys, "sweep", "quick", "--dry-run", "--json", "--out", str(tmp_path / "q"))
    assert len(dry["points"]) == 16 and {p["state"] for p in dry["points"]} == {"todo"}
    spec = tmp_path / "two.toml"
    spec.write_text('[sweep]\nname = "two"\n[fixed]\nnodes = 4\nseq = 1024\nchunk = 256\n[grid]\nscheme = ["mars", "ring"]\n')
    done = run_json(capsys, "sweep", str(spec), "--out", str(tmp_path / "two"), "--workers", "1", "--json")
    assert done["ok"] == 2 and done["ran"] == 2 and len(done["rows"]) == 2
    assert {r["scheme"] for r in done["rows"]} == {"mars", "ring"} and all(r["ttft_s"] > 0 for r in done["rows"])


def test_report(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["trace", "ring", "--nodes", "4", "--seq", "1024", "--chunk", "256", "-o", str(trace)]) == 0
    assert main(["replay", str(trace), "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    rep = run_json(capsys, "report", str(tmp_path / "r"), "-o", str(tmp_path / "rep.html"), "--json")
    assert rep["bytes"] == (tmp_path / "rep.html").stat().st_size and rep["figures"] > 0


def test_hw_check_serve_and_send_json(tmp_path):
    from emu.hw.netns import Lab, available

    why = available()
    if why is not None:
        pytest.skip(why)
    lab = Lab()
    try:
        dev, checker = lab.pair()
        srv = subprocess.Popen(dev.emu("hw", "serve", "--iface", dev.iface, "--node", "1", "--json"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert "ready" in srv.stderr.readline()
            chk = subprocess.run(checker.emu("hw", "check", "--iface", checker.iface, "--scenario", "all", "--node", "1",
                                             "--json", "--timeout", f"{HANG_S}s"), capture_output=True, text=True,
                                 timeout=HANG_S)
        finally:
            srv.terminate()
            out, _ = srv.communicate(timeout=HANG_S)
        assert chk.returncode == 0, chk.stderr
        res = json.loads(chk.stdout)
        ran = [r for r in res if "skipped" not in r]
        assert len(ran) == 7 and all(r["ok"] and not r["problems"] and r["received"] == len(r["expected"]) for r in ran)
        served = json.loads(out)
        assert served["node"] == 1 and served["counts"]["frames"] >= sum(sum(s["frames"] for s in r["sent"]) for r in ran)
        # send: the same counts the text line gives
        from emu.codec import encode_frames, fragment
        from emu.codec.pcap import CaptureWriter

        h, p = fragment(dict(op=1, src_node=0, dst_set=2, msg_id=1, kv_id=1), data=bytes(4000))
        buf, off = encode_frames(h, p)
        with CaptureWriter(tmp_path / "x.pcap") as w:
            w.write(buf, off, [0] * len(h))
        sent = subprocess.run(checker.emu("hw", "send", "--iface", checker.iface, "--pcap", str(tmp_path / "x.pcap"),
                                          "--json"), capture_output=True, text=True, timeout=HANG_S)
        s = json.loads(sent.stdout)
        assert sent.returncode == 0 and s["frames"] == len(h) and s["bytes"] == int(off[-1])
    finally:
        lab.close()
