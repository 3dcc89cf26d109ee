"""emu calibrate on captures whose timings are known: each estimate comes back exactly, with its interval."""

import json

import numpy as np
import pytest

from emu.cli import main
from emu.codec import CaptureWriter, Collective, Flags, Op, encode_frames, fragment
from emu.net.ethernet import MIN_FRAME, WIRE_OVERHEAD

US = 1000  # ns


def message(op, src, dst, msg_id, size, **kw):
    h, _ = fragment(dict(op=int(op), src_node=src, dst_set=1 << dst, msg_id=msg_id, flags=int(Flags.SYNTH), **kw),
                    size)
    return h


def write(path, frames):
    """frames: (time ns, header rows, transmitting board) in any order."""
    frames = sorted(frames, key=lambda f: f[0])
    with CaptureWriter(path) as w:
        for t, h, by in frames:
            buf, off = encode_frames(h, eth_src=np.full(len(h), by))
            w.write(buf, off, np.full(len(h), t, np.int64))


def paced_capture(path, latency_us=100, ack_us=30, reduce_us=250):
    """Board 1 relays 0 -> 2 (a frame every 1 ms, out `latency_us` later), acks 0's messages to it, and
    sends its reduction result to 0 `reduce_us` after board 2's contribution."""
    frames = []
    for m in range(10):
        t = m * 1_000 * US
        h = message(Op.kv_transfer, 0, 2, m, 1000)
        frames += [(t, h, 0), (t + latency_us * US, h, 1)]
        mine = message(Op.kv_replica, 0, 1, 100 + m, 3000)
        for i in range(len(mine)):
            frames.append((t + 200 * US + i * 10 * US, mine[[i]], 0))
        last = t + 200 * US + (len(mine) - 1) * 10 * US
        ack = message(Op.ack, 1, 0, 100 + m, 0)
        frames.append((last + ack_us * US, ack, 1))
        contrib = message(Op.partial_state, 2, 1, 200 + m, 800, kv_id=m, layer=3,
                          collective=int(Collective.reduce))
        frames.append((t + 500 * US, contrib, 2))
        result = message(Op.partial_state, 1, 0, 300 + m, 800, kv_id=m, layer=3, collective=int(Collective.reduce))
        frames.append((t + 500 * US + reduce_us * US, result, 1))
    write(path, frames)


def test_latencies_come_back_exactly_and_the_profile_takes_them(tmp_path, capsys):
    paced_capture(tmp_path / "b.pcap")
    prof = tmp_path / "p.toml"
    assert main(["calibrate", str(tmp_path / "b.pcap"), "--node", "1", "-o", str(prof), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for name, us in (("forwarding_latency", 100), ("ack_turnaround", 30), ("reduction_latency", 250)):
        est = out[name]
        assert est["samples"] == 10 and est["median"] == us * 1e6 and est["ci95"] == [us * 1e6, us * 1e6], name
    assert out["datapath_rate"]["median"] is None and "kept up" in out["datapath_rate"]["note"]
    from emu.workload.profiles import load

    hw = load("hw", str(prof))
    assert hw["nic_latency_ps"] == 100_000_000 and hw["nic_rate"] == load("hw", "kr260")["nic_rate"]
    text = prof.read_text()
    assert "ack turnaround: 30us" in text and "reduction latency: 250us" in text
    # the same capture gives the same figures (the bootstrap's seed is fixed)
    assert main(["calibrate", str(tmp_path / "b.pcap"), "--node", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {**out, "profile": None}


def test_the_rate_is_the_boards_pace_when_it_falls_behind_its_sender(tmp_path, capsys):
    frames = []
    for m in range(30):  # in every 2 us, out every 12 us: the board sets the pace
        h = message(Op.kv_transfer, 0, 2, m, 1400)
        frames += [(m * 2 * US, h, 0), (50 * US + m * 12 * US, h, 1)]
    write(tmp_path / "burst.pcap", frames)
    assert main(["calibrate", str(tmp_path / "burst.pcap"), "--node", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    wire = max(14 + 48 + 1400, MIN_FRAME) + WIRE_OVERHEAD
    assert out["datapath_rate"]["median"] == pytest.approx(wire * 8 / 12e-6)
    assert out["datapath_rate"]["samples"] == 29


def test_a_capture_of_one_side_is_refused(tmp_path, capsys):
    frames = [(m * 1000, message(Op.kv_transfer, 0, 1, m, 100), 0) for m in range(3)]
    write(tmp_path / "one.pcap", frames)
    assert main(["calibrate", str(tmp_path / "one.pcap"), "-o", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert "one.pcap" in err and "both sides" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.toml").exists()
