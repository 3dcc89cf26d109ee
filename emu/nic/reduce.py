"""The reduction engine's arithmetic: max, sum and the online-softmax merge, in fp32.

A partial attention state per head is (m, l, o~): the running max of the scores,
the sum of exp(score - m), and the unnormalised output sum of exp(score - m) * v.
Merging two states is exact and associative (identity: (-inf, 0, 0)):

    m = max(m_a, m_b);  l = e^(m_a-m) l_a + e^(m_b-m) l_b;  o~ = e^(m_a-m) o~_a + e^(m_b-m) o~_b

and the attention output is o~ / l. A datapath with only max and sum gets the
same result in two passes: all-reduce max of m, rescale locally, all-reduce sum
of (l, o~).

On the wire a state is packed as fp32 or fp16 values: H maxima, H sums, then
H*d outputs. Whatever the wire type, arithmetic is fp32.
"""

from __future__ import annotations

import numpy as np

from ..codec import Dtype, ReduceOp

WIRE_DTYPES = {Dtype.fp32: np.dtype("<f4"), Dtype.fp16: np.dtype("<f2")}


def _wire(dtype) -> np.dtype:
    try:
        return WIRE_DTYPES[Dtype(dtype)]
    except (KeyError, ValueError):
        raise ValueError(f"reductions carry fp32 or fp16 payloads, not {dtype!r}") from None


def state_len(heads: int, head_dim: int, dtype) -> int:
    """Bytes of one packed (m, l, o~) state."""
    return heads * (head_dim + 2) * _wire(dtype).itemsize


def pack_state(m: np.ndarray, l: np.ndarray, o: np.ndarray, dtype) -> bytes:
    w = _wire(dtype)
    return np.concatenate([m.ravel(), l.ravel(), o.ravel()]).astype(w).tobytes()


def unpack_state(buf: bytes, heads: int, head_dim: int, dtype):
    v = np.frombuffer(buf, _wire(dtype)).astype(np.float32)
    if v.size != heads * (head_dim + 2):
        raise ValueError(f"state of {v.size} values, expected {heads * (head_dim + 2)}")
    return v[:heads].copy(), v[heads : 2 * heads].copy(), v[2 * heads :].reshape(heads, head_dim).copy()


def pack_values(x: np.ndarray, dtype) -> bytes:
    return np.asarray(x, np.float32).astype(_wire(dtype)).tobytes()


def unpack_values(buf: bytes, dtype) -> np.ndarray:
    return np.frombuffer(buf, _wire(dtype)).astype(np.float32)


def merge(a, b):
    """Online-softmax merge of two (m, l, o~) states (fp32)."""
    ma, la, oa = a
    mb, lb, ob = b
    m = np.maximum(ma, mb)
    # exp(-inf - -inf) would be nan: an empty state contributes nothing.
    sa = np.where(np.isneginf(ma), 0.0, np.exp(ma - np.where(np.isneginf(m), 0.0, m))).astype(np.float32)
    sb = np.where(np.isneginf(mb), 0.0, np.exp(mb - np.where(np.isneginf(m), 0.0, m))).astype(np.float32)
    return m, (sa * la + sb * lb).astype(np.float32), (sa[:, None] * oa + sb[:, None] * ob).astype(np.float32)


def identity(heads: int, head_dim: int):
    return (np.full(heads, -np.inf, np.float32), np.zeros(heads, np.float32), np.zeros((heads, head_dim), np.float32))


def combine(op: ReduceOp, a: bytes, b: bytes, *, dtype, heads: int = 0, head_dim: int = 0) -> bytes:
    """Combine two packed contributions with ``op``; the result is packed the same way."""
    op = ReduceOp(op)
    if op == ReduceOp.merge:
        s = merge(unpack_state(a, heads, head_dim, dtype), unpack_state(b, heads, head_dim, dtype))
        return pack_state(*s, dtype)
    x, y = unpack_values(a, dtype), unpack_values(b, dtype)
    if x.shape != y.shape:
        raise ValueError(f"contributions of {x.size} and {y.size} values")
    if op == ReduceOp.max:
        return pack_values(np.maximum(x, y), dtype)
    if op == ReduceOp.sum:
        return pack_values(x + y, dtype)
    raise ValueError(f"no reduction for {op.name}")


def partial_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray):
    """A node's partial state for queries ``q`` [H, d] over its shard ``k``, ``v`` [T, Hk, d] (fp32).

    ``Hk`` (key/value heads) divides ``H``; query head h attends with key/value head
    h // (H / Hk) (grouped-query attention; Hk = H is plain multi-head attention).
    """
    q = np.asarray(q, np.float32)
    H, d = q.shape
    T, Hk = k.shape[0], k.shape[1]
    if T == 0:
        return identity(H, d)
    if H % Hk:
        raise ValueError(f"{H} query heads cannot share {Hk} key/value heads")
    g = H // Hk
    scale = np.float32(1.0 / np.sqrt(d))
    k = np.asarray(k, np.float32)
    v = np.asarray(v, np.float32)
    s = (np.matmul(q.reshape(Hk, g, d), k.transpose(1, 2, 0)) * scale).reshape(H, T)
    m = s.max(axis=1)
    p = np.exp(s - m[:, None])
    o = np.matmul(p.reshape(Hk, g, T), v.transpose(1, 0, 2)).reshape(H, d)
    return m.astype(np.float32), p.sum(axis=1).astype(np.float32), o.astype(np.float32)


def finish(state) -> np.ndarray:
    m, l, o = state
    return o / l[:, None]
