"""The hardware path without a network: serve's NIC logic and check's scenarios, frame for frame.

The device (``emu.hw.serve.Device``) runs on a fake socket that records what it
sends; check's comparison (``emu.hw.check.compare``) judges it. Tests that need
real interfaces (namespaces, veth pairs, root) are in test_hw_live.py.
"""

import numpy as np
import pytest

from emu.codec import Collective, Dtype, Flags, Op, ReduceOp, Stage, encode_frames, fragment
from emu.hw import check as C
from emu.hw import board as M
from emu.hw.serve import Device
from emu.net import Network
from emu.nic import NicConfig
from pycluster import Cluster
from emu.nic import reduce as R
from emu.sim import Simulator
from emu.topology import Routes, build


class FakeSock:
    """What the device sends, frame by frame."""

    iface, mtu = "fake0", 1500

    def __init__(self):
        self.frames: list[bytes] = []

    def send(self, buf, offsets, start=0, stop=None):
        stop = len(offsets) - 1 if stop is None else stop
        for i in range(start, stop):
            self.frames.append(bytes(buf[offsets[i] : offsets[i + 1]]))
        return stop - start


def as_batch(frames: list[bytes]):
    offsets = np.concatenate([[0], np.cumsum([len(f) for f in frames])]).astype(np.int64)
    return np.frombuffer(b"".join(frames), np.uint8), offsets


def play(scenario: C.Scenario, device: Device) -> list[C.Got]:
    """Feed the scenario's frames to the device one message at a time; what it sent back."""
    sock = device.sock
    sock.frames.clear()
    for s in scenario.sends:
        buf, offsets = encode_frames(s.headers, s.payload, eth_src=s.eth_src)
        device.handle(buf, offsets)
    if not sock.frames:
        return []
    return C.received(*as_batch(sock.frames), scenario.board.node)


def device(board, **kw) -> Device:
    return Device(board, FakeSock(), **kw)


@pytest.mark.parametrize("topology,node", [("bring:4", 1), ("bring:4", 0), ("torus:2x4", 5), ("star:4", 2),
                                           ("mesh:2x3", 1)])
@pytest.mark.parametrize("name", list(C.SCENARIOS))
def test_serve_passes_every_scenario(topology, node, name):
    board = M.Board(node=node, topology=topology)
    try:
        sc = C.build(name, board, seed=3)
    except Exception as exc:  # a scenario the board cannot play (a leaf forwards nothing)
        assert name == "forward" and "relays no unicast route" in str(exc)
        return
    got = play(sc, device(board))
    pairs, problems = C.compare(sc, got)
    assert problems == [], C.report(C.Result(sc, got, pairs, problems, 0, 0.0), "fake0")
    assert len(got) == len(sc.expected)


def test_wrong_reduce_op_is_named_in_the_diff():
    board = M.Board(node=1)
    sc = C.build("reduce-merge", board, seed=1)
    got = play(sc, device(board, wrong_reduce_op=int(ReduceOp.sum)))
    pairs, problems = C.compare(sc, got)
    text = C.report(C.Result(sc, got, pairs, problems, 0, 0.0), "fake0")
    fields = {f for _, _, f, _ in problems}
    assert {"reduce_op", "payload"} <= fields
    assert "reduce_op: expected merge (3), got sum (2)" in text
    assert text.splitlines()[-1].startswith("FAIL:")


def test_diff_names_field_frame_and_value():
    board = M.Board(node=1)
    sc = C.build("reduce-max", board, seed=2)
    got = play(sc, device(board))
    # corrupt what came back: one header field, one value of the result
    i = next(k for k, g in enumerate(got) if g.header["op"] == Op.partial_state)
    got[i].header["kv_id"] += 1
    vals = np.frombuffer(got[i].payload, "<f4").copy()
    vals[3] += 1.0
    got[i].payload = vals.tobytes()
    _, problems = C.compare(sc, got)
    assert [(f, t.split(";")[0]) for _, _, f, t in problems if f == "kv_id"]
    pay = [t for _, _, f, t in problems if f == "payload"]
    assert pay and "1 of 363 values differ" in pay[0] and "value 3" in pay[0]


def test_missing_and_unexpected_frames_are_reported():
    board = M.Board(node=1)
    sc = C.build("multicast", board, seed=4)
    got = play(sc, device(board))
    _, problems = C.compare(sc, got[1:])
    assert [(i, j, f, t) for i, j, f, t in problems] == [(0, None, "frame", "missing: the device never sent it")]
    extra = C.Got(dict(got[0].header), got[0].payload, got[0].eth_dst, got[0].eth_src, 0.0)
    _, problems = C.compare(sc, got + [extra])
    assert [(i, f) for i, _, f, _ in problems] == [(None, "frame")]
    assert "unexpected: kv_replica n0#" in problems[0][3]
    # a frame that matches nothing by key is paired by position and diffed field by field
    odd = C.Got(dict(got[0].header, msg_id=got[0].header["msg_id"] + 1), got[0].payload, got[0].eth_dst,
                got[0].eth_src, 0.0)
    _, problems = C.compare(sc, [odd] + got[1:])
    assert [(i, f) for i, _, f, _ in problems] == [(0, "msg_id")]


def test_reduction_tree_is_the_nic_models():
    for spec in ("bring:4", "ring:5", "torus:2x4", "star:5", "fattree:4", "mesh:3x3"):
        G = build(spec)
        routes = Routes(G)
        c = Cluster(Network(Simulator(), G, routes.next_hop), routes, NicConfig(reliable=False))
        n = int(G.graph["boards"])
        for root in (0, n - 1):
            assert M.reduction_parents(G, routes, n, root, range(n)) == c.board_tree(root, range(n)), (spec, root)


def test_served_reduction_equals_the_emulated_one():
    """Boards 1 and 2 served, chained (2 -> 1 -> 0 on bring:4): node 1's message to the root is the emulator's."""
    heads, hd, dtype = 4, 16, Dtype.fp32
    rng = np.random.default_rng(5)
    states = {n: R.pack_state(*R.partial_attention(rng.standard_normal((heads, hd)), rng.standard_normal((7, heads, hd)),
                                                    rng.standard_normal((7, heads, hd))), dtype) for n in range(4)}
    # the emulator: node 1 and 2 contribute at once, the rest later
    G = build("bring:4")
    routes = Routes(G)
    c = Cluster(Network(Simulator(), G, routes.next_hop), routes, NicConfig(reliable=False))
    red = c.reduction(range(4), 0, ReduceOp.merge, nbytes=len(states[0]), dtype=dtype, heads=heads, head_dim=hd,
                      kv_id=9, layer=2)
    for n in range(4):
        c.sim.at(0 if n in (1, 2) else 10**9, red.contribute, n, states[n])
    c.net.run()
    want = next(tr for tr in c.transfers if tr.src == 1 and tr.meta["op"] == Op.partial_state)
    # the devices: the contributions of their compute engines over the wire; 2's result goes to 1
    d1, d2 = (device(M.Board(node=k, heads=heads)) for k in (1, 2))
    meta = dict(op=int(Op.partial_state), stage=int(Stage.decode), collective=int(Collective.reduce),
                reduce_op=int(ReduceOp.merge), dtype=int(dtype), kv_id=9, layer=2)
    for d, k in ((d1, 1), (d2, 2)):
        h, p = fragment(dict(meta, src_node=k, dst_set=1 << k), data=states[k])
        d.handle(*encode_frames(h, p))
    d1.handle(*as_batch(d2.sock.frames))
    got = C.received(*as_batch(d1.sock.frames), 1)
    assert [g.header["dst_set"] for g in got] == [1]
    assert got[0].payload == want.data
    for f in ("op", "stage", "collective", "reduce_op", "dtype", "kv_id", "layer", "src_node", "dst_set"):
        assert got[0].header[f] == want.meta[f], f


def test_probe_of_an_unknown_message_asks_for_everything():
    board = M.Board(node=1)
    d = device(board)
    probe, _ = fragment(M.control_meta(0, 1, Op.ack, msg_id=77, seq=5, probe=True), data=b"")
    d.handle(*encode_frames(probe, np.zeros(0, np.uint8)))
    (g,) = C.received(*as_batch(d.sock.frames), 1)
    assert g.header["op"] == Op.nack and g.header["msg_id"] == 77 and g.header["seq"] == 5 and g.payload == b""


def test_nack_makes_the_device_resend_the_named_fragments():
    board = M.Board(node=1, heads=2)
    d = device(board)
    key = (int(Stage.decode), 0, 5, int(Collective.reduce), int(ReduceOp.sum), int(Dtype.fp32))
    # a result of 2000 values (8000 bytes, 6 fragments) that asks for acks
    meta = dict(op=int(Op.partial_state), stage=key[0], collective=key[3], reduce_op=key[4], dtype=key[5], kv_id=5,
                dst_set=1 << 1, flags=int(Flags.ACK_REQ))
    for k in (1, 2):
        h, p = fragment(dict(meta, src_node=k), data=np.ones(2000, "<f4").tobytes())
        d.handle(*encode_frames(h, p, eth_src=k))
    sent = C.received(*as_batch(d.sock.frames), 1)
    result = [g for g in sent if g.header["op"] == Op.partial_state]
    assert len(result) == 6 and d.outgoing
    d.sock.frames.clear()
    nack, _ = fragment(M.control_meta(0, 1, Op.nack, msg_id=result[0].header["msg_id"]), data=M.nack_bitmap(6, [1, 4]))
    d.handle(*encode_frames(nack, M.nack_bitmap(6, [1, 4]), eth_src=0))
    again = C.received(*as_batch(d.sock.frames), 1)
    assert [g.header["frag_idx"] for g in again] == [1, 4]
    assert all(g.header["flags"] & Flags.RETX for g in again)
    assert [g.payload for g in again] == [result[1].payload, result[4].payload]
    ack, _ = fragment(M.control_meta(0, 1, Op.ack, msg_id=result[0].header["msg_id"]), data=b"")
    d.handle(*encode_frames(ack, np.zeros(0, np.uint8), eth_src=0))
    assert not d.outgoing


def test_forwarding_needs_the_upstream_board_and_ttl():
    board = M.Board(node=1)  # bring:4: 0 -> 1 -> 2
    d = device(board)
    h, p = fragment(dict(op=int(Op.kv_transfer), src_node=0, dst_set=1 << 2, ttl=2), data=b"x" * 100)
    d.handle(*encode_frames(h, p, eth_src=3))  # heard from board 3: not on the route, not forwarded
    assert d.sock.frames == []
    d.handle(*encode_frames(h, p, eth_src=0))
    (g,) = C.received(*as_batch(d.sock.frames), 1)
    assert g.header["ttl"] == 1 and g.payload == b"x" * 100
    h["ttl"] = 1
    d.sock.frames.clear()
    d.handle(*encode_frames(h, p, eth_src=0))
    assert d.sock.frames == [] and d.count["ttl_expired"] == 1


def test_directory_follows_replica_drain_invalidate():
    board = M.Board(node=1)
    d = device(board)
    sc = C.build("invalidate", board, seed=8)
    states = []
    for s in sc.sends:
        d.handle(*encode_frames(s.headers, s.payload, eth_src=s.eth_src))
        states.append(d.directory.state(1, sc.sends[0].headers[0]["kv_id"]).name)
    assert states == ["VALID", "DRAINING", "INVALID"]
    assert not d.errors


def test_malformed_frames_are_counted_by_reason():
    d = device(M.Board(node=1))
    h, p = fragment(dict(op=int(Op.kv_replica), src_node=0, dst_set=2), data=b"abc")
    buf, offsets = encode_frames(h, p)
    bad = buf.copy()
    bad[14 + 3] = 77  # op
    d.handle(bad, offsets)
    assert d.malformed == {"op": 1}
    assert d.sock.frames == []


def test_nack_bitmap_round_trip():
    for cnt, missing in ((1, [0]), (9, [0, 8]), (16, list(range(16))), (20, [3, 17])):
        assert M.missing_of(M.nack_bitmap(cnt, missing)) == missing


def test_cli_parses_durations_and_groups():
    from emu.commands.hw import _groups, seconds

    assert seconds("2", "t") == 2.0 and seconds("500ms", "t") == 0.5 and seconds("1.5s", "t") == 1.5
    assert _groups(["7=0,2-3", "9=1"]) == {7: (0, 2, 3), 9: (1,)}
    with pytest.raises(Exception, match="expected ID=BOARDS"):
        _groups(["x"])


def test_board_rejects_what_it_cannot_be():
    with pytest.raises(Exception, match="boards 0..3"):
        M.Board(node=4)
    with pytest.raises(Exception, match="mtu"):
        M.Board(node=1, mtu=40)


def _capture(path, n=200, size=1000, gap_ns=500_000):
    from emu.codec import CaptureWriter, new_headers

    h = new_headers(n, op=int(Op.kv_transfer), src_node=0, dst_set=2, msg_len=size, pay_len=size)
    h["msg_id"] = np.arange(n)
    buf, off = encode_frames(h, np.zeros(n * size, np.uint8))
    with CaptureWriter(path) as w:
        w.write(buf, off, np.arange(n, dtype=np.int64) * gap_ns)
    return buf, off


class VirtualClock:
    """The send module's clock, in virtual time: a sleep advances it exactly, each reading by
    1 us (the cost of looking), a slow device by what it says; no schedule depends on the host."""

    def __init__(self):
        self.ns = 0

    def perf_counter_ns(self) -> int:
        self.ns += 1_000
        return self.ns

    def sleep(self, s: float) -> None:
        self.ns += int(s * 1e9)


class ClockedSock(FakeSock):
    """Records the virtual time each frame left at."""

    def __init__(self, clock: VirtualClock, cost_ns: int = 0):
        super().__init__()
        self.clock, self.cost_ns, self.left = clock, cost_ns, []

    def send(self, buf, offsets, start=0, stop=None):
        self.clock.ns += self.cost_ns
        n = super().send(buf, offsets, start, stop)
        self.left += [self.clock.ns] * n
        return n


def test_send_paces_by_rate_and_by_original_timing(tmp_path, monkeypatch):
    from emu.hw import send as S

    clock = VirtualClock()
    monkeypatch.setattr(S, "time", clock)
    path = tmp_path / "f.pcap"
    _capture(path)  # 200 frames of 1062 bytes, 0.5 ms apart: 99.5 ms
    for kw, gap_ns in (({"rate_bps": 20_000_000}, (1062 + 24) * 8 * 50),  # 434.4 us each at 20 Mbit/s
                       ({"original": True}, 500_000)):
        sock = ClockedSock(clock)
        t0 = clock.ns
        st = S.send(sock, path, **kw)
        left = np.array(sock.left) - t0
        due = np.arange(200) * gap_ns
        # no frame leaves before its time, none much after (virtual time: exact on any host)
        assert st.frames == 200 and st.scheduled_ns == due[-1] and not st.behind
        assert (left >= due).all() and (left - due < 200_000).all()
        assert due[-1] <= st.elapsed * 1e9 < due[-1] + 200_000
    sock = FakeSock()
    st = S.send(sock, path, count=450)  # cycles through the capture
    assert st.frames == 450 and sock.frames[200:400] == sock.frames[:200] and len(sock.frames) == 450


def test_send_pads_headers_only_records_and_refuses_other_ethertypes(tmp_path):
    from emu.codec import CaptureWriter
    from emu.hw import send as S

    buf, off = _capture(tmp_path / "full.pcap", n=3, size=100)
    with CaptureWriter(tmp_path / "hdr.pcap", snaplen=62) as w:
        w.write(buf, off, np.zeros(3, np.int64))
    sv = S.survey(tmp_path / "hdr.pcap")
    assert (sv.frames, sv.largest, sv.malformed) == (3, 162, 0)
    sock = FakeSock()
    S.send(sock, tmp_path / "hdr.pcap")
    assert [len(f) for f in sock.frames] == [162] * 3 and sock.frames[0][:62] == bytes(buf[:62])
    assert sock.frames[0][62:] == bytes(100)
    other = buf.copy()
    other[12:14] = (0x08, 0x00)
    with CaptureWriter(tmp_path / "ip.pcap") as w:
        w.write(other, off, np.zeros(3, np.int64))
    with pytest.raises(Exception, match="EtherType 0x0800, not an MCF frame"):
        S.survey(tmp_path / "ip.pcap")


def test_a_paced_send_that_falls_behind_says_so_on_its_human_line(tmp_path, monkeypatch):
    """A device slower than the pace asked (each send call takes 5 ms; the schedule wants the
    200 frames in 0.87 ms at 2 Gbit/s): the human line says how far behind, not only --json."""
    from emu.hw import send as S

    clock = VirtualClock()
    monkeypatch.setattr(S, "time", clock)
    path = tmp_path / "f.pcap"
    _capture(path)
    st = S.send(ClockedSock(clock, cost_ns=5_000_000), path, rate_bps=2_000_000_000)
    # two calls (the first frame is due at once, the rest after it): >= 10 ms for < 1 ms
    assert st.frames == 200 and st.behind and st.late_ns > 9_000_000 and st.scheduled_ns < 1_000_000
    assert "BEHIND SCHEDULE" in st.line() and f"{st.scheduled_ns / 1e9:.3f} s schedule" in st.line()
    fast = S.send(FakeSock(), path)  # unpaced: no schedule to be behind
    assert not fast.behind and "BEHIND" not in fast.line()


def test_serve_loads_what_a_first_frame_needs_before_it_says_ready(monkeypatch, capsys):
    """Every check scenario's frames go through a throwaway device before `ready` (the first
    check against a fresh serve was answered 0.8-5.9 s late while serve loaded its code)."""
    import emu.hw.rawsock as rawsock
    import emu.hw.serve as serve_mod
    from emu.cli import main

    events = []

    class Quiet:
        iface, mtu = "fake0", 1500

        def __init__(self, *a, **k):
            pass

        def recv(self, timeout=None):
            return np.zeros(0, np.uint8), np.zeros(1, np.int64), None

        def close(self):
            pass

        def __enter__(self):
            events.append(("ready" in capsys.readouterr().out) and "ready printed")
            return self

        def __exit__(self, *exc):
            return False

    real = serve_mod.warm_up
    monkeypatch.setattr(serve_mod, "warm_up", lambda *a, **k: events.append(("warm", real(*a, **k))))
    monkeypatch.setattr(rawsock, "RawSocket", Quiet)
    assert main(["hw", "serve", "--iface", "fake0", "--node", "1", "--duration", "0.01"]) == 0
    assert events[0][0] == "warm" and events[0][1] > 0 and events[1] == "ready printed"
