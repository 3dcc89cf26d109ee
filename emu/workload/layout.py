"""Which tokens each node holds: chunks, slices (contiguous or zigzag), causal pair counts,
and the KV block id encoding.

Chunk c covers tokens [c*B, min(S, (c+1)*B)); the last chunk may be shorter. Node n's slice
of a chunk is the n-th of N near-equal contiguous parts (the first T mod N parts one token
longer), or for zigzag the pieces n and 2N-1-n of 2N near-equal parts. Block (c, n, l) is
node n's slice of chunk c at layer l, and its id is ``kv_id = (c*N + n)*L + l``; decode
token t (0-based) uses c = C + t.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..errors import ConfigError

Ranges = tuple[tuple[int, int], ...]


def _split(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    total = end - start
    base, extra = divmod(total, parts)
    out, a = [], start
    for i in range(parts):
        b = a + base + (1 if i < extra else 0)
        out.append((a, b))
        a = b
    return out


def causal_pairs(q: Ranges, k: Ranges) -> int:
    """(query, key) pairs with key position <= query position."""
    total = 0
    for qa, qb in q:
        for ka, kb in k:
            if kb <= ka or qb <= qa:
                continue
            lo, hi = max(qa, ka), min(qb, kb)
            if hi > lo:  # queries inside the key range see keys ka..q
                total += (lo - ka + 1 + hi - ka) * (hi - lo) // 2
            lo = max(qa, kb)
            if qb > lo:  # queries past the key range see all of it
                total += (qb - lo) * (kb - ka)
    return total


def length(r: Ranges) -> int:
    return sum(b - a for a, b in r)


@dataclass(frozen=True)
class Layout:
    seq: int
    chunk: int
    nodes: int
    layers: int
    zigzag: bool = False
    kv_nodes: int = 0  # the N of the kv_id encoding (the trace's node count); 0: ``nodes``

    def __post_init__(self):
        parts = 2 * self.nodes if self.zigzag else self.nodes
        if self.seq < 1:
            raise ConfigError(f"--seq must be >= 1, got {self.seq}")
        if self.chunk < parts:
            raise ConfigError(
                f"--chunk {self.chunk} is smaller than {parts} ({'2 x ' if self.zigzag else ''}{self.nodes} nodes): "
                "every node needs a slice of every chunk")
        last = self.seq - (self.n_chunks - 1) * self.chunk
        if last < parts:
            raise ConfigError(
                f"the last chunk has {last} tokens (--seq {self.seq}, --chunk {self.chunk}), fewer than the {parts} "
                "slices it is cut into; choose a chunk size that leaves a longer last chunk")

    @property
    def n_chunks(self) -> int:
        return -(-self.seq // self.chunk)

    def chunk_range(self, c: int) -> tuple[int, int]:
        return c * self.chunk, min(self.seq, (c + 1) * self.chunk)

    @cached_property
    def _slices(self) -> list[list[Ranges]]:
        out = []
        for c in range(self.n_chunks):
            a, b = self.chunk_range(c)
            if self.zigzag:
                pieces = _split(a, b, 2 * self.nodes)
                out.append([(pieces[n], pieces[2 * self.nodes - 1 - n]) for n in range(self.nodes)])
            else:
                out.append([(r,) for r in _split(a, b, self.nodes)])
        return out

    def slice(self, c: int, n: int) -> Ranges:
        return self._slices[c][n]

    @cached_property
    def _tokens(self) -> list[list[int]]:
        return [[length(r) for r in row] for row in self._slices]

    def tokens(self, c: int, n: int) -> int:
        return self._tokens[c][n]

    def tokens_through(self, c: int) -> int:
        """Tokens of chunks 0..c."""
        return self.chunk_range(c)[1]

    def owner_tokens(self, n: int) -> int:
        """Tokens node n owns at the end of prefill (its owner-only shard)."""
        return sum(self.tokens(c, n) for c in range(self.n_chunks))

    def holder_of_last_token(self) -> int:
        last = self.seq - 1
        c = self.n_chunks - 1
        return next(n for n in range(self.nodes) if any(a <= last < b for a, b in self._slices[c][n]))

    def kv_id(self, c: int, owner: int, layer: int) -> int:
        return (c * (self.kv_nodes or self.nodes) + owner) * self.layers + layer

    def pairs(self, c: int, n: int, j: int, o: int) -> int:
        """Pairs that node n's queries of chunk c compute against block (j, o)."""
        if j < c:
            return self.tokens(c, n) * self.tokens(j, o)
        return causal_pairs(self._slices[c][n], self._slices[j][o])
