"""Loading and saving topologies as JSON or GraphML (format in docs/topology.md).

Link attributes may be given in any of these units (one per quantity):
rate_bps | rate_mbps | rate_gbps, latency_ps | latency_ns | latency_us, mtu, queue_bytes,
queue_frames. Missing attributes come from the file's ``defaults`` (JSON only), then from
the ``link`` argument. Queue limits may be null (JSON) or -1 for no limit.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path

import networkx as nx

from ..atomic import atomic_file
from ..errors import ConfigError
from ..jsontext import parse_json
from ..units import parse_decimal
from .graph import LINK_ATTRS, LINK_RANGES, MAX_BOARDS, MAX_NODES, LinkDefaults, check, new_graph

_UNITS = {
    "rate_bps": ("rate_bps", 1),
    "rate_mbps": ("rate_bps", 10**6),
    "rate_gbps": ("rate_bps", 10**9),
    "latency_ps": ("latency_ps", 1),
    "latency_ns": ("latency_ps", 10**3),
    "latency_us": ("latency_ps", 10**6),
    "mtu": ("mtu", 1),
    "queue_bytes": ("queue_bytes", 1),
    "queue_frames": ("queue_frames", 1),
}


def _convert(key: str, value, where: str):
    """One file attribute -> (model attribute, exact int value or None)."""
    name, scale = _UNITS[key]
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        if name in ("queue_bytes", "queue_frames"):
            return name, None
        raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    try:
        # An exact decimal keeps 0.1 exact, so 0.1 us is 100000 ps, not 99999.
        given = parse_decimal(value, f"{where}: {key}")
    except ConfigError:
        raise ConfigError(f"{where}: {key} must be a number, got {value!r}") from None
    lo, hi = LINK_RANGES[name]
    # Name the key as the user wrote it: "latency_ns must be >= 0", not latency_ps.
    too_low = ConfigError(f"{where}: {key} must be {'> 0' if name == 'rate_bps' else f'>= {lo}'}, got {value}")
    limit = Decimal(hi) / scale
    if given > limit:  # checked before scaling: 1e999999999 would overflow Decimal
        raise ConfigError(f"{where}: {key} must be <= {limit:f}, got {value}")
    if given < -limit:
        raise too_low
    exact = given * scale
    if exact != exact.to_integral_value():
        raise ConfigError(f"{where}: {key}={value} is not a whole number of {name.split('_')[-1]}")
    out = int(exact)
    if name in ("queue_bytes", "queue_frames") and out == -1:
        return name, None  # -1 is "no limit", as in link_table (GraphML has no null)
    if out < lo:
        raise too_low
    return name, out


def _link_attrs(raw: dict, where: str, strict: bool) -> dict:
    out: dict = {}
    for key, value in raw.items():
        if key not in _UNITS:
            if strict:
                raise ConfigError(f"{where}: unknown attribute {key!r} (expected one of {', '.join(_UNITS)})")
            continue
        name, val = _convert(key, value, where)
        if name in out:
            raise ConfigError(f"{where}: {name.split('_')[0]} is given twice (in different units)")
        out[name] = val
    return out


def _node_key(x):
    """File node id -> hashable key: int-like strings become ints so '3' and 3 are one node."""
    if isinstance(x, str) and x.strip().lstrip("-").isdigit():
        return int(x)
    return x


def _assemble(path: str, name: str, nodes: list[tuple[object, str, dict]],
              links: list[tuple[object, object, bool, dict, str]], defaults: dict) -> nx.DiGraph:
    """Build the model graph from parsed file content.

    nodes: (file id, kind, extra node attrs); links: (u, v, directed, attrs, where).
    Boards are numbered 0..N-1 then switches N.., each in ascending id order when every id
    is an integer, otherwise in file order; a node whose number differs from its file id
    keeps the file id as ``label``.
    """

    if len(nodes) > MAX_NODES:
        raise ConfigError(f"{path}: {len(nodes):,} nodes; at most {MAX_NODES:,} (boards and switches)")
    seen: dict = {}
    for fid, kind, _ in nodes:
        if kind not in ("board", "switch"):
            raise ConfigError(f"{path}: node {fid}: kind must be 'board' or 'switch', got {kind!r}")
        if fid in seen:
            raise ConfigError(f"{path}: node {fid}: defined twice")
        seen[fid] = kind
    if not any(kind == "board" for _, kind, _ in nodes):
        raise ConfigError(f"{path}: no boards (nodes with kind 'board')")
    numeric = all(isinstance(fid, int) for fid, _, _ in nodes)
    order = sorted(nodes, key=lambda t: t[0]) if numeric else list(nodes)
    order = [t for t in order if t[1] == "board"] + [t for t in order if t[1] == "switch"]
    number = {fid: i for i, (fid, _, _) in enumerate(order)}
    n_boards = sum(1 for t in order if t[1] == "board")
    if n_boards > MAX_BOARDS:
        raise ConfigError(f"{path}: {n_boards:,} boards; at most {MAX_BOARDS}")
    G = new_graph(name, n_boards, shape="file")
    for i, (fid, kind, extra) in enumerate(order):
        G.add_node(i, **extra)
        G.nodes[i]["kind"] = kind
        if fid != i:
            G.nodes[i]["label"] = str(fid)
    for u, v, directed, attrs, where in links:
        for end in (u, v):
            if end not in number:
                raise ConfigError(f"{where}: node {end} is not defined")
        if u == v:
            raise ConfigError(f"{where}: a node cannot link to itself")
        a, b = number[u], number[v]
        full = {**defaults, **attrs}
        for direction in [(a, b)] + ([] if directed else [(b, a)]):
            if G.has_edge(*direction):
                fu, fv = (u, v) if direction == (a, b) else (v, u)
                raise ConfigError(f"{where}: direction {fu}->{fv} is defined twice")
            G.add_edge(*direction, **full)
    return check(G, where=path)


def _defaults_of(link: LinkDefaults, file_defaults: dict) -> dict:
    return {**link.attrs(), **file_defaults}


def _load_json(path: str, text: str, link: LinkDefaults) -> nx.DiGraph:
    doc = parse_json(text, path, ConfigError)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: the top level must be an object with 'nodes' and 'links'")
    unknown = set(doc) - {"name", "defaults", "nodes", "links", "comment", "graph"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key {sorted(unknown)[0]!r} (expected name, defaults, nodes, links)")
    name = doc.get("name", Path(path).stem)
    if not isinstance(name, str):
        raise ConfigError(f"{path}: name must be a string")
    raw_defaults = doc.get("defaults", {})
    if not isinstance(raw_defaults, dict):
        raise ConfigError(f"{path}: defaults must be an object")
    defaults = _defaults_of(link, _link_attrs(raw_defaults, f"{path}: defaults", strict=True))
    raw_nodes, raw_links = doc.get("nodes"), doc.get("links")
    if not isinstance(raw_nodes, list):
        raise ConfigError(f"{path}: 'nodes' must be a list")
    if not isinstance(raw_links, list):
        raise ConfigError(f"{path}: 'links' must be a list")
    nodes = []
    for i, item in enumerate(raw_nodes):
        where = f"{path}: nodes[{i}]"
        if not isinstance(item, dict):
            item = {"id": item}
        if "id" not in item:
            raise ConfigError(f"{where}: missing 'id'")
        fid = item["id"]
        if isinstance(fid, bool) or not isinstance(fid, (int, str)):
            raise ConfigError(f"{where}: id must be an integer or a string, got {fid!r}")
        extra = {k: v for k, v in item.items() if k not in ("id", "kind")}
        for k, v in extra.items():
            if not isinstance(v, (int, float, str, bool)):
                raise ConfigError(f"{where}: attribute {k!r} must be a number or a string")
        nodes.append((_node_key(fid), item.get("kind", "board"), extra))
    links = []
    for i, item in enumerate(raw_links):
        if not isinstance(item, dict) or "u" not in item or "v" not in item:
            raise ConfigError(f"{path}: links[{i}]: must be an object with 'u' and 'v'")
        u, v = _node_key(item["u"]), _node_key(item["v"])
        where = f"{path}: link {u}-{v}"
        directed = item.get("directed", False)
        if not isinstance(directed, bool):
            raise ConfigError(f"{where}: directed must be true or false")
        attrs = _link_attrs({k: x for k, x in item.items() if k not in ("u", "v", "directed")}, where, strict=True)
        links.append((u, v, directed, attrs, where))
    G = _assemble(path, name, nodes, links, defaults)
    _keep_graph_attrs(G, doc.get("graph", {}))
    return G


def _load_graphml(path: str, link: LinkDefaults) -> nx.DiGraph:
    try:
        H = nx.read_graphml(path, node_type=str, force_multigraph=True)
    except (ET.ParseError, nx.NetworkXError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not valid GraphML: {exc}") from None
    directed = H.is_directed()
    nodes = []
    for fid, data in H.nodes(data=True):
        extra = {k: v for k, v in data.items() if k != "kind"}
        nodes.append((_node_key(fid), str(data.get("kind", "board")).strip().lower(), extra))
    links = []
    for u, v, data in H.edges(data=True):
        u, v = _node_key(u), _node_key(v)
        where = f"{path}: link {u}-{v}"
        # GraphML editors add their own edge attributes (colours, ids): ignore what is not ours.
        links.append((u, v, directed, _link_attrs(dict(data), where, strict=False), where))
    G = _assemble(path, str(H.graph.get("name", Path(path).stem)), nodes, links, link.attrs())
    _keep_graph_attrs(G, H.graph)
    return G


def _keep_graph_attrs(G: nx.DiGraph, attrs: dict) -> None:
    """Keep a saved builder shape (used by ring_order, which checks it against the graph)."""
    for key in ("shape", "rows", "cols", "k"):
        if key in attrs and isinstance(attrs[key], (int, str)) and not isinstance(attrs[key], bool):
            G.graph[key] = attrs[key]


def load(path, link: LinkDefaults = LinkDefaults()) -> nx.DiGraph:
    """Read a topology from a .json or .graphml file; ConfigError names the file and element."""
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    suffix = Path(path).suffix.lower()
    if suffix == ".json" or (suffix not in (".graphml", ".xml") and text.lstrip().startswith("{")):
        G = _load_json(path, text, link)
    elif suffix in (".graphml", ".xml") or text.lstrip().startswith("<"):
        G = _load_graphml(path, link)
    else:
        raise ConfigError(f"{path}: unknown topology file format (use .json or .graphml)")
    _check_boards_connected(G, path)
    return G


def _check_boards_connected(G: nx.DiGraph, path: str) -> None:
    """Every board must reach every other one (a file can cable anything; a builder cannot
    make this mistake). Otherwise the replay would run and leave ops INCOMPLETE."""
    boards = G.graph["boards"]
    if boards < 2:
        return
    scc = next(c for c in nx.strongly_connected_components(G) if 0 in c)
    out = [b for b in range(boards) if b not in scc]
    if out:
        b = out[0]
        src, dst = (b, 0) if nx.has_path(G, 0, b) else (0, b)
        raise ConfigError(f"{path}: board {src} cannot reach board {dst}; every board must reach every other "
                          f"({len(out)} of {boards} boards are cut off from board 0)")


def to_json(G: nx.DiGraph) -> dict:
    """The JSON document for G: a link entry per full-duplex pair with equal attributes,
    ``directed: true`` entries otherwise."""
    nodes = []
    for n, data in sorted(G.nodes(data=True)):
        extra = {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool))}
        nodes.append({"id": n, **extra})
    links = []
    for u, v in sorted(G.edges):
        a = {k: G.edges[u, v][k] for k in LINK_ATTRS}
        if G.has_edge(v, u) and {k: G.edges[v, u][k] for k in LINK_ATTRS} == a:
            if u < v:
                links.append({"u": u, "v": v, **a})
        else:
            links.append({"u": u, "v": v, "directed": True, **a})
    graph = {k: G.graph[k] for k in ("shape", "rows", "cols", "k") if k in G.graph}
    return {"name": G.graph.get("name", "topology"), "graph": graph, "nodes": nodes, "links": links}


def save(G: nx.DiGraph, path) -> None:
    """Write G as JSON (.json) or GraphML (.graphml/.xml), atomically.

    GraphML cannot store None: a missing queue limit is written as -1, which both formats
    read back as None.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        doc = to_json(G)
        # One node or link per line: diffable and still easy to edit by hand.
        lines = [f' "name": {json.dumps(doc["name"])},', f' "graph": {json.dumps(doc["graph"])},']
        for key in ("nodes", "links"):
            items = ",\n".join(f"  {json.dumps(x)}" for x in doc[key])
            lines.append(f' "{key}": [\n{items}\n ]' + ("," if key == "nodes" else ""))
        with atomic_file(path, "w") as fh:
            fh.write("{\n" + "\n".join(lines) + "\n}\n")
    elif suffix in (".graphml", ".xml"):
        H = nx.DiGraph()
        H.graph.update({k: G.graph[k] for k in ("name", "boards", "shape", "rows", "cols", "k") if k in G.graph})
        for n, data in G.nodes(data=True):
            H.add_node(n, **{k: v for k, v in data.items() if isinstance(v, (int, float, str, bool))})
        for u, v, data in G.edges(data=True):
            H.add_edge(u, v, **{k: -1 if data[k] is None else data[k] for k in LINK_ATTRS})
        with atomic_file(path, "wb") as fh:
            nx.write_graphml(H, fh)
    else:
        raise ConfigError(f"{path}: unknown topology file format (use .json or .graphml)")
