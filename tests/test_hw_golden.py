"""The golden diff's plan (emu.hw.golden.plan): what board K is sent and what it must send back, from the
emulator's own replay of a trace (no sockets: the live runs are in test_hw_bringup.py)."""

import pytest

from emu.api import trace
from emu.codec import Flags, Op
from emu.codec.batch import scan_frames
from emu.errors import ConfigError
from emu.hw import golden as G

@pytest.fixture(scope="module")
def small():
    return trace("mars", seq=512, nodes=4, chunk=256, set=["model.layers=1"])

def rows(f):
    h, codes, _, raw = scan_frames(f.buf, f.offsets)
    assert not codes.any()
    return h, raw

def test_board_k_is_sent_its_inbound_frames_and_must_return_forwards_and_acks_once_each(small):
    p = G.plan(small, 1, topology="ring:4")
    assert p.topology == "ring4" and len(p.inbound) and len(p.expected) and p.skipped_own
    h, raw = rows(p.inbound)
    assert (raw[:, 0:6] == G.board_mac(1)).all()           # addressed to board 1 (the hop's receiver)
    assert not (raw[:, 6:12] == G.board_mac(1)).all(axis=1).any()
    assert set(h["src_node"].tolist()) - {1}                # other boards' frames, relayed or not
    e, eraw = rows(p.expected)
    assert (eraw[:, 6:12] == G.board_mac(1)).all()          # what board 1 transmits
    mine = e["src_node"] == 1
    assert mine.any() and (~mine).any()                      # its acks, and copies it forwards
    assert set(e["op"][mine].tolist()) <= {int(Op.ack), int(Op.nack)}
    assert not (e["flags"][mine] & Flags.ACK_REQ).any()      # its own probes are not answers
    names = list(zip(*(e[k].tolist() for k in ("op", "src_node", "msg_id", "frag_idx"))))
    full = list(zip(*(e[k].tolist() for k in ("op", "src_node", "dst_set", "msg_id", "frag_idx"))))
    assert len(full) == len(set(full))                       # once per name: one interface is every port
    # every frame board 1 relays is expected back once, even where only dst_set tells two apart: an
    # ack's msg_id names the message it answers, so board 0's acks of boards 2's and 3's message 3
    # differ in nothing else (both cross board 1 on this one-way ring)
    relayed = {n for n in zip(*(h[k].tolist() for k in ("op", "src_node", "dst_set", "msg_id", "frag_idx")))
               if n[2] & ~(1 << 1)}
    assert len(relayed) == int((~mine).sum()) and len(set(names)) < len(names)
    header_only = (e["pay_len"] == 0)
    assert header_only.any() and not (e["flags"][header_only] & Flags.SYNTH).any()
    # a forwarded copy left with one hop less than it came in
    inn = {n: int(t) for n, t in zip(zip(*(h[k].tolist() for k in ("op", "src_node", "dst_set", "msg_id",
                                                                     "frag_idx"))), h["ttl"].tolist())}
    for n, ttl, own in zip(full, e["ttl"].tolist(), mine.tolist()):
        if not own:
            assert ttl == inn[n] - 1

def test_a_board_outside_the_trace_is_refused(small):
    with pytest.raises(ConfigError, match="--to 7: the trace has boards 0..3"):
        G.plan(small, 7, topology="ring:4")

def test_the_verdict_judges_missing_extra_and_differing_frames_not_order():
    from emu.codec import capdiff

    d = capdiff.Diff(None, None)
    d.reordered = [3]
    assert G.passed(d) and not d.ok
    for what in ("missing", "extra", "differing"):
        d = capdiff.Diff(None, None)
        getattr(d, what).append((0, 0, "ttl", 1, 2) if what == "differing" else 0)
        assert not G.passed(d)

def test_a_failed_run_says_what_its_numbers_most_often_mean():
    from types import SimpleNamespace as NS

    from emu.codec import capdiff

    def run(expected, got, missing):
        d = capdiff.Diff(None, None)
        d.missing = list(range(missing))
        return NS(plan=NS(expected=[0] * expected), got=[0] * got, diff=d)

    assert "reset it (restart serve)" in G.hint(run(840, 0, 840))         # a board that remembers the trace
    assert "--rate" in G.hint(run(11_774, 6_474, 5_563))                   # a board behind the replay's pace
    assert G.hint(run(840, 839, 1)) == ""                                  # one frame: the diff says enough
    assert G.hint(run(840, 840, 0)) == ""                                  # a pass needs no hint
