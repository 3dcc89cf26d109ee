"""emu.heap: the one binary heap of the kernel's event heap, the replay's event heap and the
compute engines' ready queues. (Their exactness against the Python path is
tests/test_engine_exact.py's and tests/test_replay_compiled.py's; these check the heap alone.)"""

import numpy as np

from emu import heap


def _row(*values):
    return tuple(np.int64(v) for v in values)


def _push(H, lo, n, entry):
    heap.sift_up(H, lo, n, entry)
    return n + 1


def _pop(H, lo, n):
    top = H[lo].copy()
    n -= 1
    heap.sift_down(H, lo, n, 0, _row(*H[lo + n]))
    return top, n


def test_rows_pop_in_time_then_key_order_with_their_payload():
    rng = np.random.default_rng(3)
    keys = rng.permutation(400)
    times = rng.integers(0, 20, 400)  # many equal times: the key decides
    H = np.zeros((400, 5), np.int64)
    n = 0
    for t, k in zip(times, keys):
        n = _push(H, 0, n, _row(t, k, 7 * k, -k, k + 1))
    popped = []
    while n:
        top, n = _pop(H, 0, n)
        popped.append(top)
    popped = np.array(popped)
    order = np.lexsort((keys, times))
    np.testing.assert_array_equal(popped[:, 0], times[order])
    np.testing.assert_array_equal(popped[:, 1], keys[order])
    np.testing.assert_array_equal(popped[:, 2:], np.stack([7 * popped[:, 1], -popped[:, 1], popped[:, 1] + 1], axis=1))


def test_heaps_in_segments_of_one_table_keep_to_their_rows():
    """The ready queues: one heap per node, each in its own rows of one table."""
    H = np.full((20, 2), -1, np.int64)
    sizes = {0: 0, 10: 0}
    for op in (9, 3, 7, 1, 8):
        sizes[0] = _push(H, 0, sizes[0], _row(op, 0))
        sizes[10] = _push(H, 10, sizes[10], _row(100 - op, 0))
    assert (H[5:10] == -1).all() and (H[15:] == -1).all()
    first = [_pop(H, 0, 5 - i)[0][0] for i in range(5)]
    second = [_pop(H, 10, 5 - i)[0][0] for i in range(5)]
    assert first == [1, 3, 7, 8, 9] and second == [91, 92, 93, 97, 99]


def test_an_entry_put_at_the_root_is_a_pop_and_a_push():
    """The kernel's event at the root makes way for the first entry it schedules."""
    rng = np.random.default_rng(5)
    entries = [_row(t, k) for k, t in enumerate(rng.integers(0, 50, 60))]
    A, B = np.zeros((60, 2), np.int64), np.zeros((60, 2), np.int64)
    n = 0
    for e in entries[:40]:
        _push(A, 0, n, e)
        n = _push(B, 0, n, e)
    for e in entries[40:]:
        heap.sift_down(A, 0, n, 0, e)  # replace the root
        _top, m = _pop(B, 0, n)
        _push(B, 0, m, e)
    out_a = [_pop(A, 0, n - i)[0].tolist() for i in range(n)]
    out_b = [_pop(B, 0, n - i)[0].tolist() for i in range(n)]
    assert out_a == out_b == sorted(out_a)
