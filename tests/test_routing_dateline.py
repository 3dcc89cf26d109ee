"""Dateline routing and the buffer dependency check (docs/engine.md, "Deadlock"): dimension
order with a dateline has no cycle of buffer dependencies on a torus, mesh or ring, shortest
paths do on rings of five or more; a replay that deadlocks under pause on shortest paths runs
to the end on dateline routes; the summary names a cycle where there is one."""

import copy
import itertools
import json

import networkx as nx
import pytest

import emu
from emu.cli import main
from emu.errors import ConfigError
from emu.replay.run import Options, Replay
from emu.replay.summary import summarize
from emu.topology import build
from emu.topology.builders import DEFAULT_LINK
from emu.topology.graph import add_link, new_graph
from emu.topology.dependencies import cycle
from emu.topology.routing import Routes
from emu.workload.builder import OpBuilder
from emu.workload.enums import MsgOp, Stage
from emu.workload.trace import from_columns

SHAPES = ["bring:4", "bring:5", "bring:8", "torus:4x4", "torus:3x5", "torus:8x8", "torus:2x6", "mesh:3x4"]


def _coords(G, b):
    cols = G.graph.get("cols", G.graph["boards"])
    return divmod(b, cols)


def _acyclic_by_hand(routes, n):
    """The dependency graph from every route's consecutive links, built here from the paths."""
    deps = nx.DiGraph()
    for s, t in itertools.permutations(range(n), 2):
        links = routes.path_links(s, t)
        deps.add_edges_from(zip(links, links[1:]))
    return nx.is_directed_acyclic_graph(deps)


@pytest.mark.parametrize("spec", SHAPES)
def test_dateline_routes_move_along_the_row_first_and_never_pass_position_0(spec):
    G = build(spec)
    r = Routes(G, routing="dateline")
    n = G.graph["boards"]
    for s, t in itertools.permutations(range(n), 2):
        path = [_coords(G, v) for v in r.path(s, t)]
        rows = [p[0] for p in path]
        turned = next(i for i, p in enumerate(path) if p[1] == path[-1][1])  # first node in t's column
        assert all(p[0] == path[0][0] for p in path[: turned + 1]), (s, t, path)  # row ring first
        assert all(p[1] == path[-1][1] for p in path[turned:]), (s, t, path)       # then the column's
        middle_cols = [p[1] for p in path[1:turned]]
        middle_rows = rows[turned + 1: -1]
        assert 0 not in middle_cols and 0 not in middle_rows, (s, t, path)
        assert r.hops(s, t) == len(path) - 1


@pytest.mark.parametrize("spec", SHAPES)
def test_dateline_routes_have_no_dependency_cycle(spec):
    G = build(spec)
    r = Routes(G, routing="dateline")
    assert _acyclic_by_hand(r, G.graph["boards"])
    assert cycle(r) is None


@pytest.mark.parametrize("spec", ["bring:5", "bring:8", "torus:8x8", "torus:3x5"])
def test_shortest_routes_on_rings_of_five_or_more_have_a_cycle_and_it_is_named(spec):
    G = build(spec)
    r = Routes(G)
    assert not _acyclic_by_hand(r, G.graph["boards"])
    found = cycle(r)
    assert found and all(G.has_edge(u, v) for u, v in found)
    assert all(a[1] == b[0] for a, b in zip(found, found[1:] + found[:1]))  # link after link, closed


def test_on_a_ring_of_four_dateline_routes_stay_shortest():
    for spec in ("bring:4", "torus:4x4"):
        G = build(spec)
        assert (Routes(G, routing="dateline").hop_count == Routes(G).hop_count).all()
    r = Routes(build("bring:4"), routing="dateline")
    assert r.path(0, 2) == [0, 1, 2] and r.path(2, 0) == [2, 3, 0]  # ties: increasing position
    assert r.path(3, 1) == [3, 2, 1] and r.path(1, 3) == [1, 2, 3]  # not through 0
    assert Routes(build("bring:5"), routing="dateline").path(4, 1) == [4, 3, 2, 1]  # the longer way


def test_dependencies_past_a_routes_first_hop_count():
    """Five switches in a one-way ring, a board on each: every switch-to-switch dependency is a
    route's second hop or later, and they close the ring."""
    G = new_graph("switch-ring", 5, shape="file")
    for i in range(5):
        G.add_node(5 + i, kind="switch")
        add_link(G, i, 5 + i, DEFAULT_LINK)
    for i in range(5):
        add_link(G, 5 + i, 5 + (i + 1) % 5, DEFAULT_LINK, both=False)
    found = cycle(Routes(G))
    assert found and {u for u, _v in found} == set(range(5, 10))


def test_a_multicast_tree_adds_its_own_dependencies():
    r = Routes(build("bring:4"))
    assert cycle(r) is None
    # A tree that forwards round the ring through every board closes a cycle with the routes.
    assert cycle(r, [{0: [1], 1: [2], 2: [3], 3: []}, {2: [3], 3: [0], 0: [1], 1: []}])


def test_after_a_failure_dateline_routes_fall_back_to_shortest_paths():
    G = build("torus:4x4")
    r = Routes(G, routing="dateline").without(links=[(0, 1)], both=True)
    s = Routes(G).without(links=[(0, 1)], both=True)
    assert r.routing == "dateline" and (r.next_hop == s.next_hop).all()


def test_dateline_routing_is_refused_in_one_line_where_it_has_no_rings():
    for spec in ("fattree:4", "star:8", "ring:5"):
        with pytest.raises(ConfigError, match=r"routing dateline: \S+ is not a torus, mesh or bidirectional ring"):
            Routes(build(spec), routing="dateline")
    with pytest.raises(ConfigError, match="routing: must be one of shortest, dateline"):
        Routes(build("bring:4"), routing="xy")


# ------------------------------------------------------------------ a replay that deadlocks
def _three_hops_round_the_ring(n=7, nbytes=4_000_000):
    """Every board of bring:7 sends 4 MB three hops clockwise: each port carries its board's
    own frames and two boards' transit frames, more than round robin gives transit, so
    transit queues fill at every port and pause closes the ring."""
    base = emu.trace("ring", nodes=n, seq=1024, chunk=512)
    b = OpBuilder()
    for v in range(n):
        b.send(Stage.prefill, MsgOp.kv_transfer, v, [(v + 3) % n], nbytes)
    return from_columns(copy.deepcopy(base.meta), copy.deepcopy(base.schedule), b.columns())


def test_a_replay_deadlocked_on_shortest_routes_runs_to_the_end_on_dateline_routes():
    trace = _three_hops_round_the_ring()
    opt = dict(topology="bring:7", overrides=("hw.port_buffer=32KiB",))
    with pytest.raises(ConfigError) as e:
        Replay(trace, Options(**opt)).run()
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("pause deadlock at ") and not msg.startswith("pause deadlock at 0.000 us")
    assert "ports 6->0 -> 0->1 -> 1->2 -> 2->3 -> 3->4 -> 4->5 -> 5->6 -> 6->0 are paused in a cycle" in msg
    assert "--routing dateline" in msg
    rp = Replay(trace, Options(routing="dateline", **opt))
    s = summarize(rp.run())
    assert s["incomplete_ops"] == 0 and s["dropped_frames"] == 0
    assert s["routing"] == "dateline" and s["dependency_cycle"] == ""
    assert s["paused_s"] > 0  # back-pressure still acts; it just cannot close a cycle


def test_the_cli_takes_routing_and_the_summary_names_a_cycle(tmp_path, capsys):
    path = tmp_path / "ring5.json"
    assert main(["trace", "ring", "--nodes", "5", "--seq", "2048", "--chunk", "512", "-o", str(path)]) == 0
    capsys.readouterr()
    assert main(["replay", str(path), "--no-results", "--topology", "bring:5", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["routing"] == "shortest" and s["dependency_cycle"].startswith("ports ")
    assert main(["replay", str(path), "--no-results", "--topology", "bring:5", "--routing", "dateline"]) == 0
    out = capsys.readouterr().out
    assert "routing   dateline; buffer dependencies: no cycle, back-pressure cannot deadlock" in out
    assert main(["replay", str(path), "--no-results", "--routing", "xy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--routing 'xy': one of shortest, dateline" in err[0]
