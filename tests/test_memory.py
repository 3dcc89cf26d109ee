"""Memory: arrays a run holds but does not read move into a file mapping, same values, read-only;
a replay pages out the trace it loaded itself, never one its caller holds, and its results do
not change."""

import mmap

import numpy as np
import pytest

import emu
from emu.cli import main
from emu.memory import drop_resident, file_backed
from emu.workload.fileformat import CSR_COLUMNS
from emu.workload.trace import load_trace


def _mapping(a: np.ndarray):
    base = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def test_file_backed_arrays_hold_the_same_values_read_only_in_one_file_mapping():
    rng = np.random.default_rng(7)
    arrays = [rng.integers(-2**40, 2**40, 1001, dtype=np.int64), rng.integers(-128, 127, 13, dtype=np.int8),
              np.zeros(0, np.int32), rng.integers(0, 2**31 - 1, (37, 5), dtype=np.int32),
              np.arange(24, dtype=np.int16)[::2]]  # not contiguous: written as its values
    mapped = file_backed(arrays)
    assert len(mapped) == len(arrays)
    for a, m in zip(arrays, mapped):
        assert m.dtype == a.dtype and m.shape == a.shape
        np.testing.assert_array_equal(m, a)
        assert not m.flags.writeable
        if m.size:
            assert isinstance(_mapping(m), mmap.mmap)
            assert m.ctypes.data % 64 == 0  # each on its own cache line in the file
            with pytest.raises(ValueError):
                m[(0,) * m.ndim] = 1
    assert len({id(_mapping(m)) for m in mapped if m.size}) == 1  # one file for them all


def test_file_backed_of_nothing_but_empty_arrays_is_empty_copies():
    mapped = file_backed([np.zeros(0, np.int64), np.zeros((0, 3), np.int32)])
    assert [m.shape for m in mapped] == [(0,), (0, 3)]


def _resident_kib(a: np.ndarray) -> int:
    """Resident KiB of the mappings under ``a``'s bytes (/proc/self/smaps)."""
    lo, hi = a.ctypes.data, a.ctypes.data + a.nbytes
    total, vma = 0, None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                vma = (start, end) if start < hi and end > lo else None
            elif head == "Rss:" and vma is not None:
                total += int(line.split()[1])
    return total


def test_the_pages_of_file_backed_arrays_leave_memory_and_read_back_the_same():
    """drop_resident: a file-backed array's pages read so far leave the process (the build drops
    the trace's after each pass through it); read again they hold the same values. An array in
    the heap is left as it is."""
    values = np.arange(4 << 20, dtype=np.int64)  # 32 MiB
    heap = np.arange(1 << 20, dtype=np.int64)
    (mapped,) = file_backed([values])
    assert int(mapped.sum()) == int(values.sum())  # read: resident
    assert _resident_kib(mapped) >= 30 << 10
    drop_resident([mapped, heap])
    assert _resident_kib(mapped) < 1 << 10
    np.testing.assert_array_equal(mapped, values)  # read back from the file
    np.testing.assert_array_equal(heap, np.arange(1 << 20, dtype=np.int64))


def test_a_table_built_from_file_backed_columns_leaves_their_pages_out_of_memory():
    """The build's tables read a paged-out trace's columns a block of rows at a time and let each
    block's pages go (emu.engine.tables._table): at the end they are not resident, and the
    table holds their values (a column given as (base, values) holds base + values)."""
    from emu.engine.tables import _table

    n = 4 << 20
    a, b = file_backed([np.arange(n, dtype=np.int32), np.arange(n, dtype=np.int32)[::-1].copy()])  # 16 MiB each
    t = _table(n, 3, {0: a, 2: (7, b)})
    assert _resident_kib(a) < 1 << 10 and _resident_kib(b) < 1 << 10
    assert t.dtype == np.int32
    np.testing.assert_array_equal(t[:, 0], np.arange(n))
    np.testing.assert_array_equal(t[:, 2], np.arange(n)[::-1] + 7)
    assert not t[:, 1].any()


def _arrays(trace) -> dict:
    out = {f"ops.{k}": v for k, v in trace.ops.items()}
    out.update({f"{c}_{p}": getattr(trace, f"{c}_{p}") for c in CSR_COLUMNS for p in ("ptr", "idx")})
    return out


@pytest.fixture(scope="module")
def mars(tmp_path_factory):
    path = tmp_path_factory.mktemp("pageout") / "mars.json"
    assert main(["trace", "mars", "--seq", "2048", "--nodes", "4", "--chunk", "256", "--decode-tokens", "2",
                 "-o", str(path)]) == 0
    return path


def test_a_paged_out_trace_holds_every_array_as_it_was(mars):
    trace = load_trace(mars)
    before = {k: v.copy() for k, v in _arrays(trace).items()}
    trace.page_out()
    after = _arrays(trace)
    assert after.keys() == before.keys()
    for k, v in before.items():
        assert after[k].dtype == v.dtype, k
        np.testing.assert_array_equal(after[k], v, err_msg=k)
        assert not after[k].flags.writeable, k


def test_a_paged_out_trace_drops_its_pages_and_reads_them_back_the_same(mars):
    trace = load_trace(mars)
    before = {k: v.copy() for k, v in _arrays(trace).items()}
    trace.page_out()
    assert sum(int(v.sum()) for v in _arrays(trace).values()) == sum(int(v.sum()) for v in before.values())
    trace.drop_pages()
    for k, v in before.items():
        np.testing.assert_array_equal(_arrays(trace)[k], v, err_msg=k)


def test_a_replay_pages_out_the_trace_it_loaded_but_not_one_its_caller_holds(mars):
    own = emu.replay(str(mars))
    assert all(not a.flags.writeable for a in _arrays(own.engine.trace).values())
    held = load_trace(mars)
    given = emu.replay(held)
    assert all(a.flags.writeable for a in _arrays(held).values())  # the caller's arrays stay its own
    # the same run either way: every summary figure (but the wall time) and every op's times
    assert {k: v for k, v in own.summary.items() if k != "wall_s"} == \
           {k: v for k, v in given.summary.items() if k != "wall_s"}
    assert own.ops.equals(given.ops)
    assert own.nodes.equals(given.nodes)


@pytest.mark.parametrize("block", [5, 97])
def test_the_history_handed_over_in_blocks_is_the_whole_history_and_its_peaks(mars, block, monkeypatch):
    """The loop hands its directory history to Python every history.BLOCK rows and writes on
    from row 0 (emu.engine.history): the rows, their peaks, the summary and nodes.parquet's
    table are those of a run that keeps every row until its end."""
    from emu.engine import history
    from emu.nic.directory import history_peaks

    whole = emu.replay(str(mars))
    taken = []
    take = history.History.take

    def counted(self, st):
        taken.append(int(st.table("RS")[history.L.RS_NHIST]))
        return take(self, st)

    monkeypatch.setattr(history, "BLOCK", block)
    monkeypatch.setattr(history.History, "take", counted)
    blocks = emu.replay(str(mars))
    d, d_whole = blocks.engine.cluster.directory, whole.engine.cluster.directory
    h, h_whole = d.history_columns(), d_whole.history_columns()
    rows = len(h["t_ps"])
    # handed over a block at a time (a block ends at the first check past BLOCK rows), then the rest
    assert rows > 4 * block and len(taken) > rows // (4 * block)
    assert sum(taken) == rows and all(n >= block for n in taken[:-1]) and max(taken) < rows // 4
    assert h.keys() == h_whole.keys()
    for name in h:
        np.testing.assert_array_equal(h[name], h_whole[name], err_msg=name)
    assert d.history_peaks() == history_peaks(h) == d_whole.history_peaks()
    assert {k: v for k, v in blocks.summary.items() if k != "wall_s"} == \
           {k: v for k, v in whole.summary.items() if k != "wall_s"}
    assert blocks.nodes.equals(whole.nodes)
