"""A finished transfer's rows are taken again (emu.engine.rows), and nothing else changes.

The rule: a transfer has finished when every message has left (TR_SENT), every board other
than its source has had every message whole (TR_LEFT counted down by UP_DONE) and its
source's own copy is delivered; then its TR row, its message rows and their MD rows go back
on free lists by size. Runs recycle only where nothing names a row afterwards."""

import numpy as np
import pandas as pd
import pytest

import emu
from emu.engine import layout as L
from emu.engine import rows
from emu.engine import tables as engine_tables
from emu.engine.state import State
from emu.net import kernel as K
from emu.replay.run import Options, Replay
from emu.replay.summary import summarize


@pytest.fixture(scope="module")
def traces():
    return {s: emu.trace(s, seq=2048, nodes=8, chunk=256, decode_tokens=2) for s in ("mars", "pd", "usp", "full")}


def replay(trace, monkeypatch, recycle=None, before_run=None, **kw):
    """A compiled replay and its State; ``recycle`` 0 or 1 overrides what Tables decided;
    ``before_run(rp)`` is called on the Replay before it runs."""
    states = []

    def state(**tables):
        if recycle is not None:
            tables["RS"][L.RS_RECYCLE] = recycle
        states.append(State(**tables))
        return states[-1]

    with monkeypatch.context() as m:
        m.setattr(engine_tables, "State", state)
        rp = Replay(trace, Options(**kw))
        if before_run is not None:
            before_run(rp)
        rp.run()
    return rp, states[-1]


def assert_same_results(a, b):
    sa, sb = summarize(a), summarize(b)
    sa.pop("wall_s"), sb.pop("wall_s")
    assert sa == sb
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.end, b.end)
    np.testing.assert_array_equal(a.deliveries(), b.deliveries())
    pd.testing.assert_frame_equal(a.cluster.directory.history(), b.cluster.directory.history())
    pd.testing.assert_frame_equal(a.net.counters(), b.net.counters())
    pd.testing.assert_frame_equal(a.net.node_counters(), b.net.node_counters())
    assert a.cluster.incomplete() == b.cluster.incomplete()


@pytest.mark.parametrize("scheme,kw", [
    ("mars", {}), ("pd", {}), ("usp", {}), ("full", {}),
    ("mars", {"loss": 0.01, "reliable": False}),  # lost frames: sends never finish, rows stay theirs
    ("pd", {"overrides": ("hw.mtu=256", "hw.comm_buffer=2KiB")}),
])
def test_recycled_rows_give_the_results_of_rows_never_taken_again(traces, scheme, kw, monkeypatch):
    on, st_on = replay(traces[scheme], monkeypatch, **kw)
    off, st_off = replay(traces[scheme], monkeypatch, recycle=0, **kw)
    assert_same_results(off, on)
    rs_on, rs_off = st_on.table("RS"), st_off.table("RS")
    assert rs_on[L.RS_RECYCLE] == 1
    # as many transfers, in fewer rows: those in flight at once
    assert rs_on[L.RS_NSENDS] == rs_off[L.RS_NSENDS] == rs_off[L.RS_NTR]
    assert rs_on[L.RS_NTR] < rs_off[L.RS_NTR] // 2
    assert rs_on[L.RS_NMSG] < rs_off[L.RS_NMSG] // 2 and rs_on[L.RS_NMD] < rs_off[L.RS_NMD] // 2
    if "loss" in kw:
        assert on.cluster.incomplete()  # named by their order of sending, as without recycling
    else:  # every send finished: no UP_DONE is still owed (each board other than its source sent one)
        for st in (st_on, st_off):
            assert not st.table("TR")[: st.table("RS")[L.RS_NTR], L.TR_LEFT].any()


def test_transfers_of_several_messages_take_a_range_of_their_size_again(monkeypatch):
    """Over MAX_FRAGS fragments a send is several messages, contiguous rows; a finished one's
    range goes back on the list of its size and the next send of that size takes it whole."""
    from emu.codec import max_payload
    from emu.codec.fragment import MAX_FRAGS

    from emu.workload.enums import Kind

    t = emu.trace("ring", seq=512, nodes=4, chunk=128, decode_tokens=1)
    chunk = max_payload(256) * MAX_FRAGS
    sends = np.flatnonzero(t.ops["kind"] == int(Kind.send))
    big = sends[:: len(sends) // 4][:4]  # four sends, apart in time, of three messages each
    t.ops["bytes"][big] = 2 * chunk + 1000
    on, st_on = replay(t, monkeypatch, overrides=("hw.mtu=256",))
    off, st_off = replay(t, monkeypatch, recycle=0, overrides=("hw.mtu=256",))
    assert_same_results(off, on)
    TR = st_off.table("TR")[: st_off.table("RS")[L.RS_NTR]]
    assert ((TR[:, L.TR_M1] - TR[:, L.TR_M0]) == 3).sum() >= 4
    made = int((TR[:, L.TR_M1] - TR[:, L.TR_M0]).sum())
    assert made == st_off.table("RS")[L.RS_NMSG]
    assert st_on.table("RS")[L.RS_NMSG] < made // 2


def _one_finished_transfer(st):
    """A transfer of one message from board 0 to 1 and 2 and to itself, all done, in rows no
    transfer used: the TR row, the message row and the first MD row."""
    RS, TR, MS = st.table("RS"), st.table("TR"), st.table("MS")
    tr, m, d = RS[L.RS_NTR], RS[L.RS_NMSG], RS[L.RS_NMD]
    w = RS[L.RS_MASKW]
    TR[tr] = 0
    TR[tr, L.TR_ACCEPTED] = 5
    TR[tr, L.TR_M0], TR[tr, L.TR_M1], TR[tr, L.TR_SENT], TR[tr, L.TR_LEFT] = m, m + 1, 1, 0
    TR[tr, L.TR_DMASK] = 0b111
    TR[tr, L.TR_DMASK + L.TR_SET_DELIVERED * w] = 0b111
    MS[m, K.M_DPTR], MS[m, K.M_DEND] = d, d + 2
    return tr, m, d


def _heads(RS):
    return RS[L.RS_FL_TR], RS[RS[L.RS_FL_MSG] + 1], RS[RS[L.RS_FL_MD] + 2]


@pytest.mark.parametrize("unfinished", ["none", "recycle off", "upcall to come", "message unsent",
                                        "own copy to come", "not accepted"])
def test_a_transfer_gives_its_rows_back_only_when_finished(traces, unfinished, monkeypatch):
    _rp, st = replay(traces["mars"], monkeypatch)
    RS, TR = st.table("RS"), st.table("TR")
    before = _heads(RS)
    tr, m, d = _one_finished_transfer(st)
    w = RS[L.RS_MASKW]
    if unfinished == "recycle off":
        RS[L.RS_RECYCLE] = 0
    elif unfinished == "upcall to come":
        TR[tr, L.TR_LEFT] = 1
    elif unfinished == "message unsent":
        TR[tr, L.TR_SENT] = 0
    elif unfinished == "own copy to come":
        TR[tr, L.TR_DMASK + L.TR_SET_DELIVERED * w] = 0b110
    elif unfinished == "not accepted":
        TR[tr, L.TR_ACCEPTED] = -1
    rows.retire(st, tr)
    if unfinished != "none":
        assert _heads(RS) == before
        return
    assert _heads(RS) == (tr, m, d)
    # each list links on to what it held before
    assert (TR[tr, L.TR_NEXT], st.table("MX")[m, L.MX_TR], st.table("MD")[d, K.D_NODE]) == before
    # the next transfer, message and two-board destination list take them, cleared
    seq = RS[L.RS_NSENDS]
    assert rows.new_transfer(st) == tr and TR[tr, L.TR_SEQ] == seq and RS[L.RS_NSENDS] == seq + 1
    assert not TR[tr, : L.TR_SEQ].any() and not TR[tr, L.TR_LEFT:].any()
    assert rows.take_messages(st, 1) == m and rows.md_rows(st, 2) == d
    assert _heads(RS) == before


def test_a_source_that_is_no_destination_needs_no_copy_of_its_own(traces, monkeypatch):
    _rp, st = replay(traces["mars"], monkeypatch)
    RS, TR = st.table("RS"), st.table("TR")
    tr, _m, _d = _one_finished_transfer(st)
    w = RS[L.RS_MASKW]
    TR[tr, L.TR_DMASK] = TR[tr, L.TR_DMASK + L.TR_SET_DELIVERED * w] = 0b110
    rows.retire(st, tr)
    assert RS[L.RS_FL_TR] == tr


@pytest.mark.parametrize("kw,why", [
    ({"reliable": True}, "a resend or an ack can come after a message is whole"),
    ({"scenario": ("link 0-1 down at 1ms up at 2ms",), "reliable": False},
     "a re-routed multicast can bring a duplicate"),
    ({"functional": True}, "functional mode reads every transfer after the run"),
])
def test_runs_that_name_rows_afterwards_do_not_recycle(traces, kw, why, monkeypatch):
    _rp, st = replay(traces["mars"], monkeypatch, **kw)
    assert st.table("RS")[L.RS_RECYCLE] == 0, why
    RS = st.table("RS")
    assert RS[L.RS_NTR] == RS[L.RS_NSENDS]


def test_a_captured_replay_does_not_recycle(traces, monkeypatch, tmp_path):
    """A capture's log names frames by message row when it is written out."""
    from emu.replay.capture import Capture

    cap = Capture(tmp_path / "c.pcap")
    _rp, st = replay(traces["mars"], monkeypatch, before_run=cap.attach)
    cap.close()
    assert cap.frames > 0 and st.table("RS")[L.RS_RECYCLE] == 0


def test_a_send_to_its_own_source_and_others_finishes_and_gives_its_rows_back(monkeypatch):
    """A send whose destinations include its source: the source's copy is local (E_LOCAL), the
    message's destination rows are the other boards only, and the send finishes (no UP_DONE
    owed) so its rows are taken again; results as with rows never taken again."""
    import copy

    from emu.workload.builder import OpBuilder
    from emu.workload.enums import MsgOp, Stage
    from emu.workload.trace import from_columns

    base = emu.trace("ring", nodes=4, seq=1024, chunk=512)  # its profiles; the ops are these
    b = OpBuilder()
    prev = ()
    for i in range(8):  # one after another: each starts when the one before is delivered
        prev = (b.send(Stage.prefill, MsgOp.kv_transfer, i % 4, sorted({i % 4, (i + 1) % 4, (i + 2) % 4}), 4000,
                       deps=prev),)
    trace = from_columns(copy.deepcopy(base.meta), copy.deepcopy(base.schedule), b.columns())
    on, st_on = replay(trace, monkeypatch, topology="ring")
    off, _ = replay(trace, monkeypatch, recycle=0, topology="ring")
    assert_same_results(off, on)
    assert summarize(on)["incomplete_ops"] == 0
    RS, TR = st_on.table("RS"), st_on.table("TR")
    assert RS[L.RS_NSENDS] == 8 and RS[L.RS_NTR] < 8
    assert not TR[: RS[L.RS_NTR], L.TR_LEFT].any()
