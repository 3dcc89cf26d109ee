"""`emu hw serve` flooded with probes over a veth pair (needs root).

The test plays every other board from a second namespace: it sends one fragment of each
of a few huge messages (65,535 fragments announced), then a burst of probes about them,
then a small complete message asking for an ack (the marker). Serve handles frames in
arrival order, so once the marker's ack is back every probe has been handled and every
answer has arrived. The peer counts what came back; the test asserts the promise: at most
one answer per message per rto_min (``answers <= messages * (1 + elapsed / rto_min)``),
each answer one frame, and fewer bytes out than in (an answer never costs more than
what the asking board has sent).

Run as a script (``python test_hw_flood.py peer IFACE SPEC``), this file is the peer.
"""

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from emu.codec import Flags, Op, encode_frames, fragment
from emu.hw.netns import Lab, available
from waits import HANG_S

why = available()
TIMEOUT = HANG_S  # the hang guard (tests/waits.py)
MARKER = 0xFFFFFFF0  # msg_id of the marker message
SRC, NODE = 0, 1     # the peer plays board 0; serve is board 1 of bring:4


def _frames(specs) -> list:
    """(buf, offsets) per group of frames: the partial messages, the probes, the marker."""
    from emu.hw import board as M

    partial = []
    for m in range(specs["messages"]):
        h, p = fragment(dict(op=int(Op.kv_transfer), src_node=SRC, dst_set=1 << NODE, msg_id=m,
                             flags=int(Flags.ACK_REQ)), data=b"x" * 100)
        h["frag_cnt"], h["msg_len"] = 0xFFFF, 0xFFFF * 100
        partial.append((h, p))
    probes = [fragment(M.control_meta(SRC, NODE, Op.ack, msg_id=m, probe=True), data=b"")[0]
              for _ in range(specs["rounds"]) for m in range(specs["messages"])]
    marker = fragment(dict(op=int(Op.kv_transfer), src_node=SRC, dst_set=1 << NODE, msg_id=MARKER,
                           flags=int(Flags.ACK_REQ)), data=b"m")
    cat = np.concatenate
    return [encode_frames(cat([h for h, _ in partial]), cat([p for _, p in partial])),
            encode_frames(cat(probes), np.zeros(0, np.uint8)),
            encode_frames(*marker)]


def peer(iface: str, specs: dict) -> dict:
    """Send the flood on ``iface`` and count what comes back until the marker's ack."""
    from emu.codec.batch import scan_frames
    from emu.hw.rawsock import RawSocket

    groups = _frames(specs)
    got = {"frames": 0, "bytes": 0, "nack_frames": 0, "answers": 0, "largest": 0}
    with RawSocket(iface, batch=1024) as sock:
        sock.send(*groups[0])
        t0 = time.monotonic()
        for buf, off in groups[1:]:
            sock.send(buf, off)
        deadline = t0 + TIMEOUT / 2  # a failure guard only: the marker's ack ends the wait
        done = False
        while not done:
            if time.monotonic() > deadline:
                raise SystemExit(f"no ack of the marker within {TIMEOUT / 2} s: {got}")
            buf, off, _ = sock.recv(timeout=1.0)
            if len(off) == 1:
                continue
            h, codes, _, _ = scan_frames(buf, off)
            sizes = np.diff(off)
            for i in range(len(h)):
                if h["msg_id"][i] == MARKER and h["op"][i] == Op.ack:
                    done = True
                    continue
                got["frames"] += 1
                got["bytes"] += int(sizes[i])
                got["largest"] = max(got["largest"], int(sizes[i]))
                if codes[i] == 0 and h["op"][i] == Op.nack:
                    got["nack_frames"] += 1
                    got["answers"] += int(h["frag_idx"][i]) == 0
                elif codes[i] == 0 and h["op"][i] == Op.ack:
                    got["answers"] += 1
        elapsed = time.monotonic() - t0
    sent = groups[1]
    return dict(got, elapsed=elapsed, probes=len(sent[1]) - 1, probe_bytes=int(sent[1][-1]),
                setup_bytes=int(groups[0][1][-1]))


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.skipif(why is not None, reason=why or "")
@pytest.mark.parametrize("messages, rounds, rto_min", [(1, 20_000, 600.0), (1, 20_000, None), (2_000, 2, 600.0)],
                         ids=["one-message-rto600s", "one-message-rto-default", "2000-messages-rto600s"])
def test_a_probe_flood_gets_one_answer_per_message_per_rto_min(messages, rounds, rto_min):
    from emu.hw import board as M

    from test_hw_live import Served

    lab = Lab(tag="srv" + __import__("secrets").token_hex(2))
    try:
        dev, far = lab.pair()
        opts = ["--max-partial", str(messages + 16)]
        if rto_min is not None:
            opts += ["--rto-min", f"{rto_min}s", "--rto-initial", f"{rto_min}s"]
        srv = Served(dev.emu("hw", "serve", "--iface", dev.iface, "--node", str(NODE), "--json", *opts), "ready",
                     "stderr")
        try:
            p = run(far.cmd(sys.executable, __file__, "peer", far.iface,
                            json.dumps(dict(messages=messages, rounds=rounds))))
        finally:
            out, err = srv.stop()
        assert p.returncode == 0, p.stdout + p.stderr
        assert srv.p.returncode == 0, err
    finally:
        lab.close()
    got = json.loads(p.stdout)
    counts = {k: 0 for k in ("probes_answered", "probes_limited", "probes_not_sender", "probes_over_budget")}
    counts.update(json.loads(out)["counts"])
    rto = rto_min if rto_min is not None else M.protocol_config().rto_min_ps / 1e12
    bytes_in = got["setup_bytes"] + got["probe_bytes"]
    print(f"\n{messages} messages x {rounds} probes ({got['probes']:,} probes, {got['probe_bytes']:,} bytes; "
          f"rto_min {rto:g} s): {got['answers']:,} answers in {got['frames']:,} frames, {got['bytes']:,} bytes "
          f"out for {bytes_in:,} in ({got['bytes'] / bytes_in:.2f}x; probes alone "
          f"{got['bytes'] / got['probe_bytes']:.2f}x), largest frame {got['largest']} bytes, "
          f"{got['elapsed']:.3f} s; serve: {counts['probes_answered']:,} answered, "
          f"{counts['probes_limited']:,} limited, {counts['probes_over_budget']:,} over budget")
    assert got["answers"] <= messages * (1 + got["elapsed"] / rto)
    assert got["answers"] == counts["probes_answered"] >= 1
    assert counts["probes_answered"] + counts["probes_limited"] + counts["probes_over_budget"] == got["probes"]
    assert got["nack_frames"] == got["answers"]          # a nack is one frame
    assert got["largest"] <= 1514
    assert got["bytes"] < bytes_in


if __name__ == "__main__" and sys.argv[1:2] == ["peer"]:
    print(json.dumps(peer(sys.argv[2], json.loads(sys.argv[3]))))
