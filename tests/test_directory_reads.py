"""An attention op reads the KV replicas it depends on when it starts, and the directory checks
each read (docs/nic.md, Replica directory: a read of an INVALID replica is recorded as an
error; the run reports it).

A hand-made trace on four boards: board 0 computes block 5 and multicasts a replica of it to
boards 1, 2 and 3 (``kv_replica``, residency replica); board 1, which owns block 0 itself,
then runs an attention op that depends on that push. If the owner's ``invalidate`` of block 5
reaches board 1 before the attention starts, the read is of an INVALID replica: one directory
error, code DERR_READ, at board 1, for block 5, in state INVALID, at the attention's start. If
the invalidate waits for the attention, the read finds the replica VALID: no error. The
compiled loop and the Python reference path report the same.
"""

import copy

import numpy as np
import pytest

import emu
from emu.engine import layout as L
from emu.engine import tables as engine_tables
from emu.engine.state import State as LoopState
from emu.nic.directory import State
from emu.replay.run import Options, Replay
from emu.replay.summary import summarize
from emu.workload.builder import OpBuilder
from emu.workload.enums import Kind, MsgOp, Residency, Stage
from emu.workload.trace import from_columns
from emu.workload.validate import validate

OWNER, READER, HOLDERS = 0, 1, [1, 2, 3]
BLOCK, READER_BLOCK = 5, 0  # the replicated block (owned by board 0), the reader's own block
NBYTES = 4096
WORK = (1_000_000, NBYTES)  # flops, memory bytes of each compute op


def two_blocks_and_a_replica_read(invalidate_first: bool):
    """The trace above; the attention op's id is returned with it."""
    base = emu.trace("ring", nodes=4, seq=1024, chunk=512)  # its profiles; the ops are these
    b = OpBuilder()
    b.compute(Kind.qkv, Stage.prefill, READER, 0, 0, 0, WORK, produces=(READER_BLOCK, NBYTES))
    qkv = b.compute(Kind.qkv, Stage.prefill, OWNER, 0, 0, 0, WORK, produces=(BLOCK, NBYTES))
    push = b.send(Stage.prefill, MsgOp.kv_replica, OWNER, HOLDERS, NBYTES, chunk=0, layer=0, kv_id=BLOCK,
                  residency=Residency.replica, deps=(qkv,))
    if invalidate_first:
        inv = b.control(Kind.invalidate, OWNER, HOLDERS, BLOCK, chunk=0, layer=0, deps=(push,))
        attn = b.compute(Kind.attn, Stage.prefill, READER, 0, 0, 0, WORK, deps=(push, inv))
    else:
        attn = b.compute(Kind.attn, Stage.prefill, READER, 0, 0, 0, WORK, deps=(push,))
        b.control(Kind.invalidate, OWNER, HOLDERS, BLOCK, chunk=0, layer=0, deps=(attn,))
    trace = from_columns(copy.deepcopy(base.meta), copy.deepcopy(base.schedule), b.columns())
    validate(trace, "the hand-made trace")  # a trace the format allows
    return trace, attn


def replay(trace, engine, monkeypatch):
    """The replay on ``engine`` and, for the compiled loop, its directory error rows (t, code,
    node, kv, state; kv as the loop keeps it)."""
    states = []

    def state(**tables):
        states.append(LoopState(**tables))
        return states[-1]

    with monkeypatch.context() as m:
        m.setattr(engine_tables, "State", state)
        rp = Replay(trace, Options(topology="bring:4", engine=engine)).run()
    if engine == "python":
        return rp, None
    (st,) = states
    return rp, st.table("ERR")[: st.table("RS")[L.RS_NERR]].copy()


def common(rp):
    s = summarize(rp)
    s.pop("wall_s"), s.pop("engine")
    return s


@pytest.mark.parametrize("invalidate_first", [True, False], ids=["invalidated-before-the-read", "valid-at-the-read"])
def test_a_read_of_an_invalidated_replica_is_one_directory_error_on_both_paths(invalidate_first, monkeypatch):
    """Reading a replica invalidated before the read is one DERR_READ; reading it VALID is none."""
    trace, attn = two_blocks_and_a_replica_read(invalidate_first)
    rp, err = replay(trace, "compiled", monkeypatch)
    ref, _ = replay(trace, "python", monkeypatch)
    s = common(rp)
    assert s["incomplete_ops"] == 0
    t = int(rp.start[attn])
    assert t > 0
    if invalidate_first:
        # the invalidate arrived before the attention started (it waited for it)
        rows = err.tolist()
        assert len(rows) == 1
        (t_ps, code, node, _kv, state) = rows[0]  # the kv as the loop keeps it: its id is in the text
        assert (t_ps, code, node, state) == (t, L.DERR_READ, READER, int(State.INVALID))
        assert rp.cluster.directory.errors == [f"t={t}ps: node {READER} read block {BLOCK} in state INVALID"]
    else:
        assert err.shape[0] == 0 and rp.cluster.directory.errors == []
    assert s["directory_errors"] == rp.cluster.directory.errors
    # the replica is gone at the end either way, and the reference path agrees on everything
    assert rp.cluster.directory.owner_only()
    assert ref.cluster.directory.errors == rp.cluster.directory.errors
    assert common(ref) == s
    np.testing.assert_array_equal(ref.start, rp.start)
    np.testing.assert_array_equal(ref.end, rp.end)
