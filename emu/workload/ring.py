"""Ring Attention and Zigzag Ring Attention prefill (schemes.md).

For attn(c, l, .) the nodes run N - 1 ring steps. At step s node n forwards to its ring
successor the set it received at step s - 1 (at step 0 its own blocks (j, n, l), j <= c),
so at step s it holds the set of owner (n - s) mod N and computes a partial attention on
it while the next set is in flight; the partials merge in order (online softmax), so each
step's op depends on the previous one. Received sets are transient. Ring order is board
order: on a topology where n and n+1 are not adjacent the NIC routes the extra hops.
Zigzag differs only in the layout (pieces n and 2N-1-n), hence in the attention work.
"""

from __future__ import annotations

from .builder import OpBuilder
from .enums import Dtype, Kind, MsgOp, Residency, Stage


def generate(b: OpBuilder, layout, model, nodes: list[int] | None = None) -> dict:
    """Append the prefill ops. ``nodes`` maps ring position -> board (default: 0..N-1)."""
    N, C, L = layout.nodes, layout.n_chunks, layout.layers
    board = nodes or list(range(N))
    kv_dtype = Dtype[model.kv_dtype]
    qkv = [[[-1] * N for _ in range(L)] for _ in range(C)]
    attn_last = [[[-1] * N for _ in range(L)] for _ in range(C)]
    mlp = [[[-1] * N for _ in range(L)] for _ in range(C)]
    sent_bytes = 0
    for c in range(C):
        # per owner: tokens of its blocks j <= c, and the work of node n on owner o's set
        set_tokens = [sum(layout.tokens(j, o) for j in range(c + 1)) for o in range(N)]
        pairs = [[sum(layout.pairs(c, n, j, o) for j in range(c + 1)) for o in range(N)] for n in range(N)]
        for l in range(L):
            for n in range(N):
                prev = [mlp[c][l - 1][n]] if l else ([mlp[c - 1][L - 1][n]] if c else [])
                qkv[c][l][n] = b.compute(Kind.qkv, Stage.prefill, board[n], c, l, -1, model.qkv(layout.tokens(c, n)), prev,
                                         produces=(layout.kv_id(c, board[n], l), model.kv_bytes(layout.tokens(c, n))))
            last = [-1] * N
            for n in range(N):
                q = layout.tokens(c, n)
                last[n] = b.compute(Kind.attn, Stage.prefill, board[n], c, l, 0,
                                    model.attn(q, set_tokens[n], pairs[n][n]), [qkv[c][l][n]])
            recv = [-1] * N  # recv[n]: the send delivering to n at the previous step
            for s in range(N - 1):
                sends = [-1] * N
                for n in range(N):
                    o = (n - s) % N  # owner of the set n holds at step s
                    nbytes = model.kv_bytes(set_tokens[o])
                    sends[n] = b.send(Stage.prefill, MsgOp.kv_transfer, board[n], [board[(n + 1) % N]], nbytes,
                                      chunk=c, layer=l, step=s, kv_id=layout.kv_id(c, board[o], l), dtype=kv_dtype,
                                      residency=Residency.transient,
                                      deps=[qkv[c][l][n]] if s == 0 else [recv[n]])
                    sent_bytes += nbytes
                recv = [sends[(n - 1) % N] for n in range(N)]
                for n in range(N):
                    o = (n - s - 1) % N
                    last[n] = b.compute(Kind.attn, Stage.prefill, board[n], c, l, s + 1,
                                        model.attn(layout.tokens(c, n), set_tokens[o], pairs[n][o]), [last[n], recv[n]])
            for n in range(N):
                attn_last[c][l][n] = last[n]
                mlp[c][l][n] = b.compute(Kind.mlp, Stage.prefill, board[n], c, l, -1, model.mlp(layout.tokens(c, n)), [last[n]])
    return {"qkv": qkv, "attn_last": attn_last, "mlp": mlp, "stats": {"ring_bytes": sent_bytes}}
