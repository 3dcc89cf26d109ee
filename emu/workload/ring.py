"""Ring Attention and Zigzag Ring Attention prefill (schemes.md).

For attn(c, l, .) the nodes run N - 1 ring steps. At step s node n forwards to its ring
successor the set it received at step s - 1 (at step 0 its own blocks (j, n, l), j <= c),
so at step s it holds the set of owner (n - s) mod N and computes a partial attention on
it while the next set is in flight; the partials merge in order (online softmax), so each
step's op depends on the previous one. Received sets are transient. The ring's order is
given (``order``: ring position -> board): by default the topology's best ring embedding
(every step one link on a torus, an even mesh, a ring), ``--ring-order boards`` 0..N-1.
Board b keeps slice b of every chunk whatever its ring position, so the layout (and the
final owner-only shard) does not depend on the order; only who sends to whom does.
Zigzag differs only in the layout (pieces n and 2N-1-n), hence in the attention work.

Two options (docs/workloads.md, "Baseline options"):
- ``forward``: "after-compute" (ring-flash-attention's double buffer: the set held at step
  s leaves once the attention of step s - 1 is done, so a board holds at most the set it
  computes on and the one arriving) or "on-arrival" (a set leaves as soon as it is whole).
- ``lookahead``: the history blocks (j < c) circulate as their own ring, started at the
  layer's start (once the board's attention of the layer before is done, as MARS pushes
  one layer ahead) instead of after this layer's QKV; chunk c's blocks follow their QKV.
  The same bytes cross the same links, in two messages per step instead of one.
"""

from __future__ import annotations

from .builder import OpBuilder
from .enums import Dtype, Kind, MsgOp, Residency, Stage

FORWARDS = ("after-compute", "on-arrival")


def _pace(attn_last, c: int, l: int, x: int, L: int) -> list[int]:
    """The layer's start for history: board x finished the attention of the layer before."""
    if l > 0:
        return [attn_last[c][l - 1][x]]
    return [attn_last[c - 1][L - 1][x]] if c > 0 else []


def generate(b: OpBuilder, layout, model, order: list[int] | None = None, *, forward: str = "after-compute",
             lookahead: bool = False) -> dict:
    """Append the prefill ops. ``order`` maps ring position -> board (default: 0..N-1).
    Tables are indexed by board: ``qkv[c][l][board]``."""
    N, C, L = layout.nodes, layout.n_chunks, layout.layers
    board = list(order) if order is not None else list(range(N))
    if sorted(board) != list(range(N)):
        raise ValueError(f"ring order {board} is not a permutation of boards 0..{N - 1}")
    if forward not in FORWARDS:
        raise ValueError(f"ring forward {forward!r} is not one of {FORWARDS}")
    kv_dtype = Dtype[model.kv_dtype]
    qkv = [[[-1] * N for _ in range(L)] for _ in range(C)]
    attn_last = [[[-1] * N for _ in range(L)] for _ in range(C)]
    mlp = [[[-1] * N for _ in range(L)] for _ in range(C)]
    sent_bytes = 0
    for c in range(C):
        # per owner: tokens of its blocks j <= c (history j < c apart when it circulates
        # ahead), and the work of node n on owner o's set (indexed by board)
        set_tokens = [sum(layout.tokens(j, o) for j in range(c + 1)) for o in range(N)]
        hist_tokens = [set_tokens[o] - layout.tokens(c, o) for o in range(N)]
        pairs = [[sum(layout.pairs(c, n, j, o) for j in range(c + 1)) for o in range(N)] for n in range(N)]
        split = lookahead and c > 0
        # (tokens per owner, newest chunk of the set, starts after QKV) of each circulating ring
        rings = ([(hist_tokens, c - 1, False), ([layout.tokens(c, o) for o in range(N)], c, True)] if split
                 else [(set_tokens, c, True)])
        for l in range(L):
            for x in board:
                prev = [mlp[c][l - 1][x]] if l else ([mlp[c - 1][L - 1][x]] if c else [])
                qkv[c][l][x] = b.compute(Kind.qkv, Stage.prefill, x, c, l, -1, model.qkv(layout.tokens(c, x)), prev,
                                         produces=(layout.kv_id(c, x, l), model.kv_bytes(layout.tokens(c, x))))
            last = {}  # board -> its latest partial-attention op
            for x in board:
                last[x] = b.compute(Kind.attn, Stage.prefill, x, c, l, 0,
                                    model.attn(layout.tokens(c, x), set_tokens[x], pairs[x][x]), [qkv[c][l][x]])
            before = dict(last)  # board -> the attention op before its latest (after-compute forwarding)
            recv = [[-1] * N for _ in rings]  # recv[k][n]: ring k's send delivering to position n
            for s in range(N - 1):
                for k, (tokens, newest, after_qkv) in enumerate(rings):
                    sends = [-1] * N
                    for n in range(N):
                        x, o = board[n], board[(n - s) % N]  # o: owner of the set position n holds
                        if s == 0:
                            deps = [qkv[c][l][x]] if after_qkv else _pace(attn_last, c, l, x, L)
                        else:
                            deps = [recv[k][n]] + ([before[x]] if forward == "after-compute" else [])
                        nbytes = model.kv_bytes(tokens[o])
                        sends[n] = b.send(Stage.prefill, MsgOp.kv_transfer, x, [board[(n + 1) % N]], nbytes,
                                          chunk=c, layer=l, step=s, kv_id=layout.kv_id(newest, o, l), dtype=kv_dtype,
                                          residency=Residency.transient, deps=deps)
                        sent_bytes += nbytes
                    recv[k] = [sends[(n - 1) % N] for n in range(N)]
                for n in range(N):
                    x, o = board[n], board[(n - s - 1) % N]
                    before[x] = last[x]
                    last[x] = b.compute(Kind.attn, Stage.prefill, x, c, l, s + 1,
                                        model.attn(layout.tokens(c, x), set_tokens[o], pairs[x][o]),
                                        [last[x]] + [r[n] for r in recv])
            for x in board:
                attn_last[c][l][x] = last[x]
                mlp[c][l][x] = b.compute(Kind.mlp, Stage.prefill, x, c, l, -1, model.mlp(layout.tokens(c, x)), [last[x]])
    return {"qkv": qkv, "attn_last": attn_last, "mlp": mlp, "stats": {"ring_bytes": sent_bytes}}
