"""Functional replay (``emu replay --functional``): real bytes through the NICs, real numbers
through the decode reductions, and their error against numpy.

Every communication op carries a payload of its trace length:
- a decode query (msg_op query, stage decode): the token's query vector for that layer,
  seeded per (token, layer) and packed in the op's dtype (fp16 or fp32);
- a decode partial state (a merge reduction): each holder's (m, l, o~) over its own K/V
  shard, computed with the query bytes that reached it and packed in the op's dtype; the
  NICs merge them on the way to the leader (emu.nic.reduce);
- anything else (KV blocks, handoffs, hidden states): seeded bytes per (op, source, block).
The NIC copies a payload when the send is handed over; each destination checks that what
arrived is what was sent (CRC-32), and the leader's merged attention is compared with
float64 numpy attention over the whole KV of that step.

K and V are seeded per token (fp32), the same for every layer: the check is of the
datapath's transport and arithmetic, not of the model's weights. Holder h's shard is the
prompt KV the replay's directory says it owns when decode starts (its owned prompt blocks
of layer 0, in tokens), plus the decode tokens placed on it (``new_token_nodes``); the
leader also holds the current token's. Where that layout differs from the one the trace
declares (``schedule.decode.start_shards``), each difference is a mismatch: a schedule
that misstates the layout, or a replay that left the KV elsewhere, fails the check. (For
head-sharded layouts the rows follow the declared group shards.) Only the payloads in
flight and the K/V are held, so memory is bounded (``LIMIT_BYTES``).
"""

from __future__ import annotations

import zlib

import numpy as np

from ..codec import Dtype, ReduceOp
from ..errors import ConfigError
from ..workload.profiles import dtype_bytes
from ..nic import reduce as R
from ..workload.enums import Kind, MsgOp
from ..workload.enums import Stage as TStage

LIMIT_BYTES = 1 << 30  # K/V (fp32 and the float64 reference copy) and the largest payload


class Functional:
    def __init__(self, trace, model: dict, seed: int = 0, directory=None):
        ops = trace.ops
        self.trace, self.seed = trace, int(seed)
        self.directory, self.layout_checked = directory, False
        self.layout_mismatches = self.bad_payloads = 0
        self.kv_token_bytes = dtype_bytes(2 * int(model["kv_heads"]) * int(model["head_dim"]), model["kv_dtype"])
        self.H, self.d, self.Hk = int(model["heads"]), int(model["head_dim"]), int(model["kv_heads"])
        biggest = int(ops["bytes"].max()) if trace.n_ops else 0
        if biggest > LIMIT_BYTES:
            raise ConfigError(f"--functional: op {int(ops['bytes'].argmax())} carries {biggest / 2**30:.2f} GiB, "
                              f"over the functional-mode limit of {LIMIT_BYTES / 2**30:.0f} GiB per payload")
        self._expect: dict[tuple, int] = {}
        self.deliveries = self.bytes_checked = 0
        # called as progress(done, total) while a compiled loop's payloads are fed in afterwards
        # (emu.replay.functional_feed); the replay points it at its progress report
        self.progress = None
        self.mismatches: list[str] = []
        self.reductions = 0
        self.max_abs = self.max_rel = 0.0
        self.dtypes: set[str] = set()
        self._q_at: dict[tuple[int, int], bytes] = {}
        kind, msg_op = ops["kind"], ops["msg_op"]
        reduces = np.flatnonzero(kind == Kind.reduce).tolist()
        queries = np.flatnonzero((kind == Kind.send) & (msg_op == MsgOp.query) & (ops["stage"] == TStage.decode))
        self.query_of = {(int(ops["chunk"][q]), int(ops["layer"][q])): int(q) for q in queries.tolist()}
        self.is_query = set(self.query_of.values())
        if reduces:
            self._decode_layout(trace, reduces)

    # ---- setup ---------------------------------------------------------------------

    def _need_float(self, op: int, what: str, nbytes: int) -> Dtype:
        dt = Dtype(int(self.trace.ops["dtype"][op]))
        if dt not in R.WIRE_DTYPES:
            raise ConfigError(f"--functional: op {op} ({what}) is {dt.name}; functional mode computes fp16 or fp32")
        if int(self.trace.ops["bytes"][op]) != nbytes * R.WIRE_DTYPES[dt].itemsize:
            raise ConfigError(f"--functional: op {op} ({what}) carries {int(self.trace.ops['bytes'][op])} B, not the "
                              f"{nbytes} {dt.name} values of {self.H} heads x {self.d} the model gives")
        return dt

    def _decode_layout(self, trace, reduces) -> None:
        ops, H, d = trace.ops, self.H, self.d
        dec = trace.schedule.get("decode") if isinstance(trace.schedule, dict) else None
        if not dec or not {"kv_nodes", "start_shards", "new_token_nodes", "leader"} <= set(dec):
            raise ConfigError("--functional: the trace's schedule has no decode layout (schedule.decode)")
        if dec.get("layout") == "head-sharded":
            # Each holder's heads and where the decode tokens' K/V go are not in the schedule.
            raise ConfigError(f"--functional: {trace.meta.get('scheme', {}).get('name', 'this scheme')}'s decode "
                              "layout is head-sharded; functional mode checks sequence-sharded decode "
                              "(mars, ring, zigzag, pd, full)")
        holders, starts = [int(h) for h in dec["kv_nodes"]], [int(n) for n in dec["start_shards"]]
        if len(holders) != len(starts):
            raise ConfigError(f"--functional: schedule.decode.start_shards has {len(starts)} shards for "
                              f"{len(holders)} kv_nodes")
        self.holders, self.starts = holders, starts
        self.seq_sharded = dec.get("layout") != "head-sharded"
        self.leader, self.placed = int(dec["leader"]), [int(x) for x in dec["new_token_nodes"]]
        self.prompt = sum(starts)
        tokens = self.prompt + len(self.placed)
        need = tokens * self.Hk * d * (4 + 8) * 2
        if need > LIMIT_BYTES:
            raise ConfigError(f"--functional: K and V of all {tokens:,} tokens take {need / 2**30:.2f} GiB, over the "
                              f"functional-mode limit of {LIMIT_BYTES / 2**30:.0f} GiB; replay a shorter sequence")
        edges = np.cumsum([0] + starts)
        self.prompt_rows = {h: (int(edges[i]), int(edges[i + 1])) for i, h in enumerate(holders)}
        for op in reduces:
            if ReduceOp(int(ops["reduce_op"][op])) != ReduceOp.merge:
                raise ConfigError(f"--functional: reduce op {op} is {ReduceOp(int(ops['reduce_op'][op])).name}; "
                                  "functional mode models merge reductions of attention states")
            self.dtypes.add(self._need_float(op, "partial state", H * (d + 2)).name)
            if int(self.trace.dst_idx[self.trace.dst_ptr[op]]) != self.leader:
                raise ConfigError(f"--functional: reduce op {op} ends at node "
                                  f"{int(self.trace.dst_idx[self.trace.dst_ptr[op]])}, not the decode leader {self.leader}")
        for q in self.is_query:
            self._need_float(q, "query", H * d)
        rng = np.random.default_rng([self.seed, 2])
        self.K = rng.standard_normal((tokens, self.Hk, d), dtype=np.float32)
        self.V = rng.standard_normal((tokens, self.Hk, d), dtype=np.float32)
        # The reference's copies, laid out for matmul over any prefix of tokens: [Hk, d, T], [Hk, T, d].
        self.KT64 = np.ascontiguousarray(self.K.transpose(1, 2, 0), np.float64)
        self.V64 = np.ascontiguousarray(self.V.transpose(1, 0, 2), np.float64)

    # ---- the layout the replay produced ---------------------------------------------------

    def owned_prompt_tokens(self) -> dict[int, int]:
        """Per node, the prompt tokens whose layer-0 KV it owns now, by the replay's directory."""
        meta = self.trace.meta
        L, N, C = int(meta["model"]["layers"]), int(meta["nodes"]), int(meta["n_chunks"])
        got: dict[int, int] = {}
        for kv, (node, nbytes) in self.directory.owners.items():
            if kv % L == 0 and kv // L // N < C:
                got[node] = got.get(node, 0) + int(nbytes)
        return {n: b // self.kv_token_bytes for n, b in got.items()}

    def _check_layout(self) -> None:
        """At decode's start: take each holder's prompt rows from where the replay left the KV,
        and count every difference from the declared layout as a mismatch."""
        self.layout_checked = True
        if self.directory is None or not self.seq_sharded:
            return
        got = self.owned_prompt_tokens()
        declared = dict(zip(self.holders, self.starts))
        for n in sorted(set(got) | set(declared)):
            if got.get(n, 0) != declared.get(n, 0):
                self.layout_mismatches += 1
                if len(self.mismatches) < 20:
                    self.mismatches.append(f"node {n} holds {got.get(n, 0)} prompt tokens of KV when decode starts; "
                                           f"schedule.decode.start_shards says {declared.get(n, 0)}")
        edges = np.cumsum([0] + [got.get(h, 0) for h in self.holders])
        self.prompt_rows = {h: (int(min(edges[i], self.prompt)), int(min(edges[i + 1], self.prompt)))
                            for i, h in enumerate(self.holders)}

    # ---- payloads ------------------------------------------------------------------------

    def _query(self, t: int, l: int) -> np.ndarray:
        """Token t's query at layer l, as the query's wire dtype represents it."""
        q = np.random.default_rng([self.seed, 1, t, l]).standard_normal((self.H, self.d), dtype=np.float32)
        op = self.query_of.get((t, l))
        dt = Dtype(int(self.trace.ops["dtype"][op])) if op is not None else Dtype.fp32
        return R.unpack_values(R.pack_values(q, dt), dt).reshape(self.H, self.d)

    def payload(self, op: int, src: int, block: int = -1) -> bytes:
        """The bytes ``src`` hands its NIC for ``op`` (``block``: the destination of a personalized block)."""
        ops = self.trace.ops
        if op in self.is_query:
            data = R.pack_values(self._query(int(ops["chunk"][op]), int(ops["layer"][op])),
                                 Dtype(int(ops["dtype"][op])))
        else:
            data = np.random.default_rng([self.seed, 0, op, src, block + 1]).bytes(int(ops["bytes"][op]))
        self._expect[(op, src, block)] = zlib.crc32(data)
        return data

    def delivered(self, op: int, src: int, block: int, node: int, data: bytes | None) -> None:
        """``node`` received ``op``'s payload from ``src``: it must be exactly what was sent."""
        self.deliveries += 1
        self.bytes_checked += len(data or b"")
        if data is None or zlib.crc32(data) != self._expect.get((op, src, block)):
            self.bad_payloads += 1
            if len(self.mismatches) < 20:
                self.mismatches.append(f"op {op} from node {src} arrived at node {node} with other bytes than were sent")
            return
        if op in self.is_query:
            self._q_at[(op, node)] = data

    # ---- decode reductions --------------------------------------------------------------------

    def _rows(self, h: int, t: int) -> np.ndarray:
        a, b = self.prompt_rows.get(h, (0, 0))
        extra = [self.prompt + u for u in range(t) if self.placed[u] == h]
        if h == self.leader:
            extra.append(self.prompt + t)  # the current token's own KV, at the leader during step t
        return np.r_[np.arange(a, b), np.asarray(extra, np.int64)]

    def contribution(self, op: int, node: int) -> bytes:
        """``node``'s partial state for reduce ``op``, from the query that reached it."""
        ops = self.trace.ops
        if not self.layout_checked:
            self._check_layout()
        t, l = int(ops["chunk"][op]), int(ops["layer"][op])
        if node == self.leader:
            q = self._query(t, l)
        else:
            qop = self.query_of[(t, l)]
            q = R.unpack_values(self._q_at.pop((qop, node)), Dtype(int(ops["dtype"][qop]))).reshape(self.H, self.d)
        rows = self._rows(node, t)
        state = R.partial_attention(q, self.K[rows], self.V[rows])
        return R.pack_state(*state, Dtype(int(ops["dtype"][op])))

    def reduced(self, op: int, result: bytes) -> None:
        """The merged state of reduce ``op`` reached the leader: compare with numpy attention."""
        ops = self.trace.ops
        t, l = int(ops["chunk"][op]), int(ops["layer"][op])
        got = R.finish(R.unpack_state(result, self.H, self.d, Dtype(int(ops["dtype"][op]))))
        n = self.prompt + t + 1
        want = attention(self._query(t, l), self.KT64[:, :, :n], self.V64[:, :n, :])
        err = float(np.max(np.abs(got - want)))
        self.reductions += 1
        self.max_abs = max(self.max_abs, err)
        self.max_rel = max(self.max_rel, err / max(float(np.max(np.abs(want))), np.finfo(np.float64).tiny))

    def summary(self) -> dict:
        return {"deliveries_checked": self.deliveries, "bytes_checked": self.bytes_checked,
                "payload_mismatches": self.bad_payloads,
                "layout_mismatches": self.layout_mismatches, "mismatches": self.mismatches,
                "reductions": self.reductions, "state_dtypes": sorted(self.dtypes),
                "max_abs_error": self.max_abs, "max_rel_error": self.max_rel}


def attention(q: np.ndarray, KT: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Softmax attention of one token's queries [H, d] over keys KT [Hk, d, T] and values
    V [Hk, T, d], in float64 (query head h uses key/value head h // (H / Hk))."""
    H, d = q.shape
    Hk = KT.shape[0]
    qg = np.asarray(q, np.float64).reshape(Hk, H // Hk, d)
    s = np.matmul(qg, KT) / np.sqrt(d)                          # [Hk, g, T]
    p = np.exp(s - s.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    return np.matmul(p, V).reshape(H, d)
