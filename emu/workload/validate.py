"""Trace validation: structure, types, enums, board sets, dependencies, acyclicity.

Every check is a numpy expression over whole columns; Python loops run only to word the
first error found. Each error is one line: ``<file>: <JSON path>: <problem>``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, TraceError
from . import columns, profiles
from .enums import ENUM_COLUMNS, Collective, Kind, MsgOp, ReduceOp, Residency
from .fileformat import CSR_COLUMNS, FORMAT, SCALAR_COLUMNS, VERSION, csr_width
from .schemes import SCHEMES

_META_INTS = {"nodes": 1, "seq": 1, "chunk": 1, "n_chunks": 1, "decode_tokens": 0, "leader": 0}

# Bounds checked before anything is allocated. The shipped 16K-token MARS trace on 16
# boards has 179,429 ops and 595,185 dependencies; a 128K-token one on 64 boards stays
# well under these, while a corrupt or hostile file cannot make the loader allocate more
# than a few GB (ops.n and every CSR list are checked against them before decoding).
MAX_OPS = 50_000_000
MAX_CSR = 500_000_000       # entries of one of dep_idx / src_idx / dst_idx
MAX_NODES = 4096            # boards of a trace (the wire's board id is 16 bits)
MAX_OP_AMOUNT = 2**53       # flops, mem_bytes, bytes of one op (a 128K-token attention op: ~1e14)


def _err(path: str, where: str, problem: str) -> TraceError:
    return TraceError(f"{path}: {where}: {problem}")


def _obj(doc: dict, key: str, path: str, where: str) -> dict:
    if key not in doc:
        raise _err(path, f"{where}{key}", "missing field")
    if not isinstance(doc[key], dict):
        raise _err(path, f"{where}{key}", f"expected an object, got {type(doc[key]).__name__}")
    return doc[key]


def _int(value) -> bool:
    return type(value) is int


def _check_meta(meta: dict, path: str) -> None:
    if meta.get("format") != FORMAT:
        raise _err(path, "meta.format", f"expected {FORMAT!r}, got {meta.get('format')!r}")
    if not _int(meta.get("version")):
        raise _err(path, "meta.version", f"expected an integer, got {meta.get('version')!r}")
    if meta["version"] != VERSION:
        v = meta["version"]
        why = "regenerate it with `emu trace`" if v < VERSION else "this emu is older than the file; update mcf-emu"
        raise _err(path, "meta.version", f"trace format version {v}, this emu reads version {VERSION}: {why}")
    if not isinstance(meta.get("generator"), str):
        raise _err(path, "meta.generator", "missing field" if "generator" not in meta else "expected a string")
    for key, lo in _META_INTS.items():
        if key not in meta:
            raise _err(path, f"meta.{key}", "missing field")
        if not _int(meta[key]):
            raise _err(path, f"meta.{key}", f"expected an integer, got {meta[key]!r}")
        if meta[key] < lo:
            raise _err(path, f"meta.{key}", f"must be >= {lo}, got {meta[key]}")
    if meta["nodes"] > MAX_NODES:
        raise _err(path, "meta.nodes", f"{meta['nodes']} boards; at most {MAX_NODES}")
    if meta["leader"] >= meta["nodes"]:
        raise _err(path, "meta.leader", f"no node {meta['leader']} in a {meta['nodes']}-node trace")
    scheme = _obj(meta, "scheme", path, "meta.")
    if scheme.get("name") not in SCHEMES:
        raise _err(path, "meta.scheme.name", f"unknown scheme {scheme.get('name')!r} (expected one of {', '.join(SCHEMES)})")
    for section in ("model", "hw"):
        table = _obj(meta, section, path, "meta.")
        try:
            profiles.check(section, table, f"meta.{section}")
        except ConfigError as exc:
            raise TraceError(f"{path}: {exc}") from None


def validate_document(doc, path: str):
    """Check the JSON structure and decode the columns: (meta, schedule, columns)."""
    if not isinstance(doc, dict):
        raise _err(path, "$", f"expected an object, got {type(doc).__name__}")
    meta = _obj(doc, "meta", path, "")
    schedule = _obj(doc, "schedule", path, "")
    ops = _obj(doc, "ops", path, "")
    extra = sorted(set(doc) - {"meta", "schedule", "ops"})
    if extra:
        raise _err(path, extra[0], "unknown field")
    _check_meta(meta, path)
    if "n" not in ops:
        raise _err(path, "ops.n", "missing field")
    n = ops["n"]
    if not _int(n) or n < 0:
        raise _err(path, "ops.n", f"expected a non-negative integer, got {n!r}")
    if n > MAX_OPS:
        raise _err(path, "ops.n", f"{n:,} ops; at most {MAX_OPS:,}")
    names = list(SCALAR_COLUMNS) + [f"{c}_{p}" for c in CSR_COLUMNS for p in ("ptr", "idx")]
    extra = sorted(set(ops) - set(names) - {"n"})
    if extra:
        raise _err(path, f"ops.{extra[0]}", "unknown column")
    cols = {}
    for name in names:
        if name not in ops:
            raise _err(path, f"ops.{name}", "missing field")
        want = n + 1 if name.endswith("_ptr") else (n if name in SCALAR_COLUMNS else None)
        if want is None:  # a CSR list: as long as its pointers' last offset says (checked later)
            ptr = cols[name[:-4] + "_ptr"]
            limit = int(ptr[-1]) if ptr.size and 0 <= ptr[-1] <= MAX_CSR else MAX_CSR
        else:
            limit = want
        try:
            cols[name] = columns.decode(ops[name], f"ops.{name}", max_len=limit)
        except columns.ColumnError as exc:
            raise _err(path, exc.where, exc.problem) from None
        if want is not None and cols[name].size != want:
            raise _err(path, f"ops.{name}", f"has {cols[name].size} entries, expected {want} (ops.n = {n}{' + 1' if name.endswith('_ptr') else ''})")
        dtype = SCALAR_COLUMNS.get(name)
        if dtype is None:
            cols[name] = csr_width(cols[name])  # each list narrowed as it is decoded: one int64 at a time
        elif cols[name].size:
            # the loaded column is narrower than int64: a value that does not fit would wrap
            info = np.iinfo(dtype)
            i = _first((cols[name] < info.min) | (cols[name] > info.max))
            if i is not None:
                raise _err(path, f"ops.{name}[{i}]", f"{int(cols[name][i])} is out of range ({info.min}..{info.max})")
            cols[name] = cols[name].astype(dtype)  # the loaded width now: 1-4 bytes a value, not 8
    return meta, schedule, cols


def _first(mask: np.ndarray) -> int | None:
    hit = np.flatnonzero(mask)
    return int(hit[0]) if hit.size else None


def _check_csr(path: str, name: str, ptr: np.ndarray, idx: np.ndarray, n: int) -> None:
    if ptr.size != n + 1:
        raise _err(path, f"ops.{name}_ptr", f"has {ptr.size} entries, expected {n + 1}")
    if ptr[0] != 0:
        raise _err(path, f"ops.{name}_ptr[0]", f"must be 0, got {ptr[0]}")
    i = _first(np.diff(ptr) < 0)
    if i is not None:
        raise _err(path, f"ops.{name}_ptr[{i + 1}]", f"offsets must not decrease ({ptr[i]} then {ptr[i + 1]})")
    if ptr[-1] != idx.size:
        raise _err(path, f"ops.{name}_ptr[{n}]", f"last offset {ptr[-1]} != {name}_idx length {idx.size}")


def _increasing_rows(ptr: np.ndarray, idx: np.ndarray) -> bool:
    """Whether each CSR row of ``idx`` is strictly increasing (so lists no value twice)."""
    if idx.size < 2:
        return True
    rising = idx[1:] > idx[:-1]
    rising[ptr[1:-1][(ptr[1:-1] > 0) & (ptr[1:-1] < idx.size)] - 1] = True  # a row's end: the next row may start lower
    return bool(rising.all())


def _rows(ptr: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))


def validate(trace, path: str) -> None:
    """Semantic checks of a decoded trace (see docs/trace-format.md for the rules)."""
    meta, ops = trace.meta, trace.ops
    n, N, L = trace.n_ops, int(meta["nodes"]), int(meta["model"]["layers"])
    for name, col in ops.items():
        if col.shape != (n,):
            raise _err(path, f"ops.{name}", f"has {col.shape[0]} entries, expected {n}")
    kind = ops["kind"].astype(np.int64)
    for name, enum in ENUM_COLUMNS.items():
        allowed = np.array(sorted(int(e) for e in enum))
        col = ops[name].astype(np.int64)
        bad = ~np.isin(col, allowed)
        if name == "collective":
            bad &= col != -1  # -1: not applicable (compute ops)
        i = _first(bad)
        if i is not None:
            raise _err(path, f"ops.{name}[{i}]", f"unknown {name} {col[i]} (expected {', '.join(f'{int(e)}={e.name}' for e in enum)})")
    compute = kind <= Kind.decode_lm_head
    control = (kind == Kind.drain) | (kind == Kind.invalidate)
    comm = ~compute & ~control

    def need(mask, name, problem):
        i = _first(mask)
        if i is not None:
            raise _err(path, f"ops.{name}[{i}]", problem(i))

    node = ops["node"].astype(np.int64)
    need((compute | control) & ((node < 0) | (node >= N)), "node", lambda i: f"{Kind(kind[i]).name} op needs a node in 0..{N - 1}, got {node[i]}")
    need(comm & (node != -1), "node", lambda i: f"communication op must have node -1, got {node[i]}")
    need((ops["layer"] < -1) | (ops["layer"] >= L), "layer", lambda i: f"layer {ops['layer'][i]} not in -1..{L - 1}")
    for name in ("chunk", "step", "kv_id"):
        need(ops[name] < -1, name, lambda i, name=name: f"must be >= -1, got {ops[name][i]}")
    for name in ("flops", "mem_bytes", "bytes"):
        need(ops[name] < 0, name, lambda i, name=name: f"must be >= 0, got {ops[name][i]}")
        # durations and rates are computed in float64: beyond 2^53 they would not be exact
        need(ops[name] > MAX_OP_AMOUNT, name, lambda i, name=name: f"{ops[name][i]} is more than 2^53")
    for name in ("flops", "mem_bytes"):
        need(~compute & (ops[name] != 0), name, lambda i, name=name: f"only compute ops have {name}, got {ops[name][i]}")
    coll, msg, red = (ops[c].astype(np.int64) for c in ("collective", "msg_op", "reduce_op"))
    need(compute & (coll != -1), "collective", lambda i: f"compute op must have collective -1, got {coll[i]}")
    need(~compute & (coll == -1), "collective", lambda i: "communication/control op needs a collective")
    for name in ("msg_op", "reduce_op"):
        need(compute & (ops[name] != 0), name, lambda i, name=name: f"compute op must have {name} 0, got {ops[name][i]}")
    # A QKV op may name the KV block it produces: kv_id, its bytes, residency owner.
    produces = np.isin(kind, [int(Kind.qkv), int(Kind.decode_qkv)])
    owner = ops["residency"] == Residency.owner
    need(compute & ~produces & ((ops["bytes"] != 0) | (ops["residency"] != 0)), "residency",
         lambda i: f"only qkv ops name a block they produce; {Kind(kind[i]).name} op has bytes {ops['bytes'][i]}, "
                   f"residency {ops['residency'][i]}")
    need(produces & ~owner & ((ops["residency"] != 0) | (ops["bytes"] != 0)), "residency",
         lambda i: "a qkv op either produces a block (residency owner) or has residency 0 and bytes 0")
    need(produces & owner & ((ops["kv_id"] < 0) | (ops["bytes"] <= 0)), "kv_id",
         lambda i: "a qkv op that produces a block needs its kv_id and bytes")
    need(~compute & (msg == MsgOp.none), "msg_op", lambda i: "communication/control op needs a msg_op")
    need((kind == Kind.drain) & (msg != MsgOp.drain), "msg_op", lambda i: "a drain op carries msg_op drain")
    need((kind == Kind.invalidate) & (msg != MsgOp.invalidate), "msg_op", lambda i: "an invalidate op carries msg_op invalidate")
    need(control & (ops["kv_id"] < 0), "kv_id", lambda i: "a control op must name its block")
    is_red = (coll == Collective.reduce) | (coll == Collective.all_reduce)
    need(is_red & (red == ReduceOp.none), "reduce_op", lambda i: "a reduction needs a reduce_op")
    need(~is_red & (red != ReduceOp.none), "reduce_op", lambda i: f"reduce_op {red[i]} on a non-reducing op")
    ok_coll = {
        Kind.send: (Collective.unicast, Collective.multicast),
        Kind.reduce: (Collective.reduce, Collective.all_reduce),
        Kind.all_to_all: (Collective.all_to_all,),
        Kind.drain: (Collective.unicast, Collective.multicast),
        Kind.invalidate: (Collective.unicast, Collective.multicast),
    }
    for k, allowed in ok_coll.items():
        need((kind == k) & ~np.isin(coll, allowed), "collective",
             lambda i, k=k, allowed=allowed: f"a {k.name} op needs collective {' or '.join(a.name for a in allowed)}, got {Collective(coll[i]).name}")

    # board sets
    sizes = {}
    for which in ("src", "dst"):
        ptr, idx = getattr(trace, f"{which}_ptr"), getattr(trace, f"{which}_idx")
        _check_csr(path, which, ptr, idx, n)
        j = _first((idx < 0) | (idx >= N))
        if j is not None:
            raise _err(path, f"ops.{which}_idx[{j}]", f"no board {idx[j]} in a {N}-node trace")
        size = np.diff(ptr)
        sizes[which] = size
        need(compute & (size != 0), f"{which}_ptr", lambda i, w=which: f"compute op {i} must have an empty {w} set")
        need(~compute & (size == 0), f"{which}_ptr", lambda i, w=which: f"op {i} needs a non-empty {w} set")
        if _increasing_rows(ptr, idx):  # the writer lists each set in order: no board twice
            continue
        rows = _rows(ptr)
        key = np.sort(rows * N + idx)
        dup = _first(key[1:] == key[:-1]) if key.size > 1 else None
        if dup is not None:
            i = int(key[dup] // N)
            raise _err(path, f"ops.{which}_idx", f"op {i} lists board {int(key[dup] % N)} twice in its {which} set")
    # meta.nodes is the cluster the ops run on: every board takes part (runs an op, or sends or
    # receives one); a board in none would be cabled and routed through but never used, and
    # the layout, the kv_id numbering and the schedule all follow from meta.nodes.
    used = np.zeros(N, dtype=bool)
    used[node[node >= 0]] = True
    used[trace.src_idx] = True
    used[trace.dst_idx] = True
    if not used.all():
        idle = np.flatnonzero(~used)
        raise _err(path, "meta.nodes", f"{N} boards, but the ops use {N - idle.size}: board {idle[0]} "
                   f"{'and ' + str(idle.size - 1) + ' more ' if idle.size > 1 else ''}takes part in no op; "
                   "meta.nodes must count the boards the ops use")
    need((coll == Collective.unicast) & (sizes["dst"] != 1), "dst_ptr", lambda i: f"unicast op {i} needs exactly one destination, has {sizes['dst'][i]}")
    need((coll == Collective.reduce) & (sizes["dst"] != 1), "dst_ptr", lambda i: f"reduce op {i} needs exactly one destination, has {sizes['dst'][i]}")
    single_src = (kind == Kind.send) | control
    need(single_src & (sizes["src"] != 1), "src_ptr", lambda i: f"{Kind(kind[i]).name} op {i} needs exactly one source, has {sizes['src'][i]}")
    src_first = trace.src_idx[np.minimum(trace.src_ptr[:-1], max(trace.src_idx.size - 1, 0))] if trace.src_idx.size else np.zeros(n, np.int64)
    need(control & (src_first != node), "src_idx", lambda i: f"control op {i} is sent by its node {node[i]}, not board {src_first[i]}")
    # a send never delivers to its own source
    drows = _rows(trace.dst_ptr)
    sel = single_src[drows]
    same = trace.dst_idx[sel] == src_first[drows[sel]]
    j = _first(same)
    if j is not None:
        i = int(drows[sel][j])
        raise _err(path, "ops.dst_idx", f"op {i} sends to its own source board {src_first[i]}")

    # blocks handed over: only owner handoffs list them, each a block id
    _check_csr(path, "blk", trace.blk_ptr, trace.blk_idx, n)
    j = _first(trace.blk_idx < 0)
    if j is not None:
        raise _err(path, f"ops.blk_idx[{j}]", f"block ids are >= 0, got {trace.blk_idx[j]}")
    nblk = np.diff(trace.blk_ptr)
    need((nblk > 0) & ~(comm & owner), "blk_ptr", lambda i: f"op {i} lists blocks but is not a message with residency owner")

    # dependencies
    _check_csr(path, "dep", trace.dep_ptr, trace.dep_idx, n)
    dep = trace.dep_idx
    j = _first((dep < 0) | (dep >= n))
    if j is not None:
        raise _err(path, f"ops.dep_idx[{j}]", f"dependency on missing op {dep[j]}")
    # ops listed in an order that runs (each after all it depends on) are acyclic; only
    # otherwise is the graph searched. The test is per op, not per edge: 32M edges at 128
    # boards, where a row number per edge cost 256 MB.
    with_deps = np.flatnonzero(np.diff(trace.dep_ptr) > 0)
    if dep.size and not (np.maximum.reduceat(dep, trace.dep_ptr[with_deps]) < with_deps).all():
        _check_acyclic(path, n, _rows(trace.dep_ptr), dep)


def _check_acyclic(path: str, n: int, owner: np.ndarray, dep: np.ndarray) -> None:
    """Kahn's algorithm level by level in numpy; on a cycle, name one."""
    indeg = np.bincount(owner, minlength=n)
    order = np.argsort(dep, kind="stable")  # edges grouped by the op they leave (dep -> owner)
    by_dep, start = owner[order], np.searchsorted(dep[order], np.arange(n + 1))
    frontier = np.flatnonzero(indeg == 0)
    done = 0
    while frontier.size:
        done += frontier.size
        lo, hi = start[frontier], start[frontier + 1]
        if (hi > lo).any():
            succ = np.concatenate([by_dep[a:b] for a, b in zip(lo, hi) if b > a])
            np.subtract.at(indeg, succ, 1)
            frontier = np.unique(succ[indeg[succ] == 0])
        else:
            frontier = frontier[:0]
    if done == n:
        return
    # walk dependencies among the ops left over until one repeats
    left = indeg > 0
    ptr = np.searchsorted(owner, np.arange(n + 1))
    x, seen, walk = int(np.flatnonzero(left)[0]), {}, []
    while x not in seen:
        seen[x] = len(walk)
        walk.append(x)
        nxt = [int(d) for d in dep[ptr[x]:ptr[x + 1]] if left[d]]
        x = nxt[0]
    cycle = walk[seen[x]:] + [x]
    shown = cycle if len(cycle) <= 8 else cycle[:4] + ["..."] + cycle[-2:]
    raise _err(path, "ops.dep_idx", f"dependency cycle through ops {' -> '.join(map(str, shown))}"
               + (f" ({len(cycle) - 1} ops)" if len(cycle) > 8 else ""))
