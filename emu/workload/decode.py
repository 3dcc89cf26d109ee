"""KV-stationary decode (distributed Flash-Decoding), the same for every scheme.

Per generated token t and layer l: the leader computes the token's QKV, multicasts the
query to the other KV holders, every holder attends over its local shard (the leader also
over the new token's own KV), the NICs reduce the partial states (m, l, o~) with
reduce_op = merge onto the leader, and the leader runs the dense part. The new token's KV
goes to the holder with the smallest shard (ties: lowest id); it is readable there from
token t + 1. ``chunk`` holds the decode step t of decode ops.
"""

from __future__ import annotations

from .builder import OpBuilder
from .enums import Dtype, Kind, MsgOp, ReduceOp, Residency, Stage


def generate(b: OpBuilder, model, layers: int, leader: int, shards: dict[int, int], first_dep: int,
             tokens: int, kv_id) -> dict:
    """Append ``tokens`` decode steps after op ``first_dep`` (the first token's LM head).

    ``shards`` maps each KV holder to its token count; ``kv_id(t, node, layer)`` names the
    block of decode token t's KV.
    """
    shards = dict(shards)
    holders = sorted(shards)
    others = [h for h in holders if h != leader]
    act, kvd = Dtype[model.act_dtype], Dtype[model.kv_dtype]
    prev, placed = first_dep, []
    moved = {}  # layer -> (node, op) of the previous token's KV transfer
    for t in range(tokens):
        x = min(holders, key=lambda h: (shards[h], h))
        placed.append(x)
        step_moves = {}
        for l in range(layers):
            # The new token's KV stays at the leader when it is the smallest shard, else moves.
            q = b.compute(Kind.decode_qkv, Stage.decode, leader, t, l, -1, model.qkv(1), [prev],
                          produces=(kv_id(t, x, l), model.kv_bytes(1)) if x == leader else None)
            if x != leader:
                step_moves[l] = (x, b.send(Stage.decode, MsgOp.kv_transfer, leader, [x], model.kv_bytes(1), chunk=t,
                                           layer=l, kv_id=kv_id(t, x, l), dtype=kvd, residency=Residency.owner, deps=[q]))
            query = None
            if others:
                query = b.send(Stage.decode, MsgOp.query, leader, others, model.query_bytes, chunk=t, layer=l,
                               dtype=act, deps=[q])
            parts = []
            for h in holders:
                n_kv = shards[h] + (1 if h == leader else 0)
                deps = [q] if h == leader else [query]
                if l in moved and moved[l][0] == h:
                    deps.append(moved[l][1])
                parts.append(b.compute(Kind.decode_attn, Stage.decode, h, t, l, -1, model.attn(1, n_kv, n_kv), deps))
            if others:
                merged = b.reduce(Stage.decode, MsgOp.partial_state, ReduceOp.merge, holders, leader, model.state_bytes,
                                  chunk=t, layer=l, dtype=Dtype.fp32, deps=parts)
            else:
                merged = parts[0]
            prev = b.compute(Kind.decode_mlp, Stage.decode, leader, t, l, -1, model.mlp(1), [merged])
        prev = b.compute(Kind.decode_lm_head, Stage.decode, leader, t, -1, -1, model.lm_head(1), [prev])
        moved = step_moves
        shards[x] += 1
    return {"new_token_nodes": placed, "final_shards": [shards[h] for h in holders]}
