"""Topology builders, link attributes, the CLI spec parser and file loading."""

import json

import networkx as nx
import pytest

from emu.errors import ConfigError
from emu.topology import (
    LINK_ATTRS,
    LinkDefaults,
    build,
    check,
    default_for,
    edge_index,
    fat_tree,
    full_mesh,
    link_table,
    load,
    mesh2d,
    ring,
    save,
    set_link,
    star,
    torus2d,
)

LINK = LinkDefaults(rate_bps=10**9, latency_ps=500_000, mtu=1500, queue_bytes=65536, queue_frames=None)


def degrees(G, nodes):
    return sorted({G.out_degree(n) for n in nodes} | {G.in_degree(n) for n in nodes})


def is_full_duplex(G):
    return all(G.has_edge(v, u) for u, v in G.edges)


# ------------------------------------------------------------------ builders
def test_unidirectional_ring():
    G = ring(8, bidirectional=False, link=LINK)
    assert G.graph["name"] == "ring8" and G.graph["boards"] == 8
    assert sorted(G.edges) == sorted((i, (i + 1) % 8) for i in range(8))
    assert degrees(G, G.nodes) == [1]


def test_bidirectional_ring():
    G = ring(8, link=LINK)
    assert G.graph["name"] == "bring8"
    assert G.number_of_edges() == 16 and is_full_duplex(G)
    assert degrees(G, G.nodes) == [2]


def test_torus_4x4_every_board_has_degree_4():
    G = torus2d(4, 4, LINK)
    assert G.number_of_nodes() == 16 and G.number_of_edges() == 64
    assert degrees(G, G.nodes) == [4] and is_full_duplex(G)
    assert G.has_edge(3, 0) and G.has_edge(12, 0)  # the wrap-around links
    assert G.nodes[6]["row"] == 1 and G.nodes[6]["col"] == 2


def test_small_torus_does_not_double_links():
    # A dimension of size 2 wraps onto the same neighbour: one link, not two.
    G = torus2d(2, 3, LINK)
    assert degrees(G, G.nodes) == [3]
    assert G.number_of_edges() == 2 * (3 + 6)


def test_mesh_degrees():
    G = mesh2d(3, 4, LINK)
    assert G.number_of_edges() == 2 * (3 * 3 + 2 * 4)
    assert sorted(dict(G.out_degree()).values()).count(2) == 4  # corners
    assert max(dict(G.out_degree()).values()) == 4
    assert not G.has_edge(3, 0)


def test_star():
    G = star(5, LINK)
    assert G.number_of_nodes() == 6 and G.nodes[5]["kind"] == "switch"
    assert G.graph["boards"] == 5
    assert degrees(G, range(5)) == [1] and G.out_degree(5) == 5


def test_full_mesh():
    G = full_mesh(5, LINK)
    assert G.number_of_edges() == 20 and degrees(G, G.nodes) == [4]


def test_fat_tree_k4():
    G = fat_tree(4, LINK)
    kinds = nx.get_node_attributes(G, "kind")
    assert sum(k == "board" for k in kinds.values()) == 16
    assert sum(k == "switch" for k in kinds.values()) == 20
    layers = [G.nodes[n]["layer"] for n in range(16, 36)]
    assert (layers.count("edge"), layers.count("agg"), layers.count("core")) == (8, 8, 4)
    assert degrees(G, range(16)) == [1]
    assert degrees(G, range(16, 36)) == [4]  # every switch uses all k ports
    assert is_full_duplex(G) and nx.is_strongly_connected(G)
    # Hosts of one edge switch are numbered consecutively.
    assert {next(iter(G.successors(b))) for b in range(2)} == {16}


def test_builder_argument_errors():
    with pytest.raises(ConfigError, match="ring: n must be >= 2"):
        ring(1)
    with pytest.raises(ConfigError, match="k must be even"):
        fat_tree(3)
    with pytest.raises(ConfigError, match="fewer than 2 boards"):
        torus2d(1, 1)


# ----------------------------------------------------------------- link attrs
def test_link_defaults_applied_to_every_edge():
    G = torus2d(3, 3, LINK)
    for _, _, data in G.edges(data=True):
        assert data == LINK.attrs()
    check(G)


@pytest.mark.parametrize(
    "bad, msg",
    [({"rate_bps": 0}, "rate_bps must be >= 1"), ({"latency_ps": -1}, "latency_ps must be >= 0"),
     ({"mtu": 20}, "mtu must be >= 64"), ({"queue_bytes": 1.5}, "queue_bytes must be an integer"),
     ({"rate_bps": True}, "rate_bps must be an integer"), ({"queue_frames": 0}, "queue_frames must be >= 1")],
)
def test_link_defaults_validate(bad, msg):
    with pytest.raises(ConfigError, match=msg):
        LinkDefaults(**bad)


def test_set_link_overrides_one_link():
    G = ring(4, link=LINK)
    set_link(G, 1, 2, latency_ps=7, queue_frames=3)
    assert G.edges[1, 2]["latency_ps"] == 7 and G.edges[2, 1]["queue_frames"] == 3
    assert G.edges[0, 1]["latency_ps"] == LINK.latency_ps
    set_link(G, 2, 3, both=False, mtu=9000)
    assert G.edges[2, 3]["mtu"] == 9000 and G.edges[3, 2]["mtu"] == 1500


def test_set_link_errors():
    G = ring(4, link=LINK)
    with pytest.raises(ConfigError, match="link 0-2: no such link"):
        set_link(G, 0, 2, mtu=1500)
    with pytest.raises(ConfigError, match="latency_ps must be >= 0"):
        set_link(G, 0, 1, latency_ps=-5)
    with pytest.raises(ConfigError, match="unknown link attribute 'latency'"):
        set_link(G, 0, 1, latency=5)


def test_edge_index_and_link_table_are_sorted_by_u_v():
    G = star(3, LINK)
    idx = edge_index(G)
    assert list(idx) == sorted(G.edges) and list(idx.values()) == list(range(6))
    t = link_table(G)
    assert len(t) == 6 and list(zip(t.u, t.v)) == sorted(G.edges)
    assert set(t.queue_frames) == {-1} and set(t.queue_bytes) == {65536}


# --------------------------------------------------------------- spec parser
@pytest.mark.parametrize(
    "spec, n, name",
    [("ring", 8, "ring8"), ("bring:6", None, "bring6"), ("torus:4x4", 16, "torus4x4"),
     ("torus", 12, "torus3x4"), ("mesh:2x8", None, "mesh2x8"), ("star", 5, "star5"),
     ("full:4", None, "full4"), ("fattree:4", None, "fattree4"), ("fattree", 16, "fattree4"),
     ("auto", 16, "torus4x4")],
)
def test_build_specs(spec, n, name):
    G = build(spec, n, LINK)
    assert G.graph["name"] == name
    assert next(iter(G.edges(data=True)))[2] == LINK.attrs()


@pytest.mark.parametrize(
    "spec, n, msg",
    [("hypercube", 8, "unknown"), ("torus:4by4", None, "ROWSxCOLS"), ("torus:4x4", 8, "expected 8"),
     ("ring", None, "needs a board count"), ("fattree", 10, "not k\\^3/4"), ("ring:x", None, "board count"),
     ("nosuch/file.json", None, "no such file")],
)
def test_build_spec_errors(spec, n, msg):
    with pytest.raises(ConfigError, match=msg):
        build(spec, n)


def test_build_loads_files(tmp_path):
    path = tmp_path / "t.json"
    save(ring(5, link=LINK), path)
    assert build(str(path), 5).graph["boards"] == 5
    with pytest.raises(ConfigError, match="has 5 boards, expected 6"):
        build(str(path), 6)


@pytest.mark.parametrize(
    "n, ports, name",
    [(16, 4, "torus4x4"), (5, 4, "full5"), (2, 1, "full2"), (12, 4, "torus3x4"), (13, 4, "bring13"),
     (16, 3, "torus2x8"), (16, 2, "bring16"), (16, 1, "star16"), (64, 4, "torus8x8")],
)
def test_default_for(n, ports, name):
    G = default_for(n, ports, LINK)
    assert G.graph["name"] == name
    # What a lab cables must fit the boards' ports.
    assert max(G.out_degree(b) for b in range(n)) <= ports


# --------------------------------------------------------------------- files
@pytest.mark.parametrize("suffix", [".json", ".graphml"])
@pytest.mark.parametrize("builder", [lambda: fat_tree(4, LINK), lambda: ring(5, False, LINK), lambda: mesh2d(2, 3, LINK)])
def test_save_load_round_trip(tmp_path, suffix, builder):
    G = builder()
    u, v = next(iter(G.edges))
    set_link(G, u, v, both=False, latency_ps=123, rate_bps=10**8, queue_bytes=None, queue_frames=9)
    path = tmp_path / f"topo{suffix}"
    save(G, path)
    H = load(path, LINK)
    assert H.graph["name"] == G.graph["name"] and H.graph["boards"] == G.graph["boards"]
    assert sorted(H.edges(data=True)) == sorted(G.edges(data=True))
    assert dict(H.nodes(data=True)) == dict(G.nodes(data=True))


def write(tmp_path, doc, name="topology.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_json_format_names_units_and_defaults(tmp_path):
    path = write(tmp_path, {
        "name": "lab",
        "defaults": {"rate_gbps": 1, "latency_ns": 800, "queue_bytes": 262144},
        "nodes": ["a", "b", {"id": "c", "kind": "board"}, {"id": "sw", "kind": "switch"}],
        "links": [
            {"u": "a", "v": "sw"}, {"u": "b", "v": "sw", "latency_us": 0.1},
            {"u": "c", "v": "sw", "rate_mbps": 100, "mtu": 9000},
            {"u": "a", "v": "b", "directed": True, "queue_bytes": None},
        ],
    })
    G = load(path, LINK)
    assert G.graph["name"] == "lab" and G.graph["boards"] == 3
    assert [G.nodes[i].get("label") for i in range(4)] == ["a", "b", "c", "sw"]
    assert G.edges[0, 3] == {**LINK.attrs(), "latency_ps": 800_000, "queue_bytes": 262144}
    assert G.edges[1, 3]["latency_ps"] == 100_000  # 0.1 us exactly, no float rounding
    assert G.edges[2, 3]["rate_bps"] == 10**8 and G.edges[3, 2]["mtu"] == 9000
    assert G.has_edge(0, 1) and not G.has_edge(1, 0) and G.edges[0, 1]["queue_bytes"] is None


def test_json_numeric_ids_sort_boards_first(tmp_path):
    path = write(tmp_path, {"nodes": [{"id": 0, "kind": "switch"}, 2, 1],
                            "links": [{"u": 1, "v": 0}, {"u": 2, "v": 0}]})
    G = load(path)
    # Boards 1, 2 become 0, 1; the switch goes after them and keeps its file id as label.
    assert [G.nodes[i]["kind"] for i in range(3)] == ["board", "board", "switch"]
    assert G.nodes[2]["label"] == "0" and G.has_edge(0, 2) and G.has_edge(2, 1)


@pytest.mark.parametrize(
    "doc, msg",
    [("{not json", r"topology.json: not valid JSON: line 1"),
     ([1, 2], "top level must be an object"),
     ({"nodes": [0, 1]}, "'links' must be a list"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 1, "latency_ns": -3}]}, r"topology.json: link 0-1: latency_ns must be >= 0"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 1, "rate_gbps": 0}]}, "link 0-1: rate_gbps must be > 0"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 1, "latency_ps": 0.5}]}, "not a whole number of ps"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 1, "queue_bytes": 0}]}, "link 0-1: queue_bytes must be >= 1"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 1, "mtu": "big"}]}, "link 0-1: mtu must be a number"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 1, "latency": 5}]}, "link 0-1: unknown attribute 'latency'"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 1, "latency_ns": 1, "latency_ps": 1}]}, "given twice"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 7}]}, "link 0-7: node 7 is not defined"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 0}]}, "link 0-0: a node cannot link to itself"),
     ({"nodes": [0, 1], "links": [{"u": 0, "v": 1}, {"u": 1, "v": 0}]}, "direction 1->0 is defined twice"),
     ({"nodes": [0, 0], "links": []}, "node 0: defined twice"),
     ({"nodes": [{"id": 0, "kind": "router"}], "links": []}, "node 0: kind must be"),
     ({"nodes": [{"id": 0, "kind": "switch"}], "links": []}, "no boards"),
     ({"nodes": [0, 1], "links": [{"u": 0}]}, r"links\[0\]: must be an object with 'u' and 'v'"),
     ({"nodes": [0], "links": [], "edges": []}, "unknown top-level key 'edges'"),
     ({"nodes": [0, 1], "links": [], "defaults": {"mtu": 10}}, "defaults: mtu must be >= 64")],
)
def test_malformed_json_names_file_and_element(tmp_path, doc, msg):
    with pytest.raises(ConfigError, match=msg):
        load(write(tmp_path, doc))


def test_graphml_undirected_edges_are_full_duplex_and_foreign_attrs_ignored(tmp_path):
    H = nx.Graph(name="g")
    H.add_node("x", kind="board")
    H.add_node("y", kind="board")
    H.add_node("s", kind="switch")
    H.add_edge("x", "s", latency_ns=250, color="red")
    H.add_edge("y", "s")
    path = tmp_path / "g.graphml"
    nx.write_graphml(H, path)
    G = load(path, LINK)
    assert G.graph["boards"] == 2 and G.number_of_edges() == 4
    assert G.edges[0, 2]["latency_ps"] == G.edges[2, 0]["latency_ps"] == 250_000
    assert "color" not in G.edges[0, 2] and G.edges[1, 2] == LINK.attrs()


@pytest.mark.parametrize(
    "text, msg",
    [("<graphml><graph", "not valid GraphML"),
     ('<graphml xmlns="http://graphml.graphdrawing.org/xmlns"><key id="d0" for="edge" attr.name="mtu" attr.type="int"/>'
      '<graph edgedefault="undirected"><node id="0"/><node id="1"/><edge source="0" target="1"><data key="d0">12</data></edge>'
      "</graph></graphml>", r"g.graphml: link 0-1: mtu must be >= 64"),
     ('<graphml xmlns="http://graphml.graphdrawing.org/xmlns"><graph edgedefault="undirected"><node id="0"/><node id="1"/>'
      '<edge source="0" target="1"/><edge source="1" target="0"/></graph></graphml>', "defined twice")],
)
def test_malformed_graphml(tmp_path, text, msg):
    with pytest.raises(ConfigError, match=msg):
        load(write(tmp_path, text, "g.graphml"))


def test_check_rejects_broken_graphs():
    G = ring(3, link=LINK)
    G.nodes[0]["kind"] = "switch"
    with pytest.raises(ConfigError, match="node 0: kind must be 'board'"):
        check(G)
    G = ring(3, link=LINK)
    del G.edges[0, 1]["mtu"]
    with pytest.raises(ConfigError, match="link 0-1: attribute mtu is missing"):
        check(G)
    assert set(LINK_ATTRS) == set(LINK.attrs())


def test_docs_json_example_loads(tmp_path):
    # The example in docs/topology.md must stay a valid file.
    import pathlib
    import re

    doc = (pathlib.Path(__file__).parents[1] / "docs" / "topology.md").read_text()
    example = re.search(r"```json\n(.*?)```", doc, re.S).group(1)
    G = load(write(tmp_path, example), LINK)
    assert G.graph["name"] == "lab-rack" and G.graph["boards"] == 3
    assert G.edges[1, 3]["latency_ps"] == 1_500_000 and G.edges[0, 1]["queue_frames"] == 32
