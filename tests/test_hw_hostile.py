"""`emu hw serve` facing a hostile wire: no frame stops it, what it holds is bounded, probes
do not amplify. Offline on a fake socket here; test_hw_live runs one case on veth pairs."""

import numpy as np
import pytest

from emu.codec import Flags, Op, Reassembler, encode_frames, fragment
from emu.codec.fragment import FRAGMENT_COST, MESSAGE_COST, Limits
from emu.hw import check as C
from emu.hw import board as M
from emu.hw.serve import Device, ServeLimits

from test_hw import FakeSock, as_batch, play
from waits import HANG_S


def device(**limits) -> Device:
    return Device(M.Board(node=1), FakeSock(), limits=ServeLimits(**limits))


def send(d: Device, h, p=None, eth_src=0):
    d.handle(*encode_frames(h, p if p is not None else np.zeros(0, np.uint8), eth_src=eth_src))


def probe(src: int, msg_id: int, seq: int = 0):
    h, _ = fragment(M.control_meta(src, 1, Op.ack, msg_id=msg_id, seq=seq, probe=True), data=b"")
    return h


def one_fragment_of(src: int, msg_id: int, frag_cnt: int = 0xFFFF, size: int = 100):
    """Fragment 0 of a message announcing ``frag_cnt`` fragments (the rest never comes)."""
    h, p = fragment(dict(op=int(Op.kv_transfer), src_node=src, dst_set=1 << 1, msg_id=msg_id), data=b"x" * size)
    h["frag_cnt"] = frag_cnt
    h["msg_len"] = frag_cnt * size
    return h, p


def still_serves(d: Device) -> None:
    """After whatever came before, the device still answers a scenario exactly as the model."""
    sc = C.build("multicast", d.board, seed=3)
    got = play(sc, d)
    pairs, problems = C.compare(sc, got)
    assert problems == [], C.report(C.Result(sc, got, pairs, problems, 0, 0.0), "fake0")
    assert len(got) == len(sc.expected)


def test_a_source_outside_the_topology_is_rejected_not_fatal():
    d = device()
    h, p = fragment(dict(op=int(Op.kv_replica), src_node=999, dst_set=1 << 1, flags=int(Flags.ACK_REQ)), data=b"abc")
    send(d, h, p)
    send(d, probe(70, 5))
    assert d.rejected == {"unknown_source": 2}
    assert d.sock.frames == []
    still_serves(d)
    assert "rejected   unknown_source: 2" in d.summary()


def test_any_error_handling_a_frame_is_counted_and_the_next_frame_served(monkeypatch):
    d = device()

    def broken(*a, **k):
        raise ValueError("directory full")

    monkeypatch.setattr(d.directory, "add_replica", broken)
    h, p = fragment(dict(op=int(Op.kv_replica), src_node=0, dst_set=1 << 1), data=b"abc")
    send(d, h, p)
    assert d.rejected == {"error_ValueError": 1}
    monkeypatch.undo()
    still_serves(d)


def test_verbose_logs_each_rejected_frame():
    import io

    out = io.StringIO()
    d = Device(M.Board(node=1), FakeSock(), verbose=True, out=out)
    send(d, probe(70, 5))
    assert "rejected (unknown_source): src_node 70: no such board" in out.getvalue()


def test_incomplete_messages_are_bounded_by_count_oldest_evicted():
    d = device(partial_messages=16)
    for m in range(40):
        send(d, *one_fragment_of(0, m))
    assert d.reasm.incomplete == 16 and d.reasm.evicted == 24
    assert {p.msg_id for p in d.reasm.pending()} == set(range(24, 40))
    assert "24 evicted" in d.summary()
    still_serves(d)


def test_incomplete_messages_are_bounded_by_bytes():
    cost = 1000 + FRAGMENT_COST + MESSAGE_COST
    d = device(partial_bytes=5 * cost)
    for m in range(8):
        send(d, *one_fragment_of(0, m, size=1000))
    assert d.reasm.held_bytes == 5 * cost and d.reasm.incomplete == 5
    assert d.reasm.evicted == 3 and d.reasm.evicted_bytes == 3 * cost
    # a single message larger than the whole bound is dropped as it grows, never held
    r = Reassembler(Limits(bytes=MESSAGE_COST + 3 * (1000 + FRAGMENT_COST)))
    h, p = fragment(dict(op=int(Op.kv_transfer), src_node=0, dst_set=2, msg_id=1), data=b"y" * 5000, mtu=1048)
    for i in range(len(h)):
        r.add(h[i], p[i * 1000:(i + 1) * 1000])
    assert r.too_large == 1 and r.incomplete == 0 and r.held_bytes == 0


def test_incomplete_messages_expire():
    now = [0.0]
    r = Reassembler(Limits(age_s=5.0), clock=lambda: now[0])
    for m in range(3):
        h, p = one_fragment_of(0, m)
        r.add(h[0], p)
        now[0] += 2.0
    # born at 0, 2, 4; now 6: only the first is older than 5 s
    assert r.expire() == 1 and r.incomplete == 2 and r.expired == 1
    now[0] = 100.0
    assert r.expire() == 2 and r.incomplete == 0 and r.held_bytes == 0


def test_the_serve_loop_expires_what_never_completes():
    d = device(partial_age_s=0.05)
    now = [0.0]
    d.reasm.clock = lambda: now[0]

    def recv(timeout):  # nothing arrives; 0.1 s passes per look
        now[0] += 0.1
        return np.zeros(0, np.uint8), np.zeros(1, np.int64), None

    d.sock.recv = recv
    send(d, *one_fragment_of(0, 1))
    assert d.reasm.incomplete == 1
    d.run(stop=lambda: now[0] >= 0.3)
    assert d.reasm.incomplete == 0 and d.reasm.expired == 1


def test_a_probe_is_answered_once_per_message_per_rto():
    # the protocol answers a probe of one message at most once per rto_min (here 50 ms)
    now = [0]
    d = Device(M.Board(node=1), FakeSock(), protocol=M.protocol_config(rto_min_ps=50 * 10**9),
               clock=lambda: now[0])
    send(d, *one_fragment_of(0, 9, size=1452))  # 65535 fragments announced: the whole bitmap is 8 KiB
    for _ in range(5):
        send(d, probe(0, 9))
    answers = C.received(*as_batch(d.sock.frames), 1)
    # one nack of one frame: a window of the bitmap from the first missing fragment
    assert [int(g.header["op"]) for g in answers] == [Op.nack] and len(d.sock.frames[0]) <= 1514
    assert d.count["probes_answered"] == 1 and d.count["probes_limited"] == 4
    now[0] += 50 * 10**9
    d.sock.frames.clear()
    send(d, probe(0, 9))
    assert d.count["probes_answered"] == 2 and d.sock.frames


def test_a_probe_after_hundreds_of_huge_partial_messages_lists_only_its_own(monkeypatch):
    # Before the bounds, 4,000 partial 65,535-fragment messages made one probe take 36.9 s
    # (every probe listed every missing fragment of every message).
    d = Device(M.Board(node=1), FakeSock(), limits=ServeLimits(partial_messages=400),
               protocol=M.protocol_config(rto_min_ps=10**13), clock=lambda: 0)
    for m in range(400):
        send(d, *one_fragment_of(0, m))
    listed, real = [], d.reasm.pending_of
    monkeypatch.setattr(d.reasm, "pending", lambda: pytest.fail("a probe listed every held message"))
    monkeypatch.setattr(d.reasm, "pending_of", lambda s, m: listed.append((s, m)) or real(s, m))
    send(d, probe(0, 399))
    send(d, probe(0, 399))  # within rto_min: not answered, nothing listed
    assert listed == [(0, 399)]
    (first, *_) = C.received(*as_batch(d.sock.frames), 1)
    assert first.header["op"] == Op.nack and first.header["msg_id"] == 399


@pytest.mark.parametrize("seed", range(3))
def test_random_headers_never_stop_the_device(seed):
    """Valid-looking frames with every header field random: counted or served, never raised."""
    rng = np.random.default_rng(seed)
    d = device(partial_messages=64)
    for _ in range(300):
        h, p = fragment(dict(op=int(rng.integers(1, 12)), src_node=int(rng.integers(0, 2**16)),
                             dst_set=int(rng.integers(1, 2**16)), route_id=int(rng.integers(0, 3)),
                             msg_id=int(rng.integers(0, 8)), kv_id=int(rng.integers(0, 4)),
                             collective=int(rng.integers(0, 5)), reduce_op=int(rng.integers(0, 4)),
                             dtype=int(rng.integers(0, 3)),
                             flags=int(rng.choice([0, int(Flags.ACK_REQ), int(Flags.SYNTH)]))),
                        data=bytes(rng.integers(0, 256, int(rng.integers(0, 3000)), dtype=np.uint8)))
        try:
            encoded = encode_frames(h, p, eth_src=int(rng.integers(0, 4)))
        except Exception:  # noqa: BLE001 - the encoder refused the combination: not a frame
            continue
        d.handle(*encoded)
    assert d.reasm.incomplete <= 64
    d.sock.frames.clear()
    still_serves(d)


# ---------------------------------------------------------------- live, on a veth pair
def _hostile_capture(path) -> int:
    from emu.codec.pcap import CaptureWriter

    frames = []
    h, p = fragment(dict(op=int(Op.kv_replica), src_node=999, dst_set=1 << 1, flags=int(Flags.ACK_REQ)), data=b"abc")
    frames.append(encode_frames(h, p))
    frames.append(encode_frames(probe(70, 5), np.zeros(0, np.uint8)))
    for m in range(300):  # more partial messages than serve holds
        frames.append(encode_frames(*one_fragment_of(0, m)))
    with CaptureWriter(path) as w:
        for k, (buf, off) in enumerate(frames):
            w.write(buf, off, [k * 1000])
    return len(frames)


def test_live_serve_survives_hostile_frames_and_still_passes_check(tmp_path):
    from emu.hw.netns import Lab, available

    why = available()
    if why is not None:
        pytest.skip(why)
    from test_hw_live import Served, run

    n = _hostile_capture(tmp_path / "hostile.pcap")
    lab = Lab()
    try:
        dev, peer = lab.pair()
        srv = Served(dev.emu("hw", "serve", "--iface", dev.iface, "--node", "1", "--max-partial", "100",
                                 "--partial-timeout", "600s"), "ready")  # no expiry, however slow the machine
        try:
            sent = run(peer.emu("hw", "send", "--iface", peer.iface, "--pcap", str(tmp_path / "hostile.pcap")))
            assert sent.returncode == 0 and f"sent {n} frames" in sent.stdout, sent.stdout + sent.stderr
            ok = run(peer.emu("hw", "check", "--iface", peer.iface, "--scenario", "multicast", "--node", "1",
                              "--timeout", f"{HANG_S}s"))
        finally:
            out, err = srv.stop()
        assert srv.p.returncode == 0, err
        assert ok.returncode == 0 and "PASS" in ok.stdout, ok.stdout + ok.stderr
        assert "rejected   unknown_source: 2" in out
        import re

        evicted = int(re.search(r"([\d,]+) evicted", out)[1].replace(",", ""))
        assert evicted >= 200 and int(re.search(r"incomplete (\d+) messages", out)[1]) <= 100
    finally:
        lab.close()
