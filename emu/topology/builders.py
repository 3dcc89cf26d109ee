"""Topology builders, the CLI spec parser ``build`` and ``default_for``.

Every builder returns a checked ``nx.DiGraph`` (see ``graph.py``) whose links all carry the
attributes of ``link``; override single links afterwards with ``set_link``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import networkx as nx

from ..errors import ConfigError
from .graph import MAX_BOARDS, MAX_LINKS, LinkDefaults, add_link, new_graph

DEFAULT_LINK = LinkDefaults()


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _int_arg(value, what: str, lo: int) -> int:
    _need(not isinstance(value, bool) and isinstance(value, int), f"{what} must be an integer, got {value!r}")
    _need(value >= lo, f"{what} must be >= {lo}, got {value}")
    return value


def ring(n: int, bidirectional: bool = True, link: LinkDefaults = DEFAULT_LINK) -> nx.DiGraph:
    """n boards in a ring: i -> i+1 (mod n), plus i+1 -> i when bidirectional.

    Named "bring<n>" when bidirectional, "ring<n>" when unidirectional (as in ``build``).
    """
    _int_arg(n, "ring: n", 2)
    shape = "bring" if bidirectional else "ring"
    G = new_graph(f"{shape}{n}", n, shape=shape)
    for i in range(n):
        add_link(G, i, (i + 1) % n, link, both=bidirectional)
    return G


def _grid(shape: str, rows: int, cols: int, wrap: bool, link: LinkDefaults) -> nx.DiGraph:
    _int_arg(rows, f"{shape}: rows", 1)
    _int_arg(cols, f"{shape}: cols", 1)
    _need(rows * cols >= 2, f"{shape}: {rows}x{cols} has fewer than 2 boards")
    G = new_graph(f"{shape}{rows}x{cols}", rows * cols, shape=shape, rows=rows, cols=cols)
    for r in range(rows):
        for c in range(cols):
            G.nodes[r * cols + c].update(row=r, col=c)
    for r in range(rows):
        for c in range(cols):
            b = r * cols + c
            # With wrap, a dimension of size 2 wraps onto the same neighbour: one link, not two;
            # size 1 would wrap onto itself: no link.
            if c + 1 < cols or (wrap and cols > 2):
                add_link(G, b, r * cols + (c + 1) % cols, link)
            if r + 1 < rows or (wrap and rows > 2):
                add_link(G, b, ((r + 1) % rows) * cols + c, link)
    return G


def mesh2d(rows: int, cols: int, link: LinkDefaults = DEFAULT_LINK) -> nx.DiGraph:
    """rows x cols grid; board r*cols + c sits at (r, c) and links to its 4-neighbours."""
    return _grid("mesh", rows, cols, False, link)


def torus2d(rows: int, cols: int, link: LinkDefaults = DEFAULT_LINK) -> nx.DiGraph:
    """rows x cols grid with wrap-around links; board r*cols + c sits at (r, c)."""
    return _grid("torus", rows, cols, True, link)


def star(n: int, link: LinkDefaults = DEFAULT_LINK) -> nx.DiGraph:
    """n boards on one switch (node n)."""
    _int_arg(n, "star: n", 2)
    G = new_graph(f"star{n}", n, shape="star")
    G.add_node(n, kind="switch", layer="edge")
    for b in range(n):
        add_link(G, b, n, link)
    return G


def full_mesh(n: int, link: LinkDefaults = DEFAULT_LINK) -> nx.DiGraph:
    """n boards, every pair directly linked."""
    _int_arg(n, "full: n", 2)
    G = new_graph(f"full{n}", n, shape="full")
    for a in range(n):
        for b in range(a + 1, n):
            add_link(G, a, b, link)
    return G


def fat_tree(k: int, link: LinkDefaults = DEFAULT_LINK) -> nx.DiGraph:
    """k-ary fat-tree (Al-Fares et al.): k pods of k/2 edge and k/2 aggregation switches,
    (k/2)^2 core switches, k^3/4 boards as hosts.

    Numbering: host h of edge switch e in pod p is board p*(k/2)^2 + e*(k/2) + h; then edge
    switches (pod-major), aggregation switches (pod-major), core switches. Aggregation
    switch a of every pod links to core switches a*(k/2) .. a*(k/2)+k/2-1. Switches carry
    ``layer`` ("edge", "agg", "core") and, below the core, ``pod``.
    """
    _int_arg(k, "fattree: k", 2)
    _need(k % 2 == 0, f"fattree: k must be even, got {k}")
    h = k // 2
    hosts = k**3 // 4
    G = new_graph(f"fattree{k}", hosts, shape="fattree", k=k)
    edge0, agg0 = hosts, hosts + k * h
    core0 = agg0 + k * h
    for p in range(k):
        for e in range(h):
            G.add_node(edge0 + p * h + e, kind="switch", layer="edge", pod=p)
        for a in range(h):
            G.add_node(agg0 + p * h + a, kind="switch", layer="agg", pod=p)
    for c in range(h * h):
        G.add_node(core0 + c, kind="switch", layer="core")
    for p in range(k):
        for e in range(h):
            sw = edge0 + p * h + e
            for i in range(h):
                board = p * h * h + e * h + i
                G.nodes[board]["pod"] = p
                add_link(G, board, sw, link)
            for a in range(h):
                add_link(G, sw, agg0 + p * h + a, link)
        for a in range(h):
            for j in range(h):
                add_link(G, agg0 + p * h + a, core0 + a * h + j, link)
    return G


def _factor(n: int) -> tuple[int, int]:
    """rows x cols = n with rows <= cols and rows as large as possible (most square)."""
    rows = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return rows, n // rows


def _torus_degree(rows: int, cols: int) -> int:
    # Per dimension: size 1 needs no port, 2 needs one (the wrap is the same neighbour), else two.
    return sum(min(s - 1, 2) for s in (rows, cols))


def default_for(n_boards: int, ports: int, link: LinkDefaults = DEFAULT_LINK) -> nx.DiGraph:
    """What a lab would cable: n boards with ``ports`` ports each.

    n <= ports+1: full mesh. Otherwise the most square 2D torus whose degree fits the ports
    (16 boards, 4 ports: torus 4x4; a prime n gives a 1 x n torus, i.e. a bidirectional
    ring). With a single port per board: a star on one switch.
    """
    _int_arg(n_boards, "default topology: boards", 2)
    _int_arg(ports, "default topology: ports", 1)
    if n_boards <= ports + 1:
        return full_mesh(n_boards, link)
    shapes = [(r, n_boards // r) for r in range(1, math.isqrt(n_boards) + 1) if n_boards % r == 0]
    # Most square first: the smallest diameter for the board count.
    for rows, cols in sorted(shapes, key=lambda s: s[1] - s[0]):
        if _torus_degree(rows, cols) <= ports:
            return ring(n_boards, True, link) if rows == 1 else torus2d(rows, cols, link)
    return star(n_boards, link)


_SHAPES = ("ring", "bring", "mesh", "torus", "star", "full", "fattree", "auto")
_SPEC = re.compile(r"^(?P<kind>[a-z]+)(?::(?P<arg>.*))?$")


def _size(spec: str, arg: str) -> int:
    _need(arg.isdigit() and len(arg) <= 9, f"topology {spec!r}: expected a board count after ':', got {arg!r}")
    return int(arg)


def _dims(spec: str, arg: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d{1,9})x(\d{1,9})", arg)
    _need(m is not None, f"topology {spec!r}: expected ROWSxCOLS after ':', e.g. 4x4, got {arg!r}")
    return int(m.group(1)), int(m.group(2))




def _check_planned(spec: str, kind: str, arg: str, n: int | None) -> None:
    """The board and link count a shape asks for, checked before anything is built
    (``torus:3000x3000`` would build 9 million boards, then fail the board count)."""
    if kind in ("mesh", "torus"):
        rows, cols = _dims(spec, arg)
        boards, links = rows * cols, 4 * rows * cols
    else:
        k = _size(spec, arg)
        boards = k**3 // 4 if kind == "fattree" else k
        links = {"fattree": 3 * boards * 2, "full": boards * (boards - 1), "star": 2 * boards}.get(kind, 2 * boards)
    if n is not None and boards != n:
        raise ConfigError(f"topology {spec!r}: has {boards} boards, expected {n}")
    if boards > MAX_BOARDS:
        raise ConfigError(f"topology {spec!r}: {boards:,} boards; at most {MAX_BOARDS}")
    if links > MAX_LINKS:
        raise ConfigError(f"topology {spec!r}: {links:,} link directions; at most {MAX_LINKS:,}")


def _looks_like_file(spec: str) -> bool:
    return "/" in spec or "\\" in spec or Path(spec).suffix.lower() in (".json", ".graphml", ".xml")


def build(spec: str, n: int | None = None, link: LinkDefaults = DEFAULT_LINK, ports: int = 4) -> nx.DiGraph:
    """Parse a CLI topology spec and build it.

    ``ring`` (unidirectional) | ``bring`` (bidirectional ring) | ``mesh`` | ``torus`` | ``star``
    | ``full`` | ``fattree`` | ``auto`` (``default_for(n, ports)``) | a .json/.graphml path.
    Shapes: ``ring:8``, ``mesh:2x8``, ``torus:4x4``, ``fattree:4``; without one the board count
    ``n`` decides (most square grid, the fat-tree with k^3/4 = n). When both are given they
    must agree.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("topology: empty spec")
    spec = spec.strip()
    m = _SPEC.match(spec.lower())
    if m is None or m.group("kind") not in _SHAPES:
        if _looks_like_file(spec) or Path(spec).exists():
            from .io import load

            G = load(spec, link)
            _need(n is None or G.graph["boards"] == n, f"{spec}: has {G.graph['boards']} boards, expected {n}")
            return G
        raise ConfigError(
            f"topology {spec!r}: unknown; expected one of {'|'.join(_SHAPES)} (optionally with :SHAPE) or a .json/.graphml file"
        )
    kind, arg = m.group("kind"), m.group("arg")
    if arg is None and n is None:
        raise ConfigError(f"topology {spec!r}: needs a board count or a shape such as {kind}:{'4x4' if kind in ('mesh', 'torus') else '8'}")
    if arg is not None:
        _check_planned(spec, kind, arg, n)
    if kind in ("mesh", "torus"):
        rows, cols = _dims(spec, arg) if arg is not None else _factor(n)
        G = (mesh2d if kind == "mesh" else torus2d)(rows, cols, link)
    elif kind == "fattree":
        if arg is not None:
            k = _size(spec, arg)
        else:
            k = round((4 * n) ** (1 / 3))
            _need(k**3 == 4 * n, f"topology {spec!r}: {n} boards is not k^3/4 for any k; give fattree:K")
        G = fat_tree(k, link)
    else:
        size = _size(spec, arg) if arg is not None else n
        if kind == "auto":
            G = default_for(size, ports, link)
        else:
            G = {"ring": lambda s: ring(s, False, link), "bring": lambda s: ring(s, True, link),
                 "star": lambda s: star(s, link), "full": lambda s: full_mesh(s, link)}[kind](size)
    if n is not None and G.graph["boards"] != n:
        raise ConfigError(f"topology {spec!r}: has {G.graph['boards']} boards, expected {n}")
    return G
