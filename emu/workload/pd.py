"""PD disaggregation (DistServe-style): Ring prefill on P nodes, KV handoff to D nodes.

Boards 0..P-1 prefill (Ring Attention among themselves), boards P..N-1 decode. Block
(c, p, l) goes to decode board P + (c*P + p) mod D, which gives every decode board an even
share when D divides C*P (with P = D: prefill board p hands everything to board P + p).
The handoff is either one bulk transfer per (prefill board, decode board, layer) once that
prefill board has finished, or streamed block by block as each block is produced.
Where the first token comes from (``first_token``):
- "prefill" (DistServe, Splitwise): the LM head runs on the prefill board holding the last
  token, so TTFT ends with prefill; the handoff is decode's start (its ops are decode-stage),
  and the token then goes to the decode leader (board P), whose first decode step waits for
  it and for every handoff.
- "decode": the LM head runs on the decode leader after the last token's hidden state and
  every handoff arrived: TTFT includes the handoff.
"""

from __future__ import annotations

from ..errors import ConfigError
from . import ring
from .builder import OpBuilder
from .enums import Dtype, Kind, MsgOp, Residency, Stage

MODES = ("bulk", "stream")
FIRST_TOKENS = ("prefill", "decode")


def split(nodes: int, prefill: int | None) -> tuple[int, int]:
    P = nodes // 2 if prefill is None else prefill
    if not 1 <= P < nodes:
        raise ConfigError(f"--prefill-nodes must be in 1..{nodes - 1} for {nodes} nodes, got {P}")
    return P, nodes - P


def generate(b: OpBuilder, layout, model, nodes: int, mode: str, order: list[int] | None = None, *,
             first_token: str = "prefill", **ring_options) -> dict:
    """``layout`` slices the prompt over the P prefill boards; ``order`` is their ring;
    ``ring_options`` are the prefill ring's (ring.generate)."""
    if mode not in MODES:
        raise ConfigError(f"--pd-mode must be one of {', '.join(MODES)}, got {mode!r}")
    if first_token not in FIRST_TOKENS:
        raise ConfigError(f"--first-token must be one of {', '.join(FIRST_TOKENS)}, got {first_token!r}")
    P, C, L = layout.nodes, layout.n_chunks, layout.layers
    D = nodes - P
    dest = lambda c, p: P + (c * P + p) % D  # noqa: E731
    out = ring.generate(b, layout, model, order, **ring_options)
    stage = Stage.decode if first_token == "prefill" else Stage.prefill  # the handoff's
    kvd = Dtype[model.kv_dtype]
    handoff, hand_bytes = [], 0
    if mode == "stream":
        for c in range(C):
            for l in range(L):
                for p in range(P):
                    nbytes = model.kv_bytes(layout.tokens(c, p))
                    handoff.append(b.send(stage, MsgOp.kv_transfer, p, [dest(c, p)], nbytes, chunk=c, layer=l,
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
                    handoff.append(b.send(stage, MsgOp.kv_transfer, p, [d], nbytes, chunk=cs[-1], layer=l,
                                          kv_id=layout.kv_id(cs[-1], p, l), dtype=kvd, residency=Residency.owner,
                                          deps=[done], blocks=[layout.kv_id(c, p, l) for c in cs]))
                    hand_bytes += nbytes
    last = layout.holder_of_last_token()
    leader = P
    done = out["mlp"][C - 1][L - 1][last]
    if first_token == "prefill":
        lm = b.compute(Kind.lm_head, Stage.prefill, last, C - 1, -1, -1, model.lm_head(1), [done])
        # the token (sent as its hidden-size embedding) starts decode once the KV is there
        start = b.send(Stage.decode, MsgOp.query, last, [leader], model.hidden_bytes, chunk=C - 1, layer=L - 1,
                       dtype=Dtype[model.act_dtype], deps=[lm] + handoff)
    else:
        hidden = b.send(Stage.prefill, MsgOp.query, last, [leader], model.hidden_bytes, chunk=C - 1, layer=L - 1,
                        dtype=Dtype[model.act_dtype], deps=[done])
        lm = start = b.compute(Kind.lm_head, Stage.prefill, leader, C - 1, -1, -1, model.lm_head(1), [hidden] + handoff)
    shards = {d: 0 for d in range(P, nodes)}
    for c in range(C):
        for p in range(P):
            shards[dest(c, p)] += layout.tokens(c, p)
    out.update(lm_head=lm, decode_start=start, leader=leader, shards=shards, handoff_bytes=hand_bytes,
               handoff={"prefill_nodes": list(range(P)), "decode_nodes": list(range(P, nodes)), "mode": mode,
                        "first_token": first_token, "first_token_board": last if first_token == "prefill" else leader,
                        "dest": [[dest(c, p) for p in range(P)] for c in range(C)]})
    return out
