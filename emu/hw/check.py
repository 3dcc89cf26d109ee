"""`emu hw check`: drive a device (a KR260 or `emu hw serve`) with a scenario and diff what it returns.

A scenario is a list of messages the checker sends, playing every board but the
device (and, for a reduction, the device's own compute engine), and the frames the
device must send back according to the NIC model: forwarded copies (multicast
trees of ``emu.topology``), acknowledgements, and reduction results (arithmetic
of ``emu.nic.reduce``, fragment headers of ``emu.codec.fragment``). The frames
the device returns are matched to the expected ones and compared field by field.

msg_id and seq of the device's own messages depend on what it sent before, so
they are checked for consistency (every fragment of a message has the same
msg_id and consecutive seq numbers; different messages have different msg_ids)
rather than for value.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..codec import ENUM_FIELDS, FRAME_HEADER_LEN, REPLY_OPS, Collective, Dtype, Flags, Op, ReduceOp, Stage
from ..codec.batch import HEADER_DTYPE, REASONS, encode_frames, scan_frames
from ..codec.layer import dst_mac, node_mac
from ..codec.mac import ETH_LEN
from ..errors import ConfigError
from ..nic import reduce as R
from ..nic.config import CONTROL_LEN
from . import board as M
from .errors import MtuTooSmall, NoAnswer
from .defaults import DEFAULT_HEAD_DIM, SCENARIOS
from .rawsock import RawSocket


@dataclass
class Expect:
    """One frame the device must send."""

    label: str
    header: dict
    payload: bytes
    own: int | None = None   # index of the device's own message it belongs to (msg_id / seq checked relatively)
    values: str | None = None  # numpy dtype of the payload values, compared with a tolerance
    value_base: int = 0      # index of this fragment's first value in the message
    heads: int = 0
    head_dim: int = 0

    @property
    def eth_dst(self) -> str:
        return dst_mac(int(self.header["dst_set"]), int(self.header["route_id"]))


@dataclass
class Sent:
    label: str
    headers: np.ndarray
    payload: np.ndarray | None
    eth_src: int
    pause: float = 0.0  # seconds to wait before sending (lets the device answer the step before)


@dataclass
class Scenario:
    name: str
    board: M.Board
    sends: list = field(default_factory=list)
    expected: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def frames_out(self) -> int:
        return sum(len(s.headers) for s in self.sends)


class _Builder:
    """Builds a scenario: the checker's messages (fresh msg_ids per run) and the expected answers."""

    def __init__(self, name: str, board: M.Board, *, reliable: bool, seed: int | None, dtype: Dtype,
                 head_dim: int):
        self.s = Scenario(name, board)
        self.b = board
        self.K = board.node
        self.reliable = reliable
        self.dtype = Dtype(dtype)
        self.head_dim = head_dim
        run = int.from_bytes(os.urandom(4), "big")
        self.rng = np.random.default_rng(run if seed is None else seed)
        self.next_id = {}
        self.id_base = run & 0x7FFFFFFF  # fresh per run: the device remembers completed (src, msg_id) pairs
        self.own_msgs = 0
        self.kv_id = int(self.rng.integers(1 << 20, 1 << 31))
        self.layer = int(self.rng.integers(0, 64))

    def flags(self) -> int:
        return int(Flags.ACK_REQ) if self.reliable else 0

    def send(self, label: str, src: int, meta: dict, data: bytes, *, eth_src: int | None = None, pause=0.0,
             control: bool = False):
        """A message of board ``src`` (sent as if by ``eth_src``); returns its header rows and payload."""
        if control:  # header-only control frames carry the msg_id / seq of the message they are about
            h, pay = M.message(dict(meta, src_node=src), data, self.b.mtu)
        else:
            mid = self.next_id.get(src, (self.id_base + src * 7919) & 0xFFFFFFFF)
            h, pay = M.message(dict(meta, src_node=src), data, self.b.mtu, mid, (mid * 16) & 0xFFFFFFFF)
            self.next_id[src] = (mid + 1) & 0xFFFFFFFF
        self.s.sends.append(Sent(label, h, pay, src if eth_src is None else eth_src, pause))
        return h, pay

    def expect_copies(self, label: str, h, pay) -> None:
        """The device forwards every fragment: same frame, ttl - 1, its own source MAC."""
        starts = np.concatenate([[0], np.cumsum(h["pay_len"].astype(np.int64))])
        for i in range(len(h)):
            row = _row(h[i])
            row["ttl"] = max(0, row["ttl"] - 1)
            self.s.expected.append(Expect(f"{label}, forwarded fragment {i + 1}/{len(h)}", row,
                                          bytes(pay[starts[i] : starts[i + 1]]) if pay is not None else b""))

    def expect_ack(self, h, to: int, *, nack_missing=None, why: str = "") -> None:
        """The device answers ``to`` about its message ``h``: an ack, or a nack with the missing bitmap."""
        first = h[0]
        origin, mid, seq, cnt = int(first["src_node"]), int(first["msg_id"]), int(first["seq"]), int(first["frag_cnt"])
        op = Op.nack if nack_missing else Op.ack
        payload = M.nack_bitmap(cnt, nack_missing) if nack_missing else b""
        rows, _ = M.message(M.control_meta(self.K, to, op, msg_id=mid, seq=seq), payload, self.b.mtu)
        label = f"{op.name} of n{origin}#{mid} to node {to}" + (f" ({why})" if why else "")
        self.s.expected.append(Expect(label, _row(rows[0]), payload))

    def expect_message(self, label: str, meta: dict, data: bytes, *, values: str | None = None,
                       heads: int = 0, head_dim: int = 0) -> None:
        rows, pay = M.message(meta, data, self.b.mtu, 0, 0)
        own = self._own()
        starts = np.concatenate([[0], np.cumsum(rows["pay_len"].astype(np.int64))])
        item = np.dtype(values).itemsize if values else 1
        for i in range(len(rows)):
            self.s.expected.append(Expect(f"{label}, fragment {i + 1}/{len(rows)}", _row(rows[i]),
                                          bytes(pay[starts[i] : starts[i + 1]]), own=own, values=values,
                                          value_base=int(starts[i]) // item, heads=heads, head_dim=head_dim))

    def _own(self) -> int:
        self.own_msgs += 1
        return self.own_msgs - 1


def _row(r) -> dict:
    return {f: int(r[f]) for f in HEADER_DTYPE.names}


def _source_for(board: M.Board, dsts_of) -> tuple[int, M.Role]:
    """A source board whose frames the device forwards, if any (else the first other board)."""
    first = None
    for s in range(board.boards):
        if s == board.node:
            continue
        role = board.role(s, dsts_of(s))
        if first is None:
            first = (s, role)
        if role.forwards:
            return s, role
    if first is None:
        raise ConfigError(f"{board.topology} has one board: there is nobody to play")
    return first


MAX_HEAD_DIM = 1 << 14  # as a model profile's head_dim
# A merged (m, l, o~) state holds heads x (head_dim + 2) values; a scenario draws up to 24
# tokens of keys and values per contribution in float64, so this bounds it to ~0.1 GB.
MAX_STATE_VALUES = 1 << 18


def check_state(heads: int, head_dim: int) -> None:
    """Refuse a head dimension (and head count) whose states a scenario could not hold."""
    from ..validate import integer

    integer(head_dim, "--head-dim", 1, MAX_HEAD_DIM)
    values = heads * (head_dim + 2)
    if values > MAX_STATE_VALUES:
        raise ConfigError(f"--heads {heads} x (--head-dim {head_dim} + 2) = {values:,} values per merged state; "
                          f"at most {MAX_STATE_VALUES:,}")


def build(name: str, board: M.Board, *, reliable: bool = True, seed: int | None = None,
          dtype: Dtype = Dtype.fp32, head_dim: int = DEFAULT_HEAD_DIM) -> Scenario:
    """The scenario ``name`` for ``board``: what to send and what must come back."""
    if name not in SCENARIOS:
        raise ConfigError(f"--scenario {name!r}: unknown; one of {', '.join(SCENARIOS)}")
    check_state(board.heads, head_dim)
    b = _Builder(name, board, reliable=reliable, seed=seed, dtype=dtype, head_dim=head_dim)
    if name.startswith("reduce-"):
        _reduce(b, ReduceOp[name.split("-", 1)[1]])
    elif name == "multicast":
        _multicast(b)
    elif name == "invalidate":
        _invalidate(b)
    elif name == "forward":
        _forward(b)
    elif name == "probe":
        _probe(b)
    return b.s


def _reduce(b: _Builder, op: ReduceOp) -> None:
    board, K, dtype = b.b, b.K, b.dtype
    if dtype not in R.WIRE_DTYPES:
        raise ConfigError(f"--dtype {dtype.name}: reductions carry fp32 or fp16")
    heads, hd = board.heads, b.head_dim
    collective = Collective.all_reduce if K == board.root else Collective.reduce
    meta = dict(op=int(Op.partial_state), stage=int(Stage.decode), collective=int(collective), reduce_op=int(op),
                dtype=int(dtype), layer=b.layer, kv_id=b.kv_id, dst_set=1 << K, flags=b.flags())
    children = board.children()
    rng = b.rng

    def contribution() -> bytes:
        if op == ReduceOp.merge:
            t = int(rng.integers(1, 24))
            st = R.partial_attention(rng.standard_normal((heads, hd)), rng.standard_normal((t, heads, hd)),
                                     rng.standard_normal((t, heads, hd)))
            return R.pack_state(*st, dtype)
        return R.pack_values(rng.standard_normal(heads * hd).astype(np.float32) * 4, dtype)

    acc = None
    own = contribution()
    b.send(f"own contribution of node {K} (from its compute engine)", K, meta, own)
    acc = M.combine(int(op), int(dtype), heads, acc, own)
    for c in children:
        data = contribution()
        h, _ = b.send(f"contribution of node {c}", c, meta, data)
        if b.reliable:
            b.expect_ack(h, c)
        acc = M.combine(int(op), int(dtype), heads, acc, data)
    out = M.result_meta(board, (int(Stage.decode), b.layer, b.kv_id, int(collective), int(op), int(dtype)),
                        op=int(op), ack_req=b.reliable)
    where = f"to parent {board.parent}" if K != board.root else "to the group (root of an all_reduce)"
    b.expect_message(f"{Op(out['op']).name} {where}", out, acc, values=R.WIRE_DTYPES[dtype].str,
                     heads=heads if op == ReduceOp.merge else 0, head_dim=hd if op == ReduceOp.merge else 0)
    b.s.notes.append(f"reduction tree to root {board.root}: node {K} has children {children or 'none'}"
                     + (f", parent {board.parent}" if K != board.root else ""))


def _multicast(b: _Builder) -> None:
    board = b.b
    S, role = _source_for(board, lambda s: tuple(d for d in range(board.boards) if d != s))
    dsts = tuple(d for d in range(board.boards) if d != S)
    data = b.rng.integers(0, 256, 4000, dtype=np.uint8).tobytes()
    meta = dict(op=int(Op.kv_replica), stage=int(Stage.prefill), collective=int(Collective.multicast),
                kv_id=b.kv_id, layer=b.layer, dst_set=sum(1 << d for d in dsts), flags=b.flags())
    label = f"kv_replica of block {b.kv_id} from node {S}"
    h, pay = b.send(label, S, meta, data, eth_src=role.upstream)
    if role.forwards:
        b.expect_copies(label, h, pay)
    if b.reliable:
        b.expect_ack(h, S)
    b.s.notes.append(f"multicast tree from {S}: node {b.K} " + (f"forwards (upstream {role.upstream})"
                                                              if role.forwards else "is a leaf"))


def _invalidate(b: _Builder) -> None:
    board = b.b
    S, role = _source_for(board, lambda s: tuple(d for d in range(board.boards) if d != s))
    dsts = tuple(d for d in range(board.boards) if d != S)
    common = dict(collective=int(Collective.multicast), kv_id=b.kv_id, layer=b.layer,
                  dst_set=sum(1 << d for d in dsts), flags=b.flags())
    steps = [(Op.kv_replica, Stage.prefill, b.rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()),
             (Op.drain, Stage.control, bytes(CONTROL_LEN)),
             (Op.invalidate, Stage.control, bytes(CONTROL_LEN))]
    for op, stage, data in steps:
        label = f"{op.name} of block {b.kv_id} from owner {S}"
        h, pay = b.send(label, S, dict(common, op=int(op), stage=int(stage)), data, eth_src=role.upstream,
                        pause=0.002)
        if role.forwards:
            b.expect_copies(label, h, pay)
        if b.reliable:
            b.expect_ack(h, S)
    b.s.notes.append(f"replica of block {b.kv_id} at node {b.K}: VALID, DRAINING, INVALID (serve -v logs it)")


def _forward(b: _Builder) -> None:
    board, K = b.b, b.K
    for s in range(board.boards):
        for d in range(board.boards):
            if K in (s, d) or s == d:
                continue
            role = board.role(s, (d,))
            if role.forwards:
                data = b.rng.integers(0, 256, 2000, dtype=np.uint8).tobytes()
                meta = dict(op=int(Op.kv_transfer), stage=int(Stage.prefill), collective=int(Collective.unicast),
                            kv_id=b.kv_id, layer=b.layer, dst_set=1 << d, flags=b.flags())
                label = f"kv_transfer from node {s} to node {d}"
                h, pay = b.send(label, s, meta, data, eth_src=role.upstream)
                b.expect_copies(label, h, pay)
                b.s.notes.append(f"route {board.routes.path(s, d)} crosses node {K}")
                return
    raise ConfigError(f"node {K} relays no unicast route of {board.topology}: no forward scenario here")


def _probe(b: _Builder) -> None:
    board, K = b.b, b.K
    S = next(s for s in range(board.boards) if s != K)
    data = b.rng.integers(0, 256, 3 * (board.mtu - 48), dtype=np.uint8).tobytes()
    meta = dict(op=int(Op.kv_transfer), stage=int(Stage.prefill), collective=int(Collective.unicast),
                kv_id=b.kv_id, layer=b.layer, dst_set=1 << K, flags=int(Flags.ACK_REQ))
    h, pay = b.send(f"kv_transfer from node {S}", S, meta, data)
    # send fragments 0 and 2 only; fragment 1 comes later as a retransmission
    b.s.sends.pop()
    starts = np.concatenate([[0], np.cumsum(h["pay_len"].astype(np.int64))])
    keep = [0, 2]
    b.s.sends.append(Sent(f"kv_transfer from node {S}, fragments 1 and 3 of 3", h[keep],
                          np.concatenate([pay[starts[i] : starts[i + 1]] for i in keep]), S))
    first = h[0]
    probe = M.control_meta(S, K, Op.ack, msg_id=int(first["msg_id"]), seq=int(first["seq"]), probe=True)
    b.send(f"probe from node {S}", S, probe, b"", pause=0.002, control=True)
    b.expect_ack(h, S, nack_missing=[1], why="answer to the first probe")
    retx = h[[1]].copy()
    retx["flags"] |= np.uint8(Flags.RETX)
    b.s.sends.append(Sent(f"kv_transfer from node {S}, fragment 2 of 3 (RETX)", retx, pay[starts[1] : starts[2]], S,
                          pause=0.005))
    b.expect_ack(h, S, why="message complete")
    b.send(f"second probe from node {S}", S, probe, b"", pause=0.005, control=True)
    b.expect_ack(h, S, why="answer to the second probe")


# ---- comparing ------------------------------------------------------------------------------


@dataclass
class Got:
    header: dict
    payload: bytes
    eth_dst: str
    eth_src: str
    t: float


def _key(header: dict, payload: bytes, K: int) -> tuple:
    op = header["op"]
    if op in REPLY_OPS:
        return (op, "about", header["dst_set"], header["msg_id"])
    if header["src_node"] != K:
        return (op, header["src_node"], header["msg_id"], header["frag_idx"])
    return (op, K, header["frag_idx"])


def match(expected: list[Expect], got: list[Got], K: int) -> list[tuple[int | None, int | None]]:
    """Pairs (expected index, received index): first by key (op, fragment, message named), then in order."""
    pairs, used = [], set()
    free_e = []
    for i, e in enumerate(expected):
        k = _key(e.header, e.payload, K)
        j = next((j for j, g in enumerate(got) if j not in used and _key(g.header, g.payload, K) == k), None)
        if j is None:
            free_e.append(i)
        else:
            used.add(j)
            pairs.append((i, j))
    free_g = [j for j in range(len(got)) if j not in used]
    for i, j in zip(free_e, free_g):
        pairs.append((i, j))
    pairs += [(i, None) for i in free_e[len(free_g):]]
    pairs += [(None, j) for j in free_g[len(free_e):]]
    return sorted(pairs, key=lambda p: (p[0] is None, p[0] if p[0] is not None else p[1]))


def _show(field: str, v: int) -> str:
    if field in ENUM_FIELDS:
        e = ENUM_FIELDS[field]
        return f"{e(v).name} ({v})" if v in e._value2member_map_ else str(v)
    if field == "flags":
        names = "|".join(f.name for f in Flags if v & f) or "none"
        return f"{names} (0x{v:02x})"
    if field == "dst_set":
        return f"0x{v:x} {{{','.join(str(i) for i in range(64) if v >> i & 1)}}}"
    return str(v)


def _value_name(i: int, heads: int, head_dim: int) -> str:
    if not heads:
        return f"value {i}"
    if i < heads:
        return f"m[{i}]"
    if i < 2 * heads:
        return f"l[{i - heads}]"
    j = i - 2 * heads
    return f"o[{j // head_dim}][{j % head_dim}]"


def diff_frame(e: Expect, g: Got, K: int, *, rtol: float, atol: float) -> list[tuple[str, str]]:
    """(field, text) for each difference between an expected and a received frame."""
    out = []
    for f in HEADER_DTYPE.names:
        if e.own is not None and f in ("msg_id", "seq"):
            continue  # checked for consistency across the device's messages
        if e.header[f] != g.header[f]:
            out.append((f, f"expected {_show(f, e.header[f])}, got {_show(f, g.header[f])}"))
    if e.eth_dst != g.eth_dst:
        out.append(("eth_dst", f"expected {e.eth_dst}, got {g.eth_dst}"))
    if node_mac(K) != g.eth_src:  # pragma: no cover - only the device's frames are collected
        out.append(("eth_src", f"expected {node_mac(K)}, got {g.eth_src}"))
    out += _diff_payload(e, g, rtol=rtol, atol=atol)
    return out


def _diff_payload(e: Expect, g: Got, *, rtol: float, atol: float) -> list[tuple[str, str]]:
    a, b = e.payload, g.payload
    if a == b:
        return []
    if e.header["op"] == Op.nack and g.header["op"] == Op.nack:
        return [("payload", f"missing-fragment bitmap names {M.missing_of(b)}, expected {M.missing_of(a)}")]
    if len(a) != len(b):
        return [("payload", f"{len(b)} bytes, expected {len(a)}")]
    if e.values:
        x = np.frombuffer(a, e.values).astype(np.float64)
        y = np.frombuffer(b, e.values).astype(np.float64)
        bad = np.flatnonzero(~np.isclose(y, x, rtol=rtol, atol=atol, equal_nan=True))
        if not len(bad):
            return []
        i = int(bad[0])
        name = _value_name(e.value_base + i, e.heads, e.head_dim)
        return [("payload", f"{len(bad)} of {len(x)} values differ beyond rtol {rtol:g} / atol {atol:g}; "
                            f"first {name}: expected {x[i]:.7g}, got {y[i]:.7g}")]
    i = int(np.flatnonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))[0])
    return [("payload", f"bytes differ from byte {i}: expected 0x{a[i]:02x}, got 0x{b[i]:02x}")]


def numbering_problems(expected: list[Expect], got: list[Got], pairs) -> list[tuple[int, str, str]]:
    """(received index, field, text): fragments of one message share msg_id with consecutive seq; messages differ."""
    out = []
    by_msg: dict[int, list] = {}
    for i, j in pairs:
        if i is not None and j is not None and expected[i].own is not None:
            by_msg.setdefault(expected[i].own, []).append((expected[i].header["frag_idx"], j))
    ids = {}
    for own, frags in sorted(by_msg.items()):
        frags.sort()
        _, j0 = frags[0]
        mid, seq0 = got[j0].header["msg_id"], got[j0].header["seq"] - frags[0][0]
        for idx, j in frags[1:]:
            g = got[j].header
            if g["msg_id"] != mid:
                out.append((j, "msg_id", f"{g['msg_id']}, but fragment {frags[0][0] + 1} of the same message has {mid}"))
            if g["seq"] != (seq0 + idx) & 0xFFFFFFFF:
                out.append((j, "seq", f"{g['seq']}, expected {(seq0 + idx) & 0xFFFFFFFF} (one more per fragment)"))
        if mid in ids:
            out.append((j0, "msg_id", f"{mid} already used by another message of the device"))
        ids[mid] = own
    return out


# ---- running ------------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: Scenario
    got: list
    pairs: list
    problems: list  # (expected index | None, received index | None, field, text)
    probes: int
    elapsed: float

    @property
    def ok(self) -> bool:
        return not self.problems


def run(scenario: Scenario, sock: RawSocket, *, timeout: float = 2.0, settle: float = 0.1, rtol: float = 1e-5,
        atol: float = 1e-6) -> Result:
    """Send the scenario's frames, collect what the device sends back, compare."""
    board, K = scenario.board, scenario.board.node
    need = max(FRAME_HEADER_LEN + int(s.headers["pay_len"].max()) for s in scenario.sends)
    if need > sock.mtu + ETH_LEN:
        raise MtuTooSmall(f"{sock.iface}: MTU {sock.mtu} is too small for the scenario's {need}-byte frames "
                          f"(MCF mtu {board.mtu}); ip link set {sock.iface} mtu {board.mtu}")
    got: list[Got] = []
    probes = 0
    acked: set = set()
    partial: dict = {}
    sock.drain()
    t0 = time.monotonic()

    def collect(until: float, stop_when_done: bool) -> None:
        nonlocal probes
        while True:
            now = time.monotonic()
            if now >= until or (stop_when_done and (_all_matched(scenario.expected, got, K)
                                                    or proves_wrong(scenario.expected, got, K, rtol=rtol, atol=atol))):
                return
            buf, offsets, _ = sock.recv(timeout=min(0.05, until - now))
            if len(offsets) == 1:
                continue
            for g in received(buf, offsets, K, now - t0):
                if g.header["op"] == Op.ack and g.header["flags"] & Flags.ACK_REQ:
                    probes += 1  # the device probing for an ack: answer it, do not count it
                    _answer(sock, g.header, K)
                    continue
                got.append(g)
                _ack_device_message(sock, g.header, K, board, acked, partial)

    for s in scenario.sends:
        if s.pause:
            collect(time.monotonic() + s.pause, False)
        buf, offsets = encode_frames(s.headers, s.payload, eth_src=s.eth_src)
        sock.send(buf, offsets)
    collect(time.monotonic() + timeout, True)
    if not got and not probes:
        raise NoAnswer(f"board {K} sent nothing back on {sock.iface} within {timeout:g} s (is it cabled, is the "
                       f"link up, does it run as node {K} of {board.topology}? a slow board may answer later: "
                       f"--timeout {max(10, 5 * timeout):g}s waits longer)")
    collect(time.monotonic() + settle, False)
    pairs, problems = compare(scenario, got, rtol=rtol, atol=atol)
    return Result(scenario, got, pairs, problems, probes, time.monotonic() - t0)


def compare(scenario: Scenario, got: list[Got], *, rtol: float = 1e-5, atol: float = 1e-6):
    """Match the received frames to the expected ones; (pairs, problems) as in ``Result``."""
    K = scenario.board.node
    pairs = match(scenario.expected, got, K)
    problems = []
    for i, j in pairs:
        if i is None:
            g = got[j]
            problems.append((None, j, "frame", f"unexpected: {_describe(g.header)}"))
        elif j is None:
            problems.append((i, None, "frame", "missing: the device never sent it"))
        else:
            if "_malformed" in got[j].header:
                problems.append((i, j, got[j].header["_malformed"], "malformed frame"))
            for f, text in diff_frame(scenario.expected[i], got[j], K, rtol=rtol, atol=atol):
                problems.append((i, j, f, text))
    for j, f, text in numbering_problems(scenario.expected, got, pairs):
        i = next(a for a, b in pairs if b == j)
        problems.append((i, j, f, text))
    return pairs, problems


def received(buf, offsets, K: int, t: float = 0.0) -> list[Got]:
    """The frames of a batch that board ``K`` sent (source MAC), as ``Got`` records."""
    h, codes, _, raw = scan_frames(buf, offsets)
    mac = np.frombuffer(bytes.fromhex(node_mac(K).replace(":", "")), np.uint8)
    out = []
    for i in np.flatnonzero((raw[:, 6:12] == mac).all(axis=1)).tolist():
        row = _row(h[i])
        if codes[i]:
            row["_malformed"] = REASONS[codes[i]]
        s = int(offsets[i])
        out.append(Got(row, bytes(buf[s + FRAME_HEADER_LEN : int(offsets[i + 1])]), _mac(raw[i, 0:6]),
                       _mac(raw[i, 6:12]), t))
    return out


def _mac(b) -> str:
    return ":".join(f"{x:02x}" for x in b)


def _all_matched(expected: list[Expect], got: list[Got], K: int) -> bool:
    if len(got) < len(expected):
        return False
    keys = [_key(g.header, g.payload, K) for g in got]
    for e in expected:
        k = _key(e.header, e.payload, K)
        if k not in keys:
            return False
        keys.remove(k)
    return True


def proves_wrong(expected: list[Expect], got: list[Got], K: int, *, rtol: float, atol: float) -> bool:
    """A received frame already makes the run fail: no expected frame has its key (op, message,
    fragment), or the one that has differs from it. Waiting longer cannot make it pass."""
    free = list(range(len(expected)))
    for g in got:
        k = _key(g.header, g.payload, K)
        i = next((i for i in free if _key(expected[i].header, expected[i].payload, K) == k), None)
        if i is None or "_malformed" in g.header or diff_frame(expected[i], g, K, rtol=rtol, atol=atol):
            return True
        free.remove(i)
    return False


def _answer(sock, row, K) -> None:
    """Ack a probe of the device, as the board it probes."""
    to = int(row["dst_set"]).bit_length() - 1
    h, pay = M.message(M.control_meta(to, K, Op.ack, msg_id=row["msg_id"], seq=row["seq"]), b"", 1500)
    buf, offsets = encode_frames(h, pay, eth_src=to)
    sock.send(buf, offsets)


def _ack_device_message(sock, row, K, board, acked, partial) -> None:
    """Acknowledge the device's messages that ask for it, as each destination board would."""
    if not row["flags"] & Flags.ACK_REQ or row["src_node"] != K:
        return
    key = row["msg_id"]
    seen = partial.setdefault(key, set())
    seen.add(row["frag_idx"])
    if len(seen) < row["frag_cnt"] or key in acked:
        return
    acked.add(key)
    seq0 = (row["seq"] - row["frag_idx"]) & 0xFFFFFFFF
    for d in board.destinations(row["dst_set"], row["route_id"]) or ():
        if d != K:
            h, pay = M.message(M.control_meta(d, K, Op.ack, msg_id=key, seq=seq0), b"", 1500)
            buf, offsets = encode_frames(h, pay, eth_src=d)
            sock.send(buf, offsets)


def _describe(h: dict) -> str:
    op = Op(h["op"]).name if h["op"] in Op._value2member_map_ else f"op {h['op']}"
    dst = f"route {h['route_id']}" if h["route_id"] else _show("dst_set", h["dst_set"]).split(" ", 1)[1]
    return f"{op} n{h['src_node']}#{h['msg_id']} -> {dst} fragment {h['frag_idx'] + 1}/{h['frag_cnt']}"


def as_dict(res: Result, iface: str) -> dict:
    """What ``report`` prints, as data (``emu hw check --json``)."""
    s, b = res.scenario, res.scenario.board
    return {"scenario": s.name, "iface": iface, "board": b.node, "topology": b.topology, "root": b.root,
            "heads": b.heads, "mtu": b.mtu, "notes": list(s.notes),
            "sent": [{"label": x.label, "frames": len(x.headers)} for x in s.sends],
            "expected": [e.label for e in s.expected], "received": len(res.got), "probes": res.probes,
            "elapsed_s": res.elapsed, "ok": res.ok,
            "problems": [{"expected_frame": i, "received_frame": j, "field": f, "text": text}
                         for i, j, f, text in res.problems]}


def report(res: Result, iface: str) -> str:
    s = res.scenario
    b = s.board
    lines = [f"scenario {s.name} on {iface}: board {b.node} of {b.topology} (root {b.root}, {b.heads} heads, "
             f"mtu {b.mtu})"]
    lines += [f"  {n}" for n in s.notes]
    lines.append(f"  sent {len(s.sends)} messages ({s.frames_out()} frames):")
    lines += [f"    {x.label} ({len(x.headers)} frame{'s' if len(x.headers) > 1 else ''})" for x in s.sends]
    lines.append(f"  expected {len(s.expected)} frames back, received {len(res.got)}"
                 + (f" (and {res.probes} probes, answered)" if res.probes else "") + f" in {res.elapsed:.3f} s")
    for i, e in enumerate(s.expected):
        lines.append(f"    frame {i}: {e.label}")
    if res.ok:
        lines.append(f"PASS: all {len(s.expected)} frames match")
        return "\n".join(lines)
    for i, j, f, text in res.problems:
        if i is None:
            lines.append(f"received frame {j}: {text}")
        else:
            lines.append(f"frame {i} ({s.expected[i].label}): {f}: {text}")
    frames = {i for i, _, _, _ in res.problems if i is not None}
    extra = sum(1 for i, _, _, _ in res.problems if i is None)
    lines.append(f"FAIL: {len(res.problems)} difference{'s' if len(res.problems) != 1 else ''} in "
                 f"{len(frames)} of {len(s.expected)} expected frames" + (f", {extra} unexpected" if extra else ""))
    return "\n".join(lines)
