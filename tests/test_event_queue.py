"""The frame kernel's event queue (emu.net.kernel: row 0, a calendar of near entries, a binary
heap behind it): whatever mix of pushes and pops, it hands out exactly what a plain priority
queue of (time, key) does, with the earliest entry always at row 0."""

import heapq

import numpy as np
import pytest
from numba import njit

from emu.net import kernel as K

W = 1 << K.Q_SHIFT  # a calendar bucket's width, ps


@njit
def _run(ops, HP, SC):
    """ops rows (push?, time, key): push the entry, or pop the earliest. Returns the popped
    entries and, after each step, row 0 and the count pending."""
    out = np.full((ops.shape[0], 4), -1, np.int64)
    for j in range(ops.shape[0]):
        if ops[j, 0] == 1:
            K.heap_push(HP, SC, ops[j, 1], ops[j, 2])
        else:
            out[j, 0] = HP[0, 0]
            out[j, 1] = HP[0, 1]
            K._heap_pop(HP, SC)
        out[j, 2] = HP[0, 0] if SC[K.SC_HEAP] > 0 else -1
        out[j, 3] = SC[K.SC_HEAP]
    return out


def _reference(ops):
    q, out = [], []
    for push, t, k in ops.tolist():
        if push:
            heapq.heappush(q, (t, k))
            out.append((-1, -1))
        else:
            out.append(heapq.heappop(q))
    return out, q


def _scenario(rng, n, spread):
    """n steps of a simulation: pops of the earliest, pushes at or after the clock (the time of
    the last entry popped), keys unique. ``spread``: how far ahead pushes go, in buckets."""
    ops, pending, now, key = [], 0, 0, 0
    for _ in range(n):
        if pending and rng.random() < 0.5:
            ops.append((0, 0, 0))
            pending -= 1
            continue
        r = rng.random()
        if r < 0.25:
            dt = 0                                            # this instant (ties by key)
        elif r < 0.5:
            dt = int(rng.integers(0, W))                      # the same or the next bucket
        elif r < 0.9:
            dt = int(rng.integers(0, spread * W))             # within the calendar's window, or past it
        else:
            dt = int(rng.integers(K.Q_BUCKETS * W, 4 * K.Q_BUCKETS * W))  # far past the window
        ops.append((1, now + dt, key))
        key += 1
        pending += 1
    return np.array(ops, np.int64)


def _replay(ops):
    """``ops`` through the engine's queue: the popped entries, the queue's table and its slots."""
    HP = np.zeros((K.HEAP_LO + len(ops) + 8, 2), np.int64)
    SC = np.zeros(K.SC_SIZE, np.int64)
    return _run(ops, HP, SC), HP, SC


def _clocked(ops):
    # Re-time the pushes so none is before the entry last popped (the kernel's clock).
    q, now, fixed = [], 0, ops.copy()
    for j, (push, t, k) in enumerate(ops.tolist()):
        if push:
            fixed[j, 1] = now + t  # t is an offset from the clock
            heapq.heappush(q, (int(fixed[j, 1]), k))
        else:
            now = heapq.heappop(q)[0]
    return fixed


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("spread", [1, 8, 2 * K.Q_BUCKETS])
def test_pops_come_in_time_then_key_order_whatever_holds_them(seed, spread):
    rng = np.random.default_rng(seed)
    ops = _scenario(rng, 4000, spread)
    ops = _clocked(ops)
    out, HP, SC = _replay(ops)
    ref, left = _reference(ops)
    pops = [(int(a), int(b)) for a, b in out[:, :2] if a >= 0]
    assert pops == [r for r in ref if r[0] >= 0]
    # Row 0 is the earliest entry pending after every step, and the count is right.
    q = []
    for j, (push, t, k) in enumerate(ops.tolist()):
        if push:
            heapq.heappush(q, (t, k))
        else:
            heapq.heappop(q)
        assert out[j, 3] == len(q)
        assert out[j, 2] == (q[0][0] if q else -1)
    assert SC[K.SC_QCAL] + SC[K.SC_QHEAP] + (1 if SC[K.SC_HEAP] else 0) == SC[K.SC_HEAP] == len(left)


def test_a_full_bucket_and_a_cluster_in_step_spill_into_the_heap_in_order():
    # More entries at one instant than a bucket holds (ports that run in step): the rest wait in
    # the heap behind the calendar, and the pops still come in key order.
    n = 3 * K.Q_CAP + 5
    ops = np.array([(1, 1000, k) for k in range(n, 0, -1)] + [(0, 0, 0)] * n, np.int64)
    out, _HP, SC = _replay(ops)
    assert [int(k) for k in out[n:, 1]] == list(range(1, n + 1))
    assert SC[K.SC_HEAP] == SC[K.SC_QCAL] == SC[K.SC_QHEAP] == 0


def test_an_entry_before_the_calendars_window_waits_in_the_heap():
    # A push earlier than every entry in the calendar but after row 0's bucket moved on: row 0
    # takes it, and the one it displaces keeps its place in order.
    ops = np.array([(1, 10 * W, 1), (1, 12 * W, 2), (0, 0, 0),           # the window is at bucket 12
                    (1, 12 * W + 5, 3), (1, 11 * W, 4), (1, 11 * W + 1, 5),  # 11: before it
                    (0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0)], np.int64)
    out, _HP, SC = _replay(ops)
    assert [(int(a), int(b)) for a, b in out[:, :2] if a >= 0] == [
        (10 * W, 1), (11 * W, 4), (11 * W + 1, 5), (12 * W, 2), (12 * W + 5, 3)]
    assert SC[K.SC_HEAP] == 0
