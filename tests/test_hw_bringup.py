"""The bring-up kit on veth pairs in namespaces the tests make (needs root): the golden diff of a trace
against `emu hw serve` (and a serve with one rule broken), calibration of an injected delay, a check
that stops at the first wrong frame, and `emu hw bringup`'s report."""

import json
import re
import subprocess
import sys

import pytest

from emu.codec import capdiff
from emu.hw.netns import available
from test_hw_live import Served, lab, run  # noqa: F401 - the namespace fixture
from waits import HANG_S

why = available()
pytestmark = pytest.mark.skipif(why is not None, reason=why or "")
TOPOLOGY = "ring:4"  # board 1 relays between 0 and 2: forwarded copies and acks to compare


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "small.json"
    r = subprocess.run([sys.executable, "-m", "emu", "trace", "mars", "--seq", "512", "--nodes", "4", "--chunk", "256",
                        "--set", "model.layers=1", "-o", str(path)], capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    return path


def serve(end, *extra):
    return Served(end.emu("hw", "serve", "--iface", end.iface, "--node", "1", "--topology", TOPOLOGY, *extra),
                  "ready")


def golden(end, trace, out, *extra):
    return run(end.emu("hw", "send", "--iface", end.iface, str(trace), "--to", "1", "--topology", TOPOLOGY,
                       "--out", str(out), "--timeout", f"{HANG_S}s", *extra))


def test_golden_diff_passes_against_serve_and_names_the_frames_of_a_broken_rule(lab, trace, tmp_path):
    dev, checker = lab.pair()
    srv = serve(dev)
    try:
        ok = golden(checker, trace, tmp_path / "ok", "--json")
    finally:
        srv.stop()
    assert ok.returncode == 0, ok.stdout + ok.stderr
    out = json.loads(ok.stdout)
    assert out["ok"] and out["expected"] == out["received"] > 0
    assert not out["diff"]["missing"] and not out["diff"]["extra"] and not out["diff"]["differing"]
    for name in ("inbound", "expected", "got", "board"):
        assert (tmp_path / "ok" / f"{name}.pcap").is_file()

    bad = serve(dev, "--break-rule", "ttl")
    try:
        fail = golden(checker, trace, tmp_path / "bad")
    finally:
        bad.stop()
    assert fail.returncode == 1, fail.stdout + fail.stderr
    # the frames that must differ: every forwarded copy (another board's frame), in Wireshark's numbers
    exp = capdiff.load(tmp_path / "bad" / "expected.pcap")
    forwarded = (exp.number[exp.headers["src_node"] != 1]).tolist()
    assert forwarded
    named = [int(line.split()[1]) for line in fail.stdout.splitlines() if "ttl expected" in line]
    assert named and named == forwarded[: len(named)]
    first = forwarded[0]
    ttl = int(exp.headers["ttl"][exp.number == first][0])
    assert f"frame {first} (" in fail.stdout and f"ttl expected {ttl}, got {ttl + 1}" in fail.stdout
    assert fail.stdout.rstrip().splitlines()[-2].startswith("FAIL:")


def test_calibration_recovers_an_injected_delay_within_5_percent(lab, trace, tmp_path):
    delay_us = 50_000
    dev, checker = lab.pair()
    srv = serve(dev, "--delay-us", str(delay_us))
    try:
        r = golden(checker, trace, tmp_path / "run", "--rate", "10Mbps")  # paced: the board keeps up
    finally:
        srv.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    prof = tmp_path / "measured.toml"
    cal = run([sys.executable, "-m", "emu", "calibrate", str(tmp_path / "run" / "board.pcap"), "-o", str(prof), "--json"])
    assert cal.returncode == 0, cal.stderr
    est = json.loads(cal.stdout)
    lat = est["forwarding_latency"]
    assert est["node"] == 1 and lat["samples"] > 10
    assert abs(lat["median"] / 1e6 - delay_us) <= 0.05 * delay_us, lat
    assert lat["ci95"][0] <= lat["median"] <= lat["ci95"][1]
    # the profile loads as a shipped one does, with the measured latency
    from emu.workload.profiles import load

    hw = load("hw", str(prof))
    assert hw["nic_latency_ps"] == round(lat["median"])
    assert hw["link_rate"] == load("hw", "kr260")["link_rate"]


def test_a_check_stops_at_the_first_frame_that_proves_it_wrong(lab):
    """The board acks the wrong message: the expected ack never comes, so only a frame that proves the
    answer wrong can end the wait before its timeout."""
    dev, checker = lab.pair()
    bad = Served(dev.emu("hw", "serve", "--iface", dev.iface, "--node", "1", "--break-rule", "ack-msg-id"), "FAULT")
    try:
        # a timeout past the hang guard: waiting it out would fail the test (run's own limit)
        fail = run(checker.emu("hw", "check", "--iface", checker.iface, "--scenario", "reduce-sum",
                               "--timeout", f"{2 * HANG_S}s"))
    finally:
        bad.stop()
    assert fail.returncode == 1, fail.stdout + fail.stderr
    m = re.search(r"\(ack of n2#(\d+) to node 2\): msg_id: expected (\d+), got (\d+)", fail.stdout)
    assert m and int(m[1]) == int(m[2]) and int(m[3]) == int(m[2]) + 1, fail.stdout


def test_bringup_writes_one_json_and_one_self_contained_html_report_with_a_verdict_per_step(lab, tmp_path):
    dev, checker = lab.pair()
    reports = {}
    for name, extra in (("good", ()), ("broken", ("--break-rule", "ttl"))):
        srv = Served(dev.emu("hw", "serve", "--iface", dev.iface, "--node", "1", *extra), "ready")
        try:
            r = run(checker.emu("hw", "bringup", checker.iface, "--node", "1", "--report", str(tmp_path / name),
                                "--listen", "100ms", "--frames", "20", "--timeout", f"{HANG_S}s"))
        finally:
            srv.stop()
        reports[name] = (r, json.loads((tmp_path / f"{name}.json").read_text()),
                         (tmp_path / f"{name}.html").read_text())
    r, rep, page = reports["good"]
    assert r.returncode == 0, r.stdout + r.stderr
    steps = [s["step"] for s in rep["steps"]]
    assert steps[0] == "listen" and steps[-1] == "golden" and "loss" in steps
    assert sum(s.startswith("check ") for s in steps) == 7 and sum(s.startswith("rate ") for s in steps) == 3
    assert rep["ok"] and {s["result"] for s in rep["steps"]} == {"pass"}
    assert "PASS" in page and "<script" not in page and "http" not in page and " src=" not in page
    r, rep, page = reports["broken"]
    assert r.returncode == 1, r.stdout + r.stderr
    result = {s["step"]: s["result"] for s in rep["steps"]}
    # forwarded copies carry the wrong ttl; the reductions and the probe answers are still right
    assert result["check forward"] == result["check multicast"] == result["golden"] == "fail"
    assert result["check reduce-merge"] == result["check probe"] == result["listen"] == "pass"
    assert "FAIL" in page and page.count('class="fail"') == rep["failed"]
    assert r.stdout.rstrip().splitlines()[-1].startswith("FAIL:")


def test_bringup_against_a_silent_port_reports_every_step_failed_and_still_writes_the_report(lab, tmp_path):
    _, checker = lab.pair()  # nothing serves at the other end: nothing can ever answer, however long we wait
    r = run(checker.emu("hw", "bringup", checker.iface, "--node", "1", "--report", str(tmp_path / "r"),
                        "--listen", "10ms", "--frames", "4", "--rates", "10Mbps", "--timeout", "100ms"))
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    result = {s["step"]: s for s in rep["steps"]}
    assert result["listen"]["result"] == "pass"  # a silent board says nothing wrong
    assert result["check forward"]["result"] == "fail" and "sent nothing back" in result["check forward"]["summary"]
    assert result["rate 10Mbps"]["result"] == result["loss"]["result"] == result["golden"]["result"] == "fail"
    assert "0 of 4 forwarded back, 4 lost" in result["loss"]["summary"]
    assert (tmp_path / "r.html").is_file()
