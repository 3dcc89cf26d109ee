"""How `emu hw serve` answers probes: once per message per rto_min on the time its batch was
read, only to the station the message's fragments came from, with one frame at most, never
with more bytes than the asking board sent, and a nack window the sender pages through.
Offline on a fake socket with an injected clock; test_hw_flood floods a served board on a
veth pair."""

import numpy as np

from emu.codec import Flags, Op, decode_frames, encode_frames, fragment
from emu.codec.fragment import max_payload
from emu.hw import board as M
from emu.hw.serve import Device, ServeLimits, nack_whole, nack_window

from test_hw import FakeSock, as_batch

RTO = 50 * 10**9  # ps


def device(node: int = 1, now=None) -> tuple[Device, list]:
    now = [0] if now is None else now
    cfg = M.protocol_config(rto_min_ps=RTO, rto_initial_ps=RTO)
    return Device(M.Board(node=node), FakeSock(), protocol=cfg, clock=lambda: now[0],
                  limits=ServeLimits(partial_age_s=1e9)), now


def send(d: Device, h, p=None, eth_src=None):
    d.handle(*encode_frames(h, p if p is not None else np.zeros(0, np.uint8), eth_src=eth_src))


def probe(src: int, msg_id: int, seq: int = 0, to: int = 1):
    return fragment(M.control_meta(src, to, Op.ack, msg_id=msg_id, seq=seq, probe=True), data=b"")[0]


def huge(src: int = 0, msg_id: int = 9, have=range(10), frag_cnt: int = 0xFFFF):
    """Fragments ``have`` of a message of ``frag_cnt`` full fragments (seq from 1000)."""
    per = max_payload(1500)
    h, p = fragment(dict(op=int(Op.kv_transfer), src_node=src, dst_set=1 << 1, msg_id=msg_id, seq=1000,
                         flags=int(Flags.ACK_REQ)), data=b"x" * per * len(have))
    h["frag_cnt"], h["msg_len"] = frag_cnt, frag_cnt * per
    h["frag_idx"] = list(have)
    h["offset"] = [i * per for i in have]
    h["seq"] = [1000 + i for i in have]
    return h, p


def answers(d: Device):
    f = decode_frames(*as_batch(d.sock.frames))
    return f.headers, [bytes(x) for x in f.payloads()]


def test_a_probe_burst_read_in_one_batch_gets_one_answer_and_the_next_after_rto_min():
    d, now = device()
    send(d, *huge())
    send(d, np.concatenate([probe(0, 9, 1000)] * 500))  # one batch: one instant
    assert d.count["probes_answered"] == 1 and d.count["probes_limited"] == 499
    for t in (RTO - 1, RTO):
        now[0] = t
        send(d, probe(0, 9, 1000))
    # answered at 0, limited at RTO - 1, answered again at RTO
    assert d.count["probes_answered"] == 2 and d.count["probes_limited"] == 500
    assert "500 probes not answered again within the RTO" in d.summary()


def test_the_time_of_a_probe_is_when_its_batch_was_read():
    """Answering takes time; a clock read per frame would let a burst through one answer at a
    time. Here every reading of the clock is rto_min later than the one before."""
    t = [0]

    def clock():
        t[0] += RTO
        return t[0]

    d = Device(M.Board(node=1), FakeSock(), protocol=M.protocol_config(rto_min_ps=RTO), clock=clock)
    send(d, *huge())
    send(d, np.concatenate([probe(0, 9, 1000)] * 500))
    assert d.count["probes_answered"] == 1 and d.count["probes_limited"] == 499


def test_a_nack_is_one_frame_from_the_first_missing_fragment_and_names_exactly_what_is_missing():
    d, _ = device()
    send(d, *huge(have=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 20]))
    send(d, probe(0, 9, 1000))
    (h,), (bitmap,) = answers(d)
    assert h["op"] == Op.nack and h["frag_cnt"] == 1 and len(bitmap) == max_payload(1500)
    base = int(h["seq"]) - 1000
    assert base == 8  # the byte holding fragment 10, the first missing
    named = base + np.flatnonzero(np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little"))
    want = [i for i in range(8, 8 + 8 * len(bitmap)) if i not in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 20)]
    assert named.tolist() == want


def test_a_small_message_gets_the_whole_bitmap_as_the_emulator_sends_it():
    d, _ = device()
    send(d, *huge(have=[0, 2], frag_cnt=3))
    send(d, probe(0, 9, 1000))
    (h,), (bitmap,) = answers(d)
    assert int(h["seq"]) == 1000 and bitmap == bytes([0b010])


def test_nack_window_and_nack_whole_are_inverse():
    rng = np.random.default_rng(1)
    for n in (1, 7, 8, 9, 100, 20_000, 65_535):
        missing = np.flatnonzero(rng.random(n) < 0.01)
        full = M.nack_bitmap(n, missing.tolist()) if len(missing) else bytes((n + 7) // 8)
        base, part = nack_window(full, 64)
        assert len(part) <= 64 and base % 8 == 0
        whole = nack_whole(part, base)
        # the window names exactly the missing fragments it covers
        cover = range(base, min(n, base + 8 * len(part)))
        got = [i for i in cover if whole[i >> 3] >> (i & 7) & 1]
        assert got == [i for i in missing.tolist() if i in cover]
        if len(missing):
            assert got and got[0] == missing[0]


def test_a_probe_from_another_station_than_the_fragments_gets_no_answer():
    d, _ = device()
    send(d, *huge(), eth_src=0)
    send(d, probe(0, 9, 1000), eth_src=3)  # board 3 asking about board 0's message
    assert d.sock.frames == [] and d.count["probes_not_sender"] == 1
    send(d, probe(0, 9, 1000), eth_src=0)
    assert d.count["probes_answered"] == 1 and len(d.sock.frames) == 1
    # the same for a completed message
    d.sock.frames.clear()
    h, p = fragment(dict(op=int(Op.kv_transfer), src_node=2, dst_set=1 << 1, msg_id=4, flags=int(Flags.ACK_REQ)),
                    data=b"abc")
    send(d, h, p, eth_src=2)
    d.sock.frames.clear()
    send(d, probe(2, 4), eth_src=0)
    assert d.sock.frames == [] and d.count["probes_not_sender"] == 2
    assert "2 probes not from the message's sender" in d.summary()


def test_answers_never_cost_more_bytes_than_the_board_sent_here():
    """A fragment of 62 bytes announcing 65,535 (timing mode, no payload), then probes, each
    a while apart: every answer is paid for by what board 0 sent."""
    d, now = device()
    h, _ = huge(have=[0])
    h["flags"] |= np.uint8(Flags.SYNTH)
    h["pay_len"] = 0
    send(d, h)
    sent_in = 62
    for k in range(20):
        now[0] = k * RTO
        send(d, probe(0, 9, 1000))
        sent_in += 62
    out = sum(len(f) for f in d.sock.frames)
    assert out <= sent_in and d.count["probes_answered"] >= 1
    assert d.count["probes_answered"] + d.count["probes_over_budget"] == 20


def test_a_sender_pages_through_a_huge_message_one_window_per_probe():
    """Board 0 (serve) sends a 30,000-fragment message to board 1 (serve); 40 fragments spread
    over it are lost. Each probe's nack names one window (1452 bytes: 11,616 fragments);
    board 0 resends what it names, and the message completes in 3 windows."""
    a, now = device(node=0)
    b, _ = device(now=now)
    per = max_payload(1500)
    mid = a.originate(dict(op=int(Op.kv_transfer), src_node=0, dst_set=1 << 1, flags=int(Flags.ACK_REQ)),
                      b"y" * (30_000 * per), waiting={1})
    lost = set(range(0, 30_000, 750))
    b.handle(*as_batch([f for i, f in enumerate(a.sock.frames) if i not in lost]))
    a.sock.frames.clear()
    t, windows = 0, 0
    while a.outgoing:
        t = a.timers[0][0]
        now[0] = t
        a._run_timers()          # the timer: a probe
        b.handle(*as_batch(a.sock.frames))
        a.sock.frames.clear()
        h, _ = answers(b)
        windows += int((h["op"] == Op.nack).sum())
        a.handle(*as_batch(b.sock.frames))   # the nack: a resend of what it names
        b.sock.frames.clear()
        b.handle(*as_batch(a.sock.frames))   # the resend; once complete, b's ack
        a.sock.frames.clear()
        a.handle(*as_batch(b.sock.frames))
        b.sock.frames.clear()
        assert windows <= 3 and not a.errors
    assert windows == 3 and a.count["retransmitted"] == len(lost) and b.delivered["kv_transfer"] == 1
    assert mid not in a.outgoing


def test_a_nack_naming_fragments_past_the_message_is_rejected():
    a, _ = device(node=0)
    mid = a.originate(dict(op=int(Op.kv_transfer), src_node=0, dst_set=1 << 1, flags=int(Flags.ACK_REQ)),
                      b"z" * 3000, waiting={1})
    first = int(a.outgoing[mid].headers[0]["seq"])
    a.sock.frames.clear()
    nack, _ = fragment(M.control_meta(1, 0, Op.nack, msg_id=mid, seq=first + 10**6), data=b"\xff")
    send(a, nack, np.frombuffer(b"\xff", np.uint8), eth_src=1)
    assert a.rejected == {"nack_outside_message": 1} and a.sock.frames == []
