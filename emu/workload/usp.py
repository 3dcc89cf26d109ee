"""Ulysses (DeepSpeed-Ulysses) and USP (Ulysses x Ring) prefill, schemes.md.

The N boards form R = N / u Ulysses groups of u members. Chunk c is cut into R group
slices (the ring's sequence parallelism, as Ring cuts it into N), and group g's slice
into u member slices (the Ulysses sequence shards). Per chunk c and layer l:

  qkv(c,l,x)        every board, over its member slice (all heads)
  all-to-all Q      inside each group: member slices of Q -> head shards over the group slice
  all-to-all KV     the same for K and V; member k then owns block (c, x, l): the group
                    slice's K and V of its KV heads (it stays there: the KV cache is
                    head-sharded inside a group, sequence-sharded across groups)
  attn              member k's query heads over the group slice; with R > 1 a ring over the
                    R boards that are member k of their group (Ring Attention, one set per
                    step, transient), on the topology's ring embedding
  all-to-all O      head shards of the attention output -> member slices
  mlp(c,l,x)        every board, over its member slice

Ulysses is u = N (R = 1: no ring); USP takes u (default: the GQA limit, below) and
R = N / u; u = 1 is Ring Attention.

Heads: with u <= H_q the u members get near-equal contiguous runs of query heads (H_q / u
each when u divides H_q; otherwise the first H_q mod u members one more, and they set the
pace of attention); with u > H_q the last H_q members get one head each and the first
u - H_q none (they still run QKV and MLP of their slices, but no attention: the query
heads limit how many boards Ulysses can use). A member holds the KV heads its query heads use (GQA: query head
h uses KV head h // (H_q / H_kv)). Past u = H_kv a KV head is held by several members of a
group: that replication is real bytes in the KV all-to-all and real memory, and is
counted. Without replication the degree is at most H_kv (Qwen2.5-1.5B: 2).

An exchange carries one uniform block per (source, destination) pair. Where members
hold different head counts, one exchange is emitted per head count (of the destinations
for Q and KV, of the sources for the output), running side by side on the NICs. A member
slice must split exactly: every chunk's token count must be a multiple of N.

Two all-to-all modes (``all_to_all``):
- "concurrent" (DeepSpeed-Ulysses and yunchang call NCCL's all_to_all_single, which posts
  every pair at once): one unicast send per (source, destination) pair, all posted when the
  sources' QKV (or attention) is done, interleaved by the NICs; a member's QKV registers the
  group slice's KV block it will own (its own part is already there), and the pairs deliver
  the rest.
- "pairwise": one all_to_all op per exchange, on the NIC's all-to-all engine and its
  pairwise shift schedule (N - 1 steps, one block of a member in flight at a time).

Degrees (``degrees``): DeepSpeed-Ulysses and yunchang split the query heads evenly (H_q
divisible by the degree); ``check_degree`` refuses other degrees unless told to allow
uneven splits and idle boards, which no reference accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .builder import OpBuilder
from .enums import Dtype, Kind, MsgOp, Residency, Stage


@dataclass(frozen=True)
class HeadSplit:
    heads: tuple[tuple[int, ...], ...]  # query heads of member k
    kv_heads: tuple[tuple[int, ...], ...]  # KV heads member k holds

    @property
    def active(self) -> list[int]:
        return [k for k, h in enumerate(self.heads) if h]

    @property
    def replication(self) -> float:
        """KV heads held per KV head of the model, inside one group."""
        held = sum(len(k) for k in self.kv_heads)
        return held / len({h for k in self.kv_heads for h in k})


A2A_MODES = ("concurrent", "pairwise")


def degrees(model) -> list[int]:
    """The Ulysses degrees the references accept: those that divide the query heads."""
    return [u for u in range(1, model.heads + 1) if model.heads % u == 0]


def check_degree(model, u: int, what: str) -> None:
    """Refuse a degree whose head split is uneven or leaves boards idle."""
    if model.heads % u:
        ok = ", ".join(map(str, degrees(model)))
        raise ConfigError(f"{what}: Ulysses degree {u} does not divide the model's {model.heads} query heads "
                          f"({'boards would idle' if u > model.heads else 'heads would split unevenly'}); "
                          f"degrees the model allows: {ok} (--uneven-heads to allow it anyway)")


def gqa_limit(model) -> int:
    """The largest Ulysses degree with no KV head held twice: H_kv (each member one KV head
    and its whole query group)."""
    return model.kv_heads


def head_split(model, u: int) -> HeadSplit:
    Hq, Hkv = model.heads, model.kv_heads
    if Hq % Hkv:
        raise ConfigError(f"model has {Hq} query heads and {Hkv} KV heads: not a grouped-query layout")
    group = Hq // Hkv
    if u <= Hq:  # near-equal contiguous runs; the first Hq mod u members one head more
        base, extra = divmod(Hq, u)
        heads, a = [], 0
        for k in range(u):
            n = base + (1 if k < extra else 0)
            heads.append(tuple(range(a, a + n)))
            a += n
        heads = tuple(heads)
    else:  # more members than heads: the last Hq members get one head each
        idle = u - Hq
        heads = tuple((k - idle,) if k >= idle else () for k in range(u))
    kv = tuple(tuple(sorted({h // group for h in hs})) for hs in heads)
    return HeadSplit(heads, kv)


def place(net, u: int, R: int, order: list[int]) -> list[list[int]]:
    """grid[g][k]: the board of member k of group g. Candidates from the ring ``order``:
    groups as runs of u along it, or rings as runs of R (every other ring reversed, so
    member k and k+1 of a group sit side by side where the ring folds back); the one with
    fewer hops in ring steps plus all-to-all pairs wins (ties: the first)."""
    cands = [
        [[order[g * u + k] for k in range(u)] for g in range(R)],
        [[order[k * R + g] for k in range(u)] for g in range(R)],
        [[order[k * R + (g if k % 2 == 0 else R - 1 - g)] for k in range(u)] for g in range(R)],
    ]

    def cost(grid):
        ring = sum(net.hops[grid[g][k], grid[(g + 1) % R][k]] for g in range(R) for k in range(u)) if R > 1 else 0
        a2a = sum(net.hops[grid[g][a], grid[g][b]] for g in range(R) for a in range(u) for b in range(u) if a != b)
        return int(ring) + int(a2a) / max(1, u - 1)

    return min(cands, key=cost)


def generate(b: OpBuilder, lay, model, grid: list[list[int]], split: HeadSplit,
             all_to_all: str = "concurrent") -> dict:
    """Append the prefill ops; ``lay`` cuts chunks into R group slices (kv_nodes = N)."""
    if all_to_all not in A2A_MODES:
        raise ConfigError(f"--all-to-all must be one of {', '.join(A2A_MODES)}, got {all_to_all!r}")
    concurrent = all_to_all == "concurrent"
    R, u = len(grid), len(grid[0])
    C, L = lay.n_chunks, lay.layers
    N = R * u
    boards = [x for row in grid for x in row]
    active = split.active
    hq = {k: len(split.heads[k]) for k in range(u)}
    kvh = {k: len(split.kv_heads[k]) for k in range(u)}
    act, kvd = Dtype[model.act_dtype], Dtype[model.kv_dtype]
    d = model.head_dim
    gt = [[lay.tokens(c, g) for g in range(R)] for c in range(C)]
    for c in range(C):
        for g in range(R):
            if gt[c][g] % u:
                raise ConfigError(
                    f"chunk {c} gives group {g} {gt[c][g]} tokens, which do not split over {u} Ulysses members; "
                    f"use --seq and --chunk multiples of {N}")
    qkv = [[[-1] * N for _ in range(L)] for _ in range(C)]
    attn_last = [[[-1] * N for _ in range(L)] for _ in range(C)]
    mlp = [[[-1] * N for _ in range(L)] for _ in range(C)]
    stats = {"a2a_ops": 0, "a2a_sends": 0, "a2a_q_bytes": 0, "a2a_kv_bytes": 0, "a2a_o_bytes": 0, "ring_bytes": 0}
    kv_owned = {x: [0] * C for x in boards}
    kv_ops = set()  # indices of the ops delivering KV

    def a2a(srcs, dsts, nbytes, msg, dtype, residency, deps, c, l, key) -> dict[int, list[int]]:
        """One exchange; ``deps[s]``: what source s's blocks wait for. Returns, per
        destination, the ops that deliver its blocks there."""
        pairs = [(s, t) for s in srcs for t in dsts if s != t]
        stats["a2a_ops"] += 1
        stats[key] += nbytes * len(pairs)
        if not concurrent:
            i = b.all_to_all(Stage.prefill, msg, srcs, dsts, nbytes, chunk=c, layer=l, dtype=dtype,
                             residency=residency, deps=[i for x in srcs for i in deps[x]])
            ops = {t: [i] for t in dsts}
        else:  # KV: the destination's QKV registered the block it owns; the pairs fill it in
            ops = {t: [] for t in dsts}
            for s, t in pairs:
                ops[t].append(b.send(Stage.prefill, msg, s, [t], nbytes, chunk=c, layer=l, dtype=dtype,
                                     residency=Residency.none, deps=deps[s]))
            stats["a2a_sends"] += len(pairs)
        if msg == MsgOp.kv_transfer:
            kv_ops.update(i for v in ops.values() for i in v)
        return ops

    for c in range(C):
        set_tokens = [sum(gt[j][o] for j in range(c + 1)) for o in range(R)]
        pairs = [[sum(lay.pairs(c, g, j, o) for j in range(c + 1)) for o in range(R)] for g in range(R)]
        for g in range(R):
            for k in active:
                kv_owned[grid[g][k]][c] = model.kv_head_bytes(gt[c][g], kvh[k])
        for l in range(L):
            for g in range(R):
                sub = gt[c][g] // u
                for k in range(u):
                    x = grid[g][k]
                    prev = [mlp[c][l - 1][x]] if l else ([mlp[c - 1][L - 1][x]] if c else [])
                    own = (lay.kv_id(c, x, l), model.kv_bytes(gt[c][g])) if u == 1 else None
                    if u > 1 and concurrent and hq[k]:  # the group slice's KV of its heads, own part included
                        own = (lay.kv_id(c, x, l), model.kv_head_bytes(sub, kvh[k]) * u)
                    qkv[c][l][x] = b.compute(Kind.qkv, Stage.prefill, x, c, l, -1, model.qkv(sub), prev, produces=own)
            here = {x: [] for x in boards}  # the exchanges that bring board x its Q and KV (u > 1)
            if u > 1:
                for g in range(R):
                    sub = gt[c][g] // u
                    srcs = grid[g]
                    deps = {x: [qkv[c][l][x]] for x in srcs}
                    for h in sorted({hq[k] for k in active}):
                        dsts = [grid[g][k] for k in active if hq[k] == h]
                        q = a2a(srcs, dsts, model.act(sub * h * d), MsgOp.query, act, Residency.none, deps, c, l,
                                "a2a_q_bytes")
                        for x in dsts:
                            here[x] += q[x]
                    for h in sorted({kvh[k] for k in active}):
                        dsts = [grid[g][k] for k in active if kvh[k] == h]
                        kv = a2a(srcs, dsts, model.kv_head_bytes(sub, h), MsgOp.kv_transfer, kvd, Residency.owner,
                                 deps, c, l, "a2a_kv_bytes")
                        for x in dsts:
                            here[x] += kv[x]
            last = {}
            for g in range(R):
                for k in active:
                    x = grid[g][k]
                    last[x] = b.compute(Kind.attn, Stage.prefill, x, c, l, 0,
                                        model.attn(gt[c][g], set_tokens[g], pairs[g][g], hq[k], kvh[k]),
                                        [qkv[c][l][x]] + here[x])
            for k in active:  # ring k: member k of every group, in group order
                recv = [-1] * R
                for s in range(R - 1):
                    sends = [-1] * R
                    for g in range(R):
                        o = (g - s) % R  # group whose set position g holds at step s
                        nbytes = model.kv_head_bytes(set_tokens[o], kvh[k])
                        x = grid[g][k]  # its own set is complete once its KV exchange has arrived
                        first = [qkv[c][l][x]] + [i for i in here[x] if i in kv_ops]
                        sends[g] = b.send(Stage.prefill, MsgOp.kv_transfer, grid[g][k], [grid[(g + 1) % R][k]], nbytes,
                                          chunk=c, layer=l, step=s, kv_id=lay.kv_id(c, grid[o][k], l), dtype=kvd,
                                          residency=Residency.transient, deps=first if s == 0 else [recv[g]])
                        stats["ring_bytes"] += nbytes
                    recv = [sends[(g - 1) % R] for g in range(R)]
                    for g in range(R):
                        x, o = grid[g][k], (g - s - 1) % R
                        last[x] = b.compute(Kind.attn, Stage.prefill, x, c, l, s + 1,
                                            model.attn(gt[c][g], set_tokens[o], pairs[g][o], hq[k], kvh[k]),
                                            [last[x], recv[g]])
            back = {x: [] for x in boards}  # the ops that bring board x its output rows
            if u > 1:
                for g in range(R):
                    sub = gt[c][g] // u
                    for h in sorted({hq[k] for k in active}):
                        srcs = [grid[g][k] for k in active if hq[k] == h]
                        o = a2a(srcs, grid[g], model.act(sub * h * d), MsgOp.partial_state, act,
                                Residency.none, {x: [last[x]] for x in srcs}, c, l, "a2a_o_bytes")
                        for x in grid[g]:
                            back[x] += o[x]
            for g in range(R):
                sub = gt[c][g] // u
                for k in range(u):
                    x = grid[g][k]
                    if x in last:
                        attn_last[c][l][x] = last[x]
                    deps = back[x] + ([last[x]] if x in last else [])
                    mlp[c][l][x] = b.compute(Kind.mlp, Stage.prefill, x, c, l, -1, model.mlp(sub), deps)
    node_kv = [[sum(kv_owned[x][: c + 1]) * L if x in kv_owned else 0 for x in range(N)] for c in range(C)]
    return {"qkv": qkv, "attn_last": attn_last, "mlp": mlp, "stats": stats, "node_kv_bytes": node_kv,
            "leader": grid[R - 1][u - 1]}


def decode_layout(lay, model, grid, split):
    """What prefill leaves for decode: per group its tokens, per holder its heads."""
    R = len(grid)
    groups = {g: [grid[g][k] for k in split.active] for g in range(R)}
    shards = {g: sum(lay.tokens(c, g) for c in range(lay.n_chunks)) for g in range(R)}
    heads = {grid[g][k]: (len(split.heads[k]), len(split.kv_heads[k])) for g in range(R) for k in split.active}
    return shards, heads, groups
