"""The topology data model: an ``nx.DiGraph`` with boards, switches and per-direction links.

Nodes are ints: boards ``0..N-1`` (``kind="board"``) then switches ``N..`` (``kind="switch"``).
Every directed edge is one direction of a link and carries the attributes in ``LINK_ATTRS``.
Graph attributes: ``name`` (e.g. "torus4x4") and ``boards`` (N); builders also record
``shape`` ("ring", "bring", "mesh", "torus", "star", "full", "fattree", "file") and the shape's
parameters (``rows``/``cols``, ``k``) so that ring embeddings can use them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..errors import ConfigError

#: Edge attributes every directed edge carries, in this order.
LINK_ATTRS = ("rate_bps", "latency_ps", "mtu", "queue_bytes", "queue_frames")

#: Smallest MTU: the packet engine (emu/net) rejects smaller ones, so files are checked
#: against it at load time, where the file and link can be named.
MIN_MTU = 64
MAX_MTU = 48 + 0xFFFF   # the wire format's largest frame: header + a 16-bit pay_len
MAX_BOARDS = 4096       # as many as a trace may have (emu.workload.validate.MAX_NODES)
MAX_NODES = 16 * MAX_BOARDS  # boards and switches of a topology file
# Each link attribute's range (None: no limit, for queues). The upper bounds are the hardware
# profile's for the same quantity (emu.workload.profiles.RANGES): far beyond any real link,
# and small enough that the engine's int64 picosecond clock and byte counts cannot overflow.
LINK_RANGES = {"rate_bps": (1, 10**15), "latency_ps": (0, 10**12), "mtu": (MIN_MTU, MAX_MTU),
               "queue_bytes": (1, 1 << 40), "queue_frames": (1, 1 << 32)}
MAX_LINKS = 2_000_000   # link directions a spec may ask for (full:1000 has 999,000)


def _check_int(value, what: str, lo: int, hi: int, where: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    # bool is an int subclass; True as a rate is a typo, not a number.
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{where}: {what} must be an integer, got {value!r}")
    if value < lo:
        raise ConfigError(f"{where}: {what} must be >= {lo}, got {value}")
    if value > hi:
        raise ConfigError(f"{where}: {what} must be <= {hi}, got {value}")


def check_link_attr(name: str, value, where: str) -> None:
    """Raise ConfigError if ``value`` is not valid for link attribute ``name``."""
    if name not in LINK_RANGES:
        raise ConfigError(f"{where}: unknown link attribute {name!r} (expected one of {', '.join(LINK_ATTRS)})")
    # Queues: None is no limit of this kind. 0 is refused: "no room" and "no limit" are
    # both plausible readings, and the engine reads it as the latter.
    _check_int(value, name, *LINK_RANGES[name], where, optional=name.startswith("queue_"))


@dataclass(frozen=True)
class LinkDefaults:
    """Attributes applied to every link direction a builder creates.

    The defaults describe one KR260 1 GbE port (64 KiB egress buffer, as emu/net assumes);
    a hardware profile normally supplies its own. A queue limit of None means no limit of
    that kind; a link with neither gets the engine's default egress queue.
    """

    rate_bps: int = 1_000_000_000
    latency_ps: int = 1_000_000
    mtu: int = 1500
    queue_bytes: int | None = 65536
    queue_frames: int | None = None

    def __post_init__(self):
        for name in LINK_ATTRS:
            check_link_attr(name, getattr(self, name), "link defaults")

    def attrs(self) -> dict:
        """The edge attribute dict for one link direction."""
        return {name: getattr(self, name) for name in LINK_ATTRS}

    def replace(self, **changes) -> "LinkDefaults":
        return dataclasses.replace(self, **changes)


def new_graph(name: str, boards: int, **graph_attrs) -> nx.DiGraph:
    G = nx.DiGraph(name=name, boards=boards, **graph_attrs)
    G.add_nodes_from(range(boards), kind="board")
    return G


def add_link(G: nx.DiGraph, u: int, v: int, link: LinkDefaults, both: bool = True) -> None:
    """Add u->v (and v->u if ``both``) with the attributes of ``link``."""
    attrs = link.attrs()
    G.add_edge(u, v, **attrs)
    if both:
        G.add_edge(v, u, **attrs)


def set_link(G: nx.DiGraph, u: int, v: int, both: bool = True, **attrs) -> None:
    """Override attributes of the existing link u->v, and of v->u too if ``both`` and it exists.

    Example: ``set_link(G, 3, 4, latency_ps=5_000_000, queue_bytes=65536)``.
    """
    where = f"{G.graph.get('name', 'topology')}: link {u}-{v}"
    if not G.has_edge(u, v):
        raise ConfigError(f"{where}: no such link")
    for name, value in attrs.items():
        check_link_attr(name, value, where)
    G.edges[u, v].update(attrs)
    if both and G.has_edge(v, u):
        G.edges[v, u].update(attrs)


def n_boards(G: nx.DiGraph) -> int:
    return int(G.graph["boards"])


def boards(G: nx.DiGraph) -> list[int]:
    return list(range(n_boards(G)))


def switches(G: nx.DiGraph) -> list[int]:
    return list(range(n_boards(G), G.number_of_nodes()))


def check(G: nx.DiGraph, where: str | None = None) -> nx.DiGraph:
    """Validate the model's invariants; raise ConfigError naming the first violation. Returns G."""
    where = where or str(G.graph.get("name", "topology"))
    if not isinstance(G, nx.DiGraph) or G.is_multigraph():
        raise ConfigError(f"{where}: a topology must be a networkx DiGraph")
    if "boards" not in G.graph:
        raise ConfigError(f"{where}: graph attribute 'boards' is missing")
    N = G.graph["boards"]
    M = G.number_of_nodes()
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or not 1 <= N <= M:
        raise ConfigError(f"{where}: graph attribute boards={N!r} must be between 1 and the node count {M}")
    if set(G.nodes) != set(range(M)):
        raise ConfigError(f"{where}: nodes must be the integers 0..{M - 1}")
    for n, kind in G.nodes(data="kind"):
        want = "board" if n < N else "switch"
        if kind != want:
            raise ConfigError(f"{where}: node {n}: kind must be {want!r} (boards come first), got {kind!r}")
    for u, v, data in G.edges(data=True):
        if u == v:
            raise ConfigError(f"{where}: link {u}-{v}: a node cannot link to itself")
        for name in LINK_ATTRS:
            if name not in data:
                raise ConfigError(f"{where}: link {u}-{v}: attribute {name} is missing")
            check_link_attr(name, data[name], f"{where}: link {u}-{v}")
    return G


def edge_index(G: nx.DiGraph) -> dict[tuple[int, int], int]:
    """Link ids: every directed edge numbered in ascending (u, v) order. Stable for a given G."""
    return {e: i for i, e in enumerate(sorted(G.edges))}


@dataclass(frozen=True)
class LinkTable:
    """Per-link arrays indexed by link id (see ``edge_index``); None queue limits are -1."""

    u: np.ndarray
    v: np.ndarray
    rate_bps: np.ndarray
    latency_ps: np.ndarray
    mtu: np.ndarray
    queue_bytes: np.ndarray
    queue_frames: np.ndarray

    def __len__(self) -> int:
        return len(self.u)


def link_table(G: nx.DiGraph) -> LinkTable:
    """Numpy columns of every link's endpoints and attributes, in link-id order."""
    edges = sorted(G.edges)
    cols = {"u": [e[0] for e in edges], "v": [e[1] for e in edges]}
    for name in LINK_ATTRS:
        vals = [G.edges[e][name] for e in edges]
        cols[name] = [-1 if x is None else x for x in vals]
    return LinkTable(**{k: np.asarray(v, dtype=np.int64).reshape(-1) for k, v in cols.items()})
