"""MARS (and full replication, its r = N corner): the replica plan and its op DAG.

The plan is decided chunk by chunk, as the runtime would (paper 4, schemes.md):

1. r(c) from eq. 16 (memory bound eq. 11 with the exact tokens so far, reuse bound eq. 15).
2. Fit in S_node, per node and exactly: owner blocks + valid replicas + chunk c's new
   replicas. If they do not fit, the history's replica factor is capped at the largest t
   that fits (eq. 11's "same factor for all history"); replicas above the cap are DRAINED
   at this decision. If even t = 1 does not fit, r(c) itself is lowered.
3. After the last chunk every remaining replica is drained (eq. 29): owner-only layout.

Ops per chunk c and layer l (see docs/workloads.md for the dependency reasoning):
  drain / invalidate of the replicas trimmed at decision c (control frames owner -> holders)
  qkv(c,l,n)                      -> owner multicasts block (c,n,l) to its r(c)-1 holders
  prefetch pushes to n            (nearest valid copy -> n, transient, one layer ahead)
  attn(c,l,n) step 0              blocks already local: own + replicas from earlier chunks
  attn(c,l,n) step 1              blocks arriving for this chunk: chunk c's replicas, pushes
  mlp(c,l,n)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from . import analytic
from .builder import OpBuilder
from .enums import Dtype, Kind, MsgOp, Residency, Stage

_BIG = 1 << 30


@dataclass
class Plan:
    policy: str  # "mars" or "full"
    s_node: int | None
    r: list[int]  # replica factor each chunk's blocks are created with
    r_mem: list[int]  # eq. 12 (eq. 11 clipped to 1..N)
    r_reuse: list[int]  # eq. 15
    cap: list[int | None]  # history cap applied at decision c (None: no trim)
    factor: list[list[int]]  # factor[c][j], j <= c: replica factor of chunk j's blocks during chunk c
    trims: list[tuple[int, int, int, int]] = field(default_factory=list)  # (decision, chunk, old, new)
    node_bytes: list[list[int]] = field(default_factory=list)  # per decision c (and final), per node

    def valid_holders(self, net, j: int, o: int, c: int) -> list[int]:
        return net.holders(o, self.factor[c][j])


def make_plan(policy: str, layout, model, net, alpha: float, s_node: int | None) -> Plan:
    N, C, mt = layout.nodes, layout.n_chunks, model.m_token
    tok = np.array([[layout.tokens(c, o) for o in range(N)] for c in range(C)], dtype=np.int64)
    pos = np.full((N, N), _BIG, dtype=np.int64)
    for o in range(N):
        for k, h in enumerate(net.sequences[o]):
            pos[o, h] = k
    mask = [None] + [(pos < f - 1).astype(np.int64) for f in range(1, N + 1)]  # mask[f][o, n]
    T = np.zeros((N + 1, N), dtype=np.int64)  # tokens of history groups, by current factor
    f = [0] * C
    own = np.zeros(N, dtype=np.int64)
    plan = Plan(policy, s_node, [], [], [], [], [])

    def footprint(t: int, r: int, c: int) -> np.ndarray:
        rep = sum(T[k] @ mask[min(k, t)] for k in range(2, N + 1) if T[k].any())
        return (own + rep + tok[c] @ mask[r]) * mt

    for c in range(C):
        p = c + 1  # the paper's 1-indexed chunk
        m_hist = layout.tokens_through(c) * mt
        own += tok[c]
        if policy == "full":
            r, rm, rr, t = N, N, N, N
        else:
            rm = analytic.r_feasible(p, N, s_node, m_hist)
            rr = analytic.r_reuse(p, C, alpha, N)
            r = analytic.r_mars(p, C, N, s_node, m_hist, alpha)
            t = max([k for k in range(1, N + 1) if T[k].any()], default=1)
            while t > 1 and footprint(t, r, c).max() > s_node:
                t -= 1
            while r > 1 and footprint(t, r, c).max() > s_node:
                r -= 1
            if footprint(t, r, c).max() > s_node:
                need = int(footprint(1, 1, c).max())
                raise ConfigError(
                    f"kv budget {s_node} B per node is below the owner-only KV of chunks 0..{c} ({need} B on the "
                    "fullest node); use --kv-budget 1x or more")
        trimmed = False
        for j in range(c):
            if f[j] > t:
                plan.trims.append((c, j, f[j], t))
                T[f[j]] -= tok[j]
                T[t] += tok[j]
                f[j] = t
                trimmed = True
        plan.node_bytes.append([int(x) for x in footprint(N, r, c)])
        f[c] = r
        T[r] += tok[c]
        plan.r.append(r)
        plan.r_mem.append(rm)
        plan.r_reuse.append(rr)
        plan.cap.append(t if trimmed else None)
        plan.factor.append(list(f[: c + 1]))
    for j in range(C):  # end of prefill: every replica drains (eq. 29)
        if f[j] > 1:
            plan.trims.append((C, j, f[j], 1))
            f[j] = 1
    plan.factor.append(list(f))
    plan.node_bytes.append([int(x) for x in own * mt])
    return plan


def _pace(attn_last, c: int, l: int, n: int, L: int, qkv=None) -> list[int]:
    """The prefetch window: blocks for (c, l) are pushed to n once n finished the attention
    of the layer before (its transient copies are then freed): one layer of lookahead.
    Without lookahead (``qkv``: n's QKV of this layer) they wait for it, as Ring's sets do."""
    if qkv is not None:
        return [qkv]
    if l > 0:
        return [attn_last[c][l - 1][n]]
    if c > 0:
        return [attn_last[c - 1][L - 1][n]]
    return []


def generate(b: OpBuilder, layout, model, net, plan: Plan, lookahead: bool = True, stamp_layers: bool = True) -> dict:
    """Append the prefill ops; returns op index tables the decode and the tests use.
    ``lookahead`` False starts each history push after its consumer's QKV of the layer
    (what the attribution of ``emu tune`` turns off; the bytes are the same).
    ``stamp_layers`` False builds every layer op by op (the tests' reference for stamping)."""
    N, C, L = layout.nodes, layout.n_chunks, layout.layers
    qkv = [[[-1] * N for _ in range(L)] for _ in range(C)]
    attn_last = [[[-1] * N for _ in range(L)] for _ in range(C)]
    mlp = [[[-1] * N for _ in range(L)] for _ in range(C)]
    mc = [[[-1] * L for _ in range(N)] for _ in range(C)]  # mc[c][o][l]
    seen = [set() for _ in range(N)]  # replica groups (j, o) an op at n already depended on
    # (j, o) -> replica holder h -> consumer x -> last chunk at which h pushed block (j, o) to x
    served: dict[tuple[int, int], dict[int, dict[int, int]]] = {}
    # push_op[key(HIST, c, l, x, h)] or [key(CUR, c, l, x, o)] -> op index. Integer keys: a
    # 64-board trace makes millions of pushes, and a tuple key costs an object per push.
    push_op: dict[int, int] = {}
    HIST, CUR = 0, 1

    def key(kind: int, c: int, l: int, x: int, y: int) -> int:
        return (((c * L + l) * N + x) * N + y) * 2 + kind
    trims_at: dict[int, list] = {}
    for d, j, old, new in plan.trims:
        trims_at.setdefault(d, []).append((j, old, new))
    stats = {"pushes": 0, "push_bytes": 0, "replica_bytes": 0, "multicasts": 0, "drains": 0}
    # Every layer of a chunk makes the same ops (a layer's costs and decisions do not depend
    # on its index), so layers 0 and 1 are built op by op and layer 1 is stamped for the
    # rest (OpBuilder.repeat_layers): the ops and their order are those of building every
    # layer, for the Python cost of two. A segment is a chunk's ops (or the last decision's
    # controls), laid out layer after layer.
    stamping = stamp_layers and L > 2
    built = 2 if stamping else L
    seg_first: list[int] = []
    seg_step: list[int] = []

    def stamp(first: int, layer0_end: int, before: dict) -> int:
        """Layers 2.. of the segment that began at op ``first``; returns its ops per layer."""
        k = layer0_end - first
        if len(b) - first != 2 * k:
            raise AssertionError(f"layers 0 and 1 of the segment at op {first} differ in their ops")
        seg_first.append(first)
        seg_step.append(k)
        b.repeat_layers(first + k, L - 2, np.array(seg_first), np.array(seg_step))
        for name in stats:
            stats[name] += (L - 2) * (stats[name] - before[name])
        return k

    def later(x: int, l: int, k: int) -> int:
        """Op ``x`` of layer 1 (-1: none) in stamped layer ``l`` of a chunk of ``k`` ops per layer."""
        return x + (l - 1) * k if x >= 0 else x

    def retired(j: int, o: int, h: int, d: int, l: int) -> list[int]:
        """What must finish before holder h may drop its replica of block (j, o, l) at
        decision d: its own last read (chunk d-1's attention) and every push it made of the
        block (the last one per consumer: a consumer's pushes are ordered by its chain)."""
        out = [attn_last[d - 1][l][h]]
        for x, c in sorted(served.get((j, o), {}).get(h, {}).items()):
            out.append(push_op[key(CUR, c, l, x, o)] if c == j else push_op[key(HIST, c, l, x, h)])
        return out

    def control_ops(d: int, l: int) -> dict[int, list[int]]:
        """Drain, then invalidate, the replicas trimmed at decision d; returns, per holder,
        the ops its memory is freed after (new replicas for chunk d wait for them)."""
        freed: dict[int, set] = {}
        for j, old, new in trims_at.get(d, ()):
            for o in range(N):
                gone = net.holders(o, old)[new - 1:]
                if not gone:
                    continue
                kv = layout.kv_id(j, o, l)
                # DRAINING once the holders' last reads (chunk d-1) are under way
                dr = b.control(Kind.drain, o, gone, kv, chunk=d, layer=l,
                               deps=[mc[j][o][l]] + [qkv[d - 1][l][h] for h in gone])
                deps = set()
                for h in gone:
                    r = retired(j, o, h, d, l)
                    deps.update(r)
                    freed.setdefault(h, set()).update(r)
                b.control(Kind.invalidate, o, gone, kv, chunk=d, layer=l, deps=[dr] + sorted(deps))
                stats["drains"] += 1
        return {h: sorted(v) for h, v in freed.items()}

    # per (c, n): what node n reads, and from where (identical for every layer)
    for c in range(C):
        fac = plan.factor[c]
        valid = {(j, o): net.holders(o, fac[j]) for j in range(c + 1) for o in range(N)}
        reads = []
        load = np.zeros(N, dtype=np.int64)
        for n in range(N):
            step0_rep, step1_rep, hist_push, cur_push = [], [], {}, []
            kv0 = kv1 = pairs0 = pairs1 = 0
            for j in range(c + 1):
                for o in range(N):
                    pr = layout.pairs(c, n, j, o)
                    if pr == 0:
                        continue
                    t = layout.tokens(j, o)
                    if o == n:
                        kv0, pairs0 = kv0 + t, pairs0 + pr
                    elif n in valid[(j, o)]:
                        if j < c:
                            step0_rep.append((j, o))
                            kv0, pairs0 = kv0 + t, pairs0 + pr
                        else:
                            step1_rep.append((j, o))
                            kv1, pairs1 = kv1 + t, pairs1 + pr
                    else:
                        copies = [o] + valid[(j, o)]
                        h = min(copies, key=lambda x: (net.hops[n, x], load[x], x))
                        load[h] += 1
                        if j < c:
                            hist_push.setdefault(h, []).append((j, o))
                        else:
                            cur_push.append((h, o))
                        kv1, pairs1 = kv1 + t, pairs1 + pr
            batches = []  # one push per holder: (holder, bytes, newest block, replicas it did not read)
            for h in sorted(hist_push):
                blocks = hist_push[h]
                for j, o in blocks:
                    if h != o:
                        served.setdefault((j, o), {}).setdefault(h, {})[n] = c
                # h's own chain up to attn(c-1) covers its older copies; chunk c-1's replicas
                # that h held but did not read (causally later slices) need their own deps
                unread = [(j, o) for j, o in blocks if j == c - 1 and h != o and layout.pairs(c - 1, h, j, o) == 0]
                nbytes = sum(model.kv_bytes(layout.tokens(j, o)) for j, o in blocks)
                batches.append((h, nbytes, max(blocks), unread))
            for h, o in cur_push:
                if h != o:
                    served.setdefault((c, o), {}).setdefault(h, {})[n] = c
            reads.append((step0_rep, step1_rep, batches, cur_push, kv0, pairs0, kv1, pairs1))

        first = len(b)
        for l in range(built):
            if l == 1:
                layer0_end, before = len(b), dict(stats)
            freed = control_ops(c, l)
            for n in range(N):
                prev = [mlp[c][l - 1][n]] if l else ([mlp[c - 1][L - 1][n]] if c else [])
                qkv[c][l][n] = b.compute(Kind.qkv, Stage.prefill, n, c, l, -1, model.qkv(layout.tokens(c, n)), prev,
                                         produces=(layout.kv_id(c, n, l), model.kv_bytes(layout.tokens(c, n))))
            for o in range(N):
                hs = net.holders(o, plan.r[c])
                if not hs:
                    continue
                # memory: new replicas leave only once the replicas this decision drains at
                # their holders are retired (the invalidate fires on the same ops)
                wait = sorted({x for h in hs for x in freed.get(h, ())})
                nbytes = model.kv_bytes(layout.tokens(c, o))
                mc[c][o][l] = b.send(Stage.prefill, MsgOp.kv_replica, o, hs, nbytes, chunk=c, layer=l,
                                     kv_id=layout.kv_id(c, o, l), dtype=_kv_dtype(model), residency=Residency.replica,
                                     deps=[qkv[c][l][o]] + wait)
                stats["multicasts"] += 1
                stats["replica_bytes"] += nbytes * len(hs)
            pushes = [[] for _ in range(N)]
            for n in range(N):
                _, _, batches, cur_push, *_ = reads[n]
                pace = _pace(attn_last, c, l, n, L, None if lookahead else qkv[c][l][n])
                for h, nbytes, newest, unread in batches:
                    deps = pace + [attn_last[c - 1][l][h]] + [mc[j][o][l] for j, o in unread]
                    push_op[key(HIST, c, l, n, h)] = b.send(
                        Stage.prefill, MsgOp.kv_fetch_resp, h, [n], nbytes, chunk=c, layer=l, step=1,
                        kv_id=layout.kv_id(newest[0], newest[1], l), dtype=_kv_dtype(model),
                        residency=Residency.transient, deps=deps)
                    pushes[n].append(push_op[key(HIST, c, l, n, h)])
                    stats["pushes"] += 1
                    stats["push_bytes"] += nbytes
                for h, o in cur_push:
                    exist = qkv[c][l][o] if h == o else mc[c][o][l]
                    nbytes = model.kv_bytes(layout.tokens(c, o))
                    push_op[key(CUR, c, l, n, o)] = b.send(
                        Stage.prefill, MsgOp.kv_fetch_resp, h, [n], nbytes, chunk=c, layer=l, step=1,
                        kv_id=layout.kv_id(c, o, l), dtype=_kv_dtype(model), residency=Residency.transient,
                        deps=pace + [exist])
                    pushes[n].append(push_op[key(CUR, c, l, n, o)])
                    stats["pushes"] += 1
                    stats["push_bytes"] += nbytes
            step0 = [-1] * N
            for n in range(N):
                step0_rep, _, _, _, kv0, pairs0, _, _ = reads[n]
                deps = [qkv[c][l][n]]
                for j, o in step0_rep:
                    if (j, o) not in seen[n]:
                        deps.append(mc[j][o][l])
                q = layout.tokens(c, n)
                step0[n] = b.compute(Kind.attn, Stage.prefill, n, c, l, 0, model.attn(q, kv0, pairs0), deps)
            for n in range(N):
                _, step1_rep, _, _, _, _, kv1, pairs1 = reads[n]
                last = step0[n]
                if kv1:
                    deps = [step0[n]] + [mc[j][o][l] for j, o in step1_rep] + pushes[n]
                    last = b.compute(Kind.attn, Stage.prefill, n, c, l, 1, model.attn(layout.tokens(c, n), kv1, pairs1), deps)
                attn_last[c][l][n] = last
            for n in range(N):
                mlp[c][l][n] = b.compute(Kind.mlp, Stage.prefill, n, c, l, -1, model.mlp(layout.tokens(c, n)),
                                         [attn_last[c][l][n]])
        if stamping:
            k = stamp(first, layer0_end, before)
            for l in range(2, L):
                for table in (qkv, attn_last, mlp):  # [chunk][layer][node]
                    table[c][l] = [later(x, l, k) for x in table[c][1]]
            for o in range(N):  # mc is [chunk][owner][layer]
                mc[c][o][2:] = [later(mc[c][o][1], l, k) for l in range(2, L)]
        for n in range(N):
            seen[n].update(reads[n][0])
            seen[n].update(reads[n][1])
    first = len(b)
    for l in range(built):
        if l == 1:
            layer0_end, before = len(b), dict(stats)
        control_ops(C, l)
    if stamping:
        stamp(first, layer0_end, before)
    return {"qkv": qkv, "attn_last": attn_last, "mlp": mlp, "stats": stats}


def _kv_dtype(model) -> Dtype:
    return Dtype[model.kv_dtype]


def schedule(plan: Plan, net, layout) -> dict:
    """The decisions, for the trace's ``schedule`` (layer-independent: every layer of a
    chunk shares them)."""
    N, C = layout.nodes, layout.n_chunks
    return {
        "r": plan.r,
        "r_mem": plan.r_mem,
        "r_reuse": plan.r_reuse,
        "history_cap": plan.cap,
        "holders": [[net.holders(o, plan.r[c]) for o in range(N)] for c in range(C)],
        "drains": [
            {"decision": d, "chunk": j, "from": old, "to": new,
             "holders": [net.holders(o, old)[new - 1:] for o in range(N)]}
            for d, j, old, new in plan.trims
        ],
        "node_kv_bytes": plan.node_bytes,
        "replica_order": net.sequences,
    }
