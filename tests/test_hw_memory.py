"""What `emu hw serve` holds for other boards, measured: the memory Python really allocates
for incomplete messages and waiting reductions (tracemalloc), against the bounds serve
accounts them by (ServeLimits.partial_bytes, reduction_bytes)."""

import tracemalloc

import numpy as np
import pytest

from emu.codec import Collective, Dtype, Op, ReduceOp, encode_frames, fragment
from emu.hw import board as M
from emu.hw.serve import Device, ServeLimits

from test_hw import FakeSock

BOUND = 1 << 20


def traced(batches, d: Device) -> tuple[int, int]:
    """(memory held after, peak while) ``d`` handles ``batches``, above what it held before."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for b in batches:
            d.handle(*b)
        now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return now - base, peak - base


def partial_messages(payload: int, per_message: int, n: int, first_id: int = 0) -> list:
    """Batches of ``per_message`` fragments of ``n`` messages that never complete."""
    out = []
    for first in range(first_id, first_id + n, 64):
        hs, ps = [], []
        for m in range(first, min(first_id + n, first + 64)):
            meta = dict(op=int(Op.kv_transfer), src_node=0, dst_set=1 << 1, msg_id=m)
            if payload:
                h, p = fragment(meta, data=b"x" * (payload * (per_message + 1)), mtu=payload + 48)
            else:  # timing mode: no payload bytes held
                h, p = fragment(meta, 1452 * (per_message + 1))
            hs.append(h[:per_message])
            ps.append(p[: payload * per_message] if payload else np.zeros(0, np.uint8))
        out.append(encode_frames(np.concatenate(hs), np.concatenate(ps) if payload else None))
    return out


@pytest.mark.parametrize("payload, per_message", [(1452, 1), (1452, 16), (100, 1), (100, 16), (0, 1)])
def test_incomplete_messages_hold_no_more_memory_than_the_bound(payload, per_message):
    d = Device(M.Board(node=1), FakeSock(),
               limits=ServeLimits(partial_bytes=BOUND, partial_messages=10**6, partial_age_s=1e9))
    d.handle(*partial_messages(payload, per_message, 1, first_id=10**6)[0])  # first calls' one-time costs
    batches = partial_messages(payload, per_message, 3 * BOUND // (per_message * (payload + 256) + 1024))
    held, peak = traced(batches, d)
    r = d.reasm
    print(f"\npayload {payload} x {per_message} per message: {r.incomplete:,} held, {r.evicted:,} evicted; "
          f"accounted {r.held_bytes:,} of {BOUND:,}; traced {held:,} after, peak {peak:,}")
    assert r.evicted > 0 and r.held_bytes <= BOUND
    assert held <= BOUND, f"{held:,} bytes really held under a bound of {BOUND:,}"
    assert held >= BOUND // 3  # the accounting is not wildly pessimistic either
    # at the peak, besides what is held: the batch being decoded
    assert peak <= BOUND + 2 * max(len(buf) for buf, _ in batches)


def contributions(n: int, size: int, src: int = 2, first: int = 0) -> list:
    """``n`` contributions of node ``src`` (a child of node 1 on bring:4, root 0) to ``n``
    different reductions, each waiting for node 1's own contribution."""
    meta = dict(op=int(Op.partial_state), collective=int(Collective.reduce), reduce_op=int(ReduceOp.sum),
                dtype=int(Dtype.fp32), src_node=src, dst_set=1 << 1)
    rng = np.random.default_rng(0)
    return [encode_frames(*fragment(dict(meta, kv_id=k, msg_id=k), data=rng.bytes(size)))
            for k in range(first, first + n)]


def test_waiting_reductions_are_bounded_by_bytes_oldest_evicted_and_expire():
    size = 64 << 10
    d = Device(M.Board(node=1), FakeSock(), limits=ServeLimits(reduction_bytes=BOUND, partial_age_s=1e9))
    batches = contributions(3 * BOUND // size + 1, size)
    d.handle(*batches[0])  # first calls' one-time costs
    held, peak = traced(batches[1:], d)
    batches = batches[1:]
    waiting = len(d.reductions)
    print(f"\n{len(batches)} contributions of {size:,} bytes: {waiting} waiting, "
          f"{d.count['reductions_evicted']} evicted; accounted {d.reduction_bytes:,} of {BOUND:,}; "
          f"traced {held:,} after, peak {peak:,}")
    assert d.count["reductions_evicted"] == len(batches) + 1 - waiting > 0
    # besides the reductions, serve remembers each completed message (its key and seq)
    assert d.reduction_bytes <= BOUND and held <= BOUND + len(batches) * 2048
    assert {k[2] for k in d.reductions} == set(range(len(batches) + 1 - waiting, len(batches) + 1))  # the newest
    assert "reductions 0 expired, %d evicted" % d.count["reductions_evicted"] in d.summary()
    # a contribution larger than the whole bound is not held
    d.handle(*contributions(1, BOUND, first=1000)[0])
    assert d.count["reductions_too_large"] == 1 and len(d.reductions) == waiting
    # none completes: all expire once older than reduction_age_s
    import time

    assert d.expire_reductions(now=time.monotonic() + d.limits.reduction_age_s + 1) == waiting
    assert not d.reductions and d.reduction_bytes == 0 and d.count["reductions_expired"] == waiting


def test_a_reduction_completes_as_before_and_its_bytes_are_released():
    d = Device(M.Board(node=1), FakeSock())
    (child,) = contributions(1, 4096)
    d.handle(*child)
    assert len(d.reductions) == 1 and d.reduction_bytes > 4096
    own = contributions(1, 4096, src=1)[0]  # the compute engine's own, over the wire
    d.handle(*own)
    assert not d.reductions and d.reduction_bytes == 0 and d.count["reductions"] == 1


def test_the_serve_loop_drops_a_reduction_that_waits_too_long(monkeypatch):
    """The loop itself expires waiting reductions (ServeLimits.reduction_age_s), on serve's
    clock: kept while not older than the bound, dropped and counted once older."""
    from types import SimpleNamespace

    from emu.hw import serve

    now = [100.0]
    monkeypatch.setattr(serve, "time", SimpleNamespace(monotonic=lambda: now[0]))
    d = Device(M.Board(node=1), FakeSock(), limits=ServeLimits(reduction_age_s=1.0, partial_age_s=1e9))
    d.handle(*contributions(1, 4096)[0])
    assert len(d.reductions) == 1

    def recv(timeout):  # nothing arrives; 0.5 s passes per look
        now[0] += 0.5
        return np.zeros(0, np.uint8), np.zeros(1, np.int64), None

    d.sock.recv = recv
    d.run(stop=lambda: now[0] >= 101.0)  # waited 1 s: not older than the bound
    assert len(d.reductions) == 1 and d.reduction_bytes > 4096
    d.run(stop=lambda: now[0] >= 101.5)
    assert not d.reductions and d.reduction_bytes == 0 and d.count["reductions_expired"] == 1
