"""KV-stationary decode (distributed Flash-Decoding), the same for every scheme.

Per generated token t and layer l: the leader computes the token's QKV, multicasts the
query to the other KV holders, every holder attends over its local shard (the leader also
over the new token's own KV), the NICs reduce the partial states (m, l, o~) with
reduce_op = merge onto the leader, and the leader runs the dense part. The new token's KV
goes to the holder with the smallest shard (ties: lowest id); it is readable there from
token t + 1. ``chunk`` holds the decode step t of decode ops.

Head-sharded layouts (Ulysses, USP) decode the same way: a *group* of holders that
together hold every KV head of a token range takes the role of one holder. Each member
attends with its query heads over its group's tokens, the new token's KV goes to the
group with the fewest tokens (each member gets its KV heads' part), and the NICs merge
H_q-head states in which a member's missing heads are the merge's identity (-inf, 0, 0),
so the result is exact and the reduction is the same as for sequence shards.
"""

from __future__ import annotations

from .builder import OpBuilder
from .enums import Dtype, Kind, MsgOp, ReduceOp, Residency, Stage


def generate(b: OpBuilder, model, layers: int, leader: int, shards: dict[int, int], first_dep: int,
             tokens: int, kv_id, heads: dict[int, tuple[int, int]] | None = None,
             groups: dict[int, list[int]] | None = None) -> dict:
    """Append ``tokens`` decode steps after op ``first_dep`` (the first token's LM head).

    ``shards`` maps each KV holder to its token count; ``kv_id(t, node, layer)`` names the
    block of decode token t's KV. Head-sharded layouts also give ``heads[h]`` = (query
    heads, KV heads) of holder h and ``groups[g]`` = the holders that together hold group
    g's tokens (``shards`` is then keyed by group); by default every holder is its own group
    with every head.
    """
    if groups is None:
        groups = {h: [h] for h in shards}
    heads = heads or {h: (model.heads, model.kv_heads) for g in groups.values() for h in g}
    shards = dict(shards)
    group_of = {h: g for g, hs in groups.items() for h in hs}
    holders = sorted(group_of)
    others = [h for h in holders if h != leader]
    act, kvd = Dtype[model.act_dtype], Dtype[model.kv_dtype]
    prev, placed = first_dep, []
    moved = {}  # layer -> {node: op} of the previous token's KV transfers
    for t in range(tokens):
        g = min(groups, key=lambda x: (shards[x], x))
        store = groups[g]
        placed.append(g)
        step_moves = {}
        for l in range(layers):
            # The new token's KV stays at the leader when it stores a part, the rest moves.
            own = (kv_id(t, leader, l), model.kv_head_bytes(1, heads[leader][1])) if leader in store else None
            q = b.compute(Kind.decode_qkv, Stage.decode, leader, t, l, -1, model.qkv(1), [prev], produces=own)
            step_moves[l] = {}
            for x in store:
                if x != leader:
                    step_moves[l][x] = b.send(Stage.decode, MsgOp.kv_transfer, leader, [x],
                                              model.kv_head_bytes(1, heads[x][1]), chunk=t, layer=l,
                                              kv_id=kv_id(t, x, l), dtype=kvd, residency=Residency.owner, deps=[q])
            query = None
            if others:
                query = b.send(Stage.decode, MsgOp.query, leader, others, model.query_bytes, chunk=t, layer=l,
                               dtype=act, deps=[q])
            parts = []
            for h in holders:
                hq, hkv = heads[h]
                n_kv = shards[group_of[h]]
                flops, mem = model.attn(1, n_kv, n_kv, hq, hkv)
                if h == leader:  # the leader also attends over the new token itself, every head
                    flops += model.attn(1, 1, 1)[0]
                    mem += model.kv_head_bytes(1, model.kv_heads) + 2 * model.act((model.heads - hq) * model.head_dim)
                deps = [q] if h == leader else [query]
                if h in moved.get(l, {}):
                    deps.append(moved[l][h])
                parts.append(b.compute(Kind.decode_attn, Stage.decode, h, t, l, -1, (flops, mem), deps))
            if others:
                merged = b.reduce(Stage.decode, MsgOp.partial_state, ReduceOp.merge, holders, leader, model.state_bytes,
                                  chunk=t, layer=l, dtype=Dtype.fp32, deps=parts)
            else:
                merged = parts[0]
            prev = b.compute(Kind.decode_mlp, Stage.decode, leader, t, l, -1, model.mlp(1), [merged])
        prev = b.compute(Kind.decode_lm_head, Stage.decode, leader, t, -1, -1, model.lm_head(1), [prev])
        moved = step_moves
        shards[g] += 1
    return {"new_token_nodes": placed, "final_shards": [shards[g] for g in sorted(groups)]}
