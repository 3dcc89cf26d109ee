"""PD disaggregation (DistServe-style): Ring prefill on P nodes, KV handoff to D nodes.

Boards 0..P-1 prefill (Ring Attention among themselves), boards P..N-1 decode. Block
(c, p, l) goes to decode board P + (c*P + p) mod D, which gives every decode board an even
share when D divides C*P (with P = D: prefill board p hands everything to board P + p).
The handoff is either one bulk transfer per (prefill board, decode board, layer) once that
prefill board has finished, or streamed block by block as each block is produced.
The first token's LM head runs on the decode leader (board P), after the last token's
hidden state and every handoff arrived: TTFT includes the handoff.
"""

from __future__ import annotations

from ..errors import ConfigError
from . import ring
from .builder import OpBuilder
from .enums import Dtype, Kind, MsgOp, Residency, Stage

MODES = ("bulk", "stream")


def split(nodes: int, prefill: int | None) -> tuple[int, int]:
    P = nodes // 2 if prefill is None else prefill
    if not 1 <= P < nodes:
        raise ConfigError(f"--prefill-nodes must be in 1..{nodes - 1} for {nodes} nodes, got {P}")
    return P, nodes - P


def generate(b: OpBuilder, layout, model, nodes: int, mode: str, order: list[int] | None = None) -> dict:
    """``layout`` slices the prompt over the P prefill boards; ``order`` is their ring."""
    if mode not in MODES:
        raise ConfigError(f"--pd-mode must be one of {', '.join(MODES)}, got {mode!r}")
    P, C, L = layout.nodes, layout.n_chunks, layout.layers
    D = nodes - P
    dest = lambda c, p: P + (c * P + p) % D  # noqa: E731
    out = ring.generate(b, layout, model, order)
    kvd = Dtype[model.kv_dtype]
    handoff, hand_bytes = [], 0
    if mode == "stream":
        for c in range(C):
            for l in range(L):
                for p in range(P):
                    nbytes = model.kv_bytes(layout.tokens(c, p))
                    handoff.append(b.send(Stage.prefill, MsgOp.kv_transfer, p, [dest(c, p)], nbytes, chunk=c, layer=l,
                                          kv_id=layout.kv_id(c, p, l), dtype=kvd, residency=Residency.owner,
                                          deps=[out["qkv"][c][l][p]]))
                    hand_bytes += nbytes
    else:
        for p in range(P):
            done = out["mlp"][C - 1][L - 1][p]
            for d in sorted({dest(c, p) for c in range(C)}):
                cs = [c for c in range(C) if dest(c, p) == d]
                for l in range(L):
                    nbytes = sum(model.kv_bytes(layout.tokens(c, p)) for c in cs)
                    # one message, every block it carries listed: each leaves p's memory on delivery
                    handoff.append(b.send(Stage.prefill, MsgOp.kv_transfer, p, [d], nbytes, chunk=cs[-1], layer=l,
                                          kv_id=layout.kv_id(cs[-1], p, l), dtype=kvd, residency=Residency.owner,
                                          deps=[done], blocks=[layout.kv_id(c, p, l) for c in cs]))
                    hand_bytes += nbytes
    last = layout.holder_of_last_token()
    leader = P
    hidden = b.send(Stage.prefill, MsgOp.query, last, [leader], model.hidden_bytes, chunk=C - 1, layer=L - 1,
                    dtype=Dtype[model.act_dtype], deps=[out["mlp"][C - 1][L - 1][last]])
    lm = b.compute(Kind.lm_head, Stage.prefill, leader, C - 1, -1, -1, model.lm_head(1), [hidden] + handoff)
    shards = {d: 0 for d in range(P, nodes)}
    for c in range(C):
        for p in range(P):
            shards[dest(c, p)] += layout.tokens(c, p)
    out.update(lm_head=lm, leader=leader, shards=shards, handoff_bytes=hand_bytes,
               handoff={"prefill_nodes": list(range(P)), "decode_nodes": list(range(P, nodes)), "mode": mode,
                        "dest": [[dest(c, p) for p in range(P)] for c in range(C)]})
    return out
