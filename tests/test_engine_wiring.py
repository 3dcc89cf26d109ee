"""The replay tables' wiring and index pool (emu.engine.tables): built a slice of dependencies
at a time, every table must be the one a single slice builds, whatever the slice boundaries
cut through (an op's dependencies split across two slices, an op with several parts); the
pool is int32 and refuses a value it cannot hold instead of wrapping it."""

from __future__ import annotations

import numpy as np
import pytest

import emu
import emu.workload.enums
from emu.engine import tables as T
from emu.replay.run import Options, Replay

_TRACES = {
    "mars": dict(seq=2048, nodes=8, chunk=256, decode_tokens=2),
    "usp": dict(seq=2048, nodes=8, chunk=512, decode_tokens=2),
    "pd": dict(seq=2048, nodes=8, chunk=512, decode_tokens=2),
}


def _tables(trace, **opts):
    return T.Tables(Replay(trace, Options(engine="compiled", **opts))).state.tables()


@pytest.fixture(scope="module", params=sorted(_TRACES))
def built(request):
    trace = emu.trace(request.param, **_TRACES[request.param])
    return trace, _tables(trace)


@pytest.mark.parametrize("step", [1, 7, 1000])
def test_the_wiring_a_slice_at_a_time_is_the_wiring_of_one_slice(built, step, monkeypatch):
    trace, whole = built
    assert trace.dep_idx.size > 3 * step or step == 1000  # several slices for the small steps
    monkeypatch.setattr(T, "_WIRING_STEP", step)
    sliced = _tables(trace)
    for name, table in whole.items():
        assert sliced[name].dtype == table.dtype, name
        assert np.array_equal(sliced[name], table), name


@pytest.mark.parametrize("step", [1, 7, 1000])
def test_the_run_sizes_summed_a_block_of_ops_at_a_time_are_the_sizes_of_one_block(built, step, monkeypatch):
    """The kernel's message, destination and bitmap tables are sized from per-op counts summed
    over blocks of ops (tables._run_sizes); the block size changes none of them."""
    trace, whole = built
    assert trace.n_ops > 3 * step or step == 1000
    monkeypatch.setattr(T, "_SIZE_OPS", step)
    sliced = _tables(trace)
    for name in ("MS", "MD", "BITS", "SP", "TR", "MX", "HP", "UP"):
        assert sliced[name].shape == whole[name].shape, name


@pytest.mark.parametrize("step", [1, 5, 16])
def test_a_wiring_slice_holds_at_most_a_step_of_edges(step, monkeypatch):
    """Slices are bounded by edges (a dependency has one per part of its dependent op), not
    only by dependencies: ops of many parts (a reduction's sources) made one slice of 1M
    dependencies hold 30M edges. A dependency whose op alone has more parts is a slice of one."""
    monkeypatch.setattr(T, "_WIRING_STEP", step)
    rng = np.random.default_rng(3)
    npart = rng.choice([1, 1, 2, 7, 40], size=60)
    ndep = rng.integers(0, 5, size=60)
    dep_ptr = np.r_[0, np.cumsum(ndep)]
    whole = np.repeat(np.arange(60), ndep)
    at = 0
    for a, b, y in T._wiring_slices(dep_ptr, npart):
        assert a == at and b > a and np.array_equal(y, whole[a:b])
        assert b - a <= step
        assert npart[y].sum() <= step or b - a == 1
        at = b
    assert at == dep_ptr[-1]
    assert [(a, b) for a, b, _y in T._wiring_slices(np.zeros(1, np.int64), npart)] == [(0, 0)]


def test_each_op_list_ends_where_the_next_begins(built):
    """OP holds where each of an op's lists begins; it ends where the next op's begins, and
    the last row, the sentinel, holds the ends of the last op's (emu.engine.layout.OPS)."""
    trace, whole = built
    L = T.L
    OP, IDX, GP, n = whole["OP"], whole["IDX"], whole["GP"], trace.n_ops
    assert OP.shape == (n + 1, L.OPS_NCOLS)
    lists = (L.OPS_PART, L.OPS_DEP, L.OPS_DST, L.OPS_SRC, L.OPS_BLK, L.OPS_DONE, L.OPS_SIG, L.OPS_GRP)
    for col in lists:
        assert (np.diff(OP[:, col]) >= 0).all(), col
    # the sentinel: the lists' ends, nothing else
    assert OP[n, L.OPS_PART] == whole["PT"].shape[0] and OP[n, L.OPS_DST] == whole["SLOT"].shape[0]
    assert OP[n, L.OPS_GRP] == GP.shape[0]
    assert not OP[n, [c for c in range(L.OPS_NCOLS) if c not in lists]].any()
    group = (trace.ops["kind"] == emu.workload.enums.Kind.reduce) | (trace.ops["kind"] == emu.workload.enums.Kind.all_to_all)
    for o in range(n):
        deps = trace.dep_idx[trace.dep_ptr[o]:trace.dep_ptr[o + 1]]
        assert IDX[OP[o, L.OPS_DEP]:OP[o + 1, L.OPS_DEP]].tolist() == deps.tolist()
        assert IDX[OP[o, L.OPS_SRC]:OP[o + 1, L.OPS_SRC]].tolist() == trace.src(o).tolist()
        dsts = sorted(trace.dst_idx[trace.dst_ptr[o]:trace.dst_ptr[o + 1]].tolist())
        assert IDX[OP[o, L.OPS_DST]:OP[o + 1, L.OPS_DST]].tolist() == dsts
        assert (OP[o + 1, L.OPS_GRP] > OP[o, L.OPS_GRP]) == bool(group[o])


def test_the_state_gives_each_table_back_under_its_own_name(built):
    """State.tables() reads every field in one compiled call (net.state._tables), which lists
    them in FIELDS' order: each table comes back under its own name, with its own columns."""
    _trace, whole = built
    L = T.L
    widths = {"OP": L.OPS_NCOLS, "PT": L.PT_NCOLS, "SLOT": L.SLOT_NCOLS, "SW": L.SW_NCOLS, "NT": L.NT_NCOLS,
              "GP": L.GP_NCOLS, "SIM": L.SIM_NCOLS, "WORK": L.WORK_NCOLS, "HIST": L.HIST_NCOLS, "HN": L.HN_NCOLS,
              "ERR": L.ERR_NCOLS, "MX": L.MX_NCOLS}
    for name, ncols in widths.items():
        assert whole[name].ndim == 2 and whole[name].shape[1] == ncols, name
    assert whole["HIST"].dtype == np.int64 and whole["HN"].dtype == np.int32
    assert whole["HIST"].shape[0] == whole["HN"].shape[0]  # row for row


def test_the_history_columns_are_those_of_its_two_tables_each_once():
    """Readers take the history by name (layout.HISTORY_COLUMNS); the loop keeps it in HIST and
    HN, and DirectoryView finds each name in their declarations."""
    L = T.L
    both = L.HISTORY.columns + L.HISTORY_NARROW.columns
    assert sorted(L.HISTORY_COLUMNS) == sorted(both) and len(set(both)) == len(both)


def test_the_parts_the_slots_and_the_index_pool_are_int32(built):
    _trace, whole = built
    assert whole["IDX"].dtype == np.int32 and whole["PT"].dtype == np.int32 and whole["SLOT"].dtype == np.int32
    # a slot's delivery time (ps) and transient bytes are its wide values
    assert whole["SW"].dtype == np.int64 and (whole["SW"][:, T.L.SW_TIME] == -1).all()


def test_handoff_blocks_sit_in_the_pool_as_offsets_from_the_lowest_block():
    """A bulk handoff lists its KV blocks; the pool holds each as its offset from the lowest id
    the loop numbers (RS_KVMIN), so ids past int32 still fit."""
    trace = emu.trace("pd", **_TRACES["pd"])
    if not trace.blk_idx.size:
        pytest.skip("no handoff lists blocks in this trace")
    rp = Replay(trace, Options(engine="compiled"))
    t = T.Tables(rp)
    OP, IDX = t.state.table("OP"), t.state.table("IDX")
    op = int(np.flatnonzero(np.diff(trace.blk_ptr))[0])
    offsets = IDX[OP[op, T.L.OPS_BLK]:OP[op + 1, T.L.OPS_BLK]]
    # the loop's block id is kv_ids[0] + offset; the trace's id is kv_ids[offset]
    assert np.array_equal(t.kv_ids[offsets], trace.blocks(op))


def test_the_index_pool_refuses_more_entries_than_int32_positions_reach():
    # OP's and SLOT's positions in IDX are int32; a view of 2**31 entries costs no memory
    with pytest.raises(ValueError, match="index entries"):
        T._index_pool((np.broadcast_to(np.int32(0), (2**31,)),))


def test_the_index_pool_refuses_a_value_past_int32():
    blocks = (np.arange(3), np.array([2**31]))
    with pytest.raises(ValueError, match="does not fit the int32 index pool"):
        T._index_pool(blocks)
    pool = T._index_pool((np.arange(3), np.array([2**31 - 1, -1])))
    assert pool.dtype == np.int32 and pool.tolist() == [0, 1, 2, 2**31 - 1, -1]


def test_the_loop_lets_the_wiring_go_after_the_run(monkeypatch):
    """Nothing reads the parts, the index pool or the dependency flags once the run is over: the
    loop's state holds empty ones while the results are read out (their memory goes back),
    and keeps what the results read."""
    from emu.engine import runner

    built = []

    class Recording(T.Tables):
        def __init__(self, rp):
            super().__init__(rp)
            built.append(self)

    monkeypatch.setattr(runner, "Tables", Recording)
    trace = emu.trace("mars", **_TRACES["mars"])
    rp = Replay(trace, Options(engine="compiled"))
    before = T.Tables(Replay(trace, Options(engine="compiled"))).state.tables(("PT", "IDX", "DF"))
    assert all(t.size for t in before.values())
    rp.run()
    st = built[0].state
    assert {name: st.table(name).size for name in ("PT", "IDX", "DF")} == {"PT": 0, "IDX": 0, "DF": 0}
    assert st.table("OP").shape[0] == trace.n_ops + 1 and (st.table("OW")[:, T.L.OW_END] >= 0).all()


def test_a_position_past_int32_widens_the_table_instead_of_wrapping():
    # an IDX position is a block's start plus an int32 CSR offset: the sum is made in int64
    t = T._table(2, 1, {0: (2 ** 31 - 2, np.array([1, 5], np.int32))})
    assert t.dtype == np.int64 and t[:, 0].tolist() == [2 ** 31 - 1, 2 ** 31 + 3]


def test_an_op_board_key_is_made_in_int64():
    # op * N of an int32 op id passes int32 from 16.8M ops on 128 boards
    key = T._pair_key(np.array([2**30, 3], np.int32), np.array([1, 2], np.int32), 4)
    assert key.dtype == np.int64 and key.tolist() == [2**32 + 1, 14]
