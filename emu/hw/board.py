"""The board NIC's installation and wire fields as `emu hw serve` runs them and `emu hw check` expects them.

The protocol itself (what a board does with a frame or a message) is
``emu.nic.protocol``, the code the emulator runs; this module holds what a live
board adds around it, built from the emulator's own pieces (routes, multicast
trees and reduction trees of ``emu.topology``, the arithmetic of
``emu.nic.reduce``, fragmentation of ``emu.codec``):

- ``Board``: board K of a topology, as installed on the device (node id,
  topology, reduction root, attention heads, MTU, multicast groups by route id);
- K's forwarding row for a frame (``Board.role``: ``emu.nic.protocol.tree_rows``
  of the multicast tree) and the upstream board it takes copies from (one
  interface on a shared segment hears every copy);
- the reduction tree (``reduction_parents``, the same rule as
  ``emu.nic.Nics.board_tree``) and contribution folding (``combine``);
- ``protocol_config``: the protocol's parameters, those of the kr260 hardware profile;
- the fields of the header-only ``ack`` / probe / ``nack`` control frames
  (``control_meta``, ``nack_bitmap``), which the NIC model leaves open.

See docs/hardware.md ("What serve answers") for the prose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from ..codec import Collective, Dtype, Flags, Op, ReduceOp, fragment, max_payload
from ..errors import ConfigError
from ..nic import protocol as P
from ..nic import reduce as R
from ..nic.control import control_meta  # noqa: F401  (re-exported: serve and check build control frames)
from .defaults import DEFAULT_HEADS, DEFAULT_TOPOLOGY, DEFAULT_TTL

REDUCING = (int(Collective.reduce), int(Collective.all_reduce))
REDUCE_OPS = (int(ReduceOp.max), int(ReduceOp.sum), int(ReduceOp.merge))


def nack_bitmap(frag_cnt: int, missing) -> bytes:
    """Payload of a ``nack``: one bit per fragment of the message (LSB first), set = missing
    (``emu.nic.protocol.nack_payload``)."""
    return P.nack_payload(frag_cnt, missing)


def protocol_config(*, rto_min_ps: int | None = None, rto_initial_ps: int | None = None, max_retries: int = 20,
                    answer_memory: int = 65536) -> P.ProtocolConfig:
    """The protocol parameters of a kr260 board, as the emulator's profile gives them (a value
    given here overrides it). A live board answers a probe about one message at most once per
    ``rto_min_ps``: no honest sender probes faster, a hostile one cannot make it amplify."""
    from ..nic.config import NicConfig
    from ..workload.profiles import hw_defaults, load

    hw = hw_defaults(load("hw", "kr260"))
    lo = int(hw["rto_min_ps"]) if rto_min_ps is None else int(rto_min_ps)
    init = int(hw["rto_initial_ps"]) if rto_initial_ps is None else int(rto_initial_ps)
    return P.ProtocolConfig(rto_min_ps=lo, rto_initial_ps=init, rto_max_ps=NicConfig.rto_max_ps,
                            max_retries=max_retries, answer_gap_ps=lo, answer_memory=answer_memory)


def missing_of(payload) -> list[int]:
    """Fragments a ``nack`` names (an empty bitmap: the receiver has none, resend all)."""
    bits = np.unpackbits(np.frombuffer(bytes(payload), np.uint8), bitorder="little")
    return np.flatnonzero(bits).tolist()


def reduction_parents(G, routes, boards: int, root: int, members) -> dict[int, int]:
    """Parent board of each member (but the root) in a reduction towards ``root``: the
    emulator's rule, ``emu.topology.reduction_parents`` (``boards`` is kept for callers)."""
    from ..topology import reduction_parents as parents

    return parents(G, routes, root, members)


@dataclass(frozen=True)
class Role:
    """Board K's part in delivering one frame from ``src`` to ``dsts``."""

    member: bool           # K is a destination: deliver
    forwards: bool         # K has children in the multicast tree: send one copy on
    upstream: int | None   # the board whose copy K takes (nearest board above K in the tree)
    row: tuple = (0,)      # K's forwarding row (emu.nic.protocol.tree_rows): [member, egress links...]


@dataclass
class Board:
    """Board ``node`` of ``topology`` as installed on the device (and assumed by the checker)."""

    node: int
    topology: str = DEFAULT_TOPOLOGY
    root: int = 0
    heads: int = DEFAULT_HEADS
    mtu: int = 1500
    groups: dict = field(default_factory=dict)  # route_id -> tuple of boards

    def __post_init__(self):
        from ..topology import Routes, build

        self.G = build(self.topology)
        self.routes = Routes(self.G)
        self.boards = int(self.G.graph["boards"])
        for what, b in (("--node", self.node), ("--root", self.root)):
            if not 0 <= b < self.boards:
                raise ConfigError(f"{what} {b}: {self.topology} has boards 0..{self.boards - 1}")
        if self.boards > 64:
            raise ConfigError(f"{self.topology}: {self.boards} boards; dst_set addresses boards 0..63 only")
        if self.heads < 1:
            raise ConfigError(f"--heads {self.heads}: must be at least 1")
        max_payload(self.mtu)
        for rid, members in self.groups.items():
            if not 0 < rid <= 0xFFFF:
                raise ConfigError(f"--group {rid}: route ids are 1..65535")
            bad = [b for b in members if not 0 <= b < self.boards]
            if bad or not members:
                raise ConfigError(f"--group {rid}: boards {bad or 'none'} not in 0..{self.boards - 1}")
        self.parents = reduction_parents(self.G, self.routes, self.boards, self.root, range(self.boards))
        self._roles: dict = {}
        # link ids as the emulator's network numbers them (sorted edges)
        self.link_id = {e: i for i, e in enumerate(sorted(self.G.edges))}
        self.nodes = max(self.G.nodes) + 1
        self.max_out = max((self.G.out_degree(n) for n in self.G.nodes), default=1)

    # ---- reduction tree ----------------------------------------------------------------

    @property
    def parent(self) -> int | None:
        return self.parents.get(self.node)

    def children(self, node: int | None = None) -> list[int]:
        node = self.node if node is None else node
        return sorted(c for c, p in self.parents.items() if p == node)

    def subtree(self, node: int) -> list[int]:
        out, todo = [], [node]
        while todo:
            v = todo.pop()
            out.append(v)
            todo += self.children(v)
        return sorted(out)

    @property
    def group_bits(self) -> int:
        return (1 << self.boards) - 1

    # ---- forwarding ----------------------------------------------------------------------

    def destinations(self, dst_set: int, route_id: int) -> tuple[int, ...] | None:
        """Boards a frame is for: an installed group for a route id, else the dst_set bits."""
        if route_id:
            return self.groups.get(route_id)
        return tuple(i for i in range(min(64, self.boards)) if dst_set >> i & 1)

    def role(self, src: int, dsts: tuple[int, ...]) -> Role:
        """Member, forwarder, and upstream board of this board for a frame from ``src`` to ``dsts``.

        The tree is ``emu.topology.multicast_tree`` (the emulator's multicast engine;
        for one destination it is the unicast route), its rows ``emu.nic.protocol.tree_rows``,
        the rows the emulator's network installs for it.
        """
        key = (src, dsts)
        role = self._roles.get(key)
        if role is None:
            role = self._roles[key] = self._role(src, dsts)
        return role

    def _role(self, src: int, dsts: tuple[int, ...]) -> Role:
        from ..topology import multicast_tree

        K = self.node
        member = K in dsts
        alone = (int(member),)  # not in the tree: a row that only says whether to deliver
        others = [d for d in dsts if d != src and d < self.boards]
        if not 0 <= src < self.boards or not others:
            return Role(member, False, None, alone)
        try:
            tree = multicast_tree(self.G, self.routes, src, others)
        except ConfigError:
            return Role(member, False, None, alone)
        if K not in tree or K == src:
            return Role(member, False, None, alone)
        rows = P.tree_rows(tree, others, self.nodes, self.max_out, lambda u, v: self.link_id[(u, v)])
        row = tuple(int(x) for x in rows[K])
        parent_of = {c: p for p, cs in tree.items() for c in cs}
        up = parent_of[K]
        while up >= self.boards:
            up = parent_of[up]
        return Role(bool(row[0]), any(x >= 0 for x in row[1:]), up, row)


@cache
def head_dim_of(msg_len: int, heads: int, dtype: int) -> int:
    """head_dim of a packed (m, l, o~) state of ``msg_len`` bytes with ``heads`` heads; -1 if none fits."""
    item = R.WIRE_DTYPES[Dtype(dtype)].itemsize
    values, rest = divmod(msg_len, item)
    if rest or values % heads or values // heads < 2:
        return -1
    return values // heads - 2


def combine(op: int, dtype: int, heads: int, acc: bytes | None, payload: bytes) -> bytes:
    """Fold one contribution into an accumulator with ``emu.nic.reduce.combine``."""
    if acc is None:
        return payload
    hd = head_dim_of(len(payload), heads, dtype) if op == ReduceOp.merge else 0
    return R.combine(ReduceOp(op), acc, payload, dtype=Dtype(dtype), heads=heads, head_dim=hd)


def check_contribution(op: int, dtype: int, heads: int, msg_len: int) -> str | None:
    """Why a contribution cannot be reduced (None if it can)."""
    if op not in REDUCE_OPS:
        return f"reduce_op {ReduceOp(op).name} is not a reduction"
    if dtype not in (int(Dtype.fp32), int(Dtype.fp16)):
        return f"dtype {Dtype(dtype).name}: reductions carry fp32 or fp16"
    item = R.WIRE_DTYPES[Dtype(dtype)].itemsize
    if msg_len % item:
        return f"msg_len {msg_len} is not a whole number of {Dtype(dtype).name} values"
    if op == ReduceOp.merge and head_dim_of(msg_len, heads, dtype) < 0:
        return f"msg_len {msg_len} is not a (m, l, o~) state of {heads} heads"
    return None


def result_meta(board: Board, key: tuple, *, op: int, ack_req: bool) -> dict:
    """Header fields of the message a board sends when a reduction ``key`` is complete.

    ``key`` = (stage, layer, kv_id, collective, reduce_op, dtype). Below the root:
    ``partial_state`` to the parent. At the root of an ``all_reduce``: ``reduce_result``
    multicast to the whole group. At the root of a ``reduce``: nothing (delivered locally).
    """
    stage, layer, kv_id, collective, _, dtype = key
    meta = dict(stage=stage, layer=layer, kv_id=kv_id, collective=collective, reduce_op=op, dtype=dtype,
                src_node=board.node, flags=int(Flags.ACK_REQ) if ack_req else 0, ttl=DEFAULT_TTL)
    out, dsts = P.reduction_result(board.node, board.root, board.parent, collective, range(board.boards))
    if out is None:
        return {}
    # to the whole group, K's own bit included, as a group address (K drops its own frames)
    dst_set = 1 << dsts[0] if out == Op.partial_state else board.group_bits
    return dict(meta, op=int(out), dst_set=dst_set)


def message(meta: dict, data: bytes | None, mtu: int, msg_id: int | None = None, seq: int | None = None):
    """Fragment one message into header rows (``data`` None: a timing-mode message of ``meta['msg_len']``)."""
    tmpl = dict(meta)
    if msg_id is not None:
        tmpl["msg_id"] = msg_id & 0xFFFFFFFF
    if seq is not None:
        tmpl["seq"] = seq & 0xFFFFFFFF
    if data is None:
        return fragment(tmpl, tmpl.get("msg_len", 0), mtu=mtu)
    return fragment(tmpl, data=data, mtu=mtu)
