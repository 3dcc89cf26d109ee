"""Option checks shared by the CLI and the Python API (emu.validate), and the bounds they keep."""

import re

import pytest

from emu.errors import ConfigError
from emu.net.timeline import parse


@pytest.mark.parametrize("clause", ["link 0-1 down at 1ms up at 1ms", "node 2 down at 1ms up at 1000us",
                                    "link 0-1 degrade 0.5 at 1s until 1s", "link * loss 0.1 at 2ms until 2ms"])
def test_a_change_that_lasts_no_time_is_refused(clause):
    with pytest.raises(ConfigError, match="ends when it starts"):
        parse(clause)


def test_a_change_that_lasts_a_picosecond_is_kept():
    down, up = parse("link 0-1 down at 1000000ps up at 1000001ps")
    assert (down.kind, down.time_ps, up.kind, up.time_ps) == ("down", 10**6, "up", 10**6 + 1)


def test_one_snap_length_bound_for_every_capture():
    from emu.codec import FRAME_HEADER_LEN
    from emu.codec.pcap import HEADERS_ONLY
    from emu.replay.session import DEFAULT_SNAPLEN
    from emu.validate import SNAPLEN_MAX, SNAPLEN_MIN, snaplen

    assert SNAPLEN_MIN == FRAME_HEADER_LEN == HEADERS_ONLY == DEFAULT_SNAPLEN
    for bad in (SNAPLEN_MIN - 1, SNAPLEN_MAX + 1, 10, 262144):
        with pytest.raises(ConfigError, match=f"--snaplen {bad}: must be in 62..65535"):
            snaplen(bad, "--snaplen")
    assert snaplen(SNAPLEN_MIN, "x") == 62 and snaplen(SNAPLEN_MAX, "x") == 65535


@pytest.mark.parametrize("head_dim, heads, needle", [(0, 8, "--head-dim 0: must be at least 1"),
                                                     (100_000_000, 8, "--head-dim 100000000: must be at most 16384"),
                                                     (16384, 100, "values per merged state")])
def test_hw_check_bounds_the_merged_state_before_building_it(head_dim, heads, needle):
    from emu.hw import check as C
    from emu.hw.board import Board

    with pytest.raises(ConfigError, match=needle):
        C.build("reduce-merge", Board(node=1, heads=heads), head_dim=head_dim)


@pytest.mark.parametrize("attrs, needle", [
    ({"latency_us": 1e30}, "link 0-1: latency_us must be <= 1000000, got 1e+30"),
    ({"latency_ns": "1e999999999"}, "latency_ns must be <= 1000000000"),
    ({"rate_gbps": 1e9}, "rate_gbps must be <= 1000000"),
    ({"rate_mbps": "-1e999999999"}, "rate_mbps must be > 0"),
    ({"mtu": 70000}, "mtu must be <= 65583"),
    ({"queue_bytes": 2**41}, "queue_bytes must be <= 1099511627776"),
])
def test_topology_numbers_are_finite_and_in_range(tmp_path, attrs, needle):
    import json

    from emu.topology import load

    f = tmp_path / "topo.json"
    f.write_text(json.dumps({"nodes": [0, 1], "links": [{"u": 0, "v": 1, **attrs}]}))
    with pytest.raises(ConfigError, match=f"topo.json: .*{re.escape(needle)}"):
        load(f)


def test_topology_ranges_take_what_a_profile_can_give():
    from emu.topology import LinkDefaults
    from emu.topology.graph import LINK_RANGES
    from emu.workload.profiles import MAX_MTU, RANGES

    hw = RANGES["hw"]
    assert LINK_RANGES["rate_bps"][1] >= hw["link_rate"][1] and LINK_RANGES["latency_ps"][1] >= hw["link_latency_ps"][1]
    assert LINK_RANGES["mtu"][1] == MAX_MTU and LINK_RANGES["queue_bytes"][1] >= hw["comm_buffer"][1]
    LinkDefaults(rate_bps=hw["link_rate"][1], latency_ps=hw["link_latency_ps"][1], mtu=MAX_MTU)


def test_meta_nodes_counts_the_boards_the_ops_use(tmp_path):
    import json

    import emu
    from emu.errors import TraceError
    from emu.workload.trace import dumps

    doc = json.loads(dumps(emu.trace("ring", nodes=4, seq=512, chunk=128)))
    doc["meta"]["nodes"] = 5
    (tmp_path / "t.json").write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"t.json: meta.nodes: 5 boards, but the ops use 4: board 4 takes part in no op"):
        emu.load_trace(tmp_path / "t.json")
    # a PD decode board without decode tokens runs nothing, but receives the KV: it takes part
    pd = emu.trace("pd", nodes=4, seq=512, chunk=128)
    assert set(pd.ops["node"][pd.ops["node"] >= 0].tolist()) != {0, 1, 2, 3}
    emu.save_trace(pd, tmp_path / "pd.json")


def test_dashboard_address_that_cannot_be_served_is_a_usage_error(tmp_path, monkeypatch, capsys):
    import socket

    from emu.cli import main

    monkeypatch.chdir(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["dashboard", "--port", str(port)]) == 2
    assert capsys.readouterr().err == f"emu dashboard: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert main(["dashboard", "--host", "no.such.host.invalid", "--port", "0"]) == 2
    assert capsys.readouterr().err.startswith("emu dashboard: error: --host no.such.host.invalid: cannot resolve it")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("clause", ["node 99999999999999999999 down at 1s", "link 99999999999999999999-1 down at 1s",
                                    "link 0>65536 down at 1s", "node " + "9" * 5000 + " down at 1s"])
def test_a_clause_naming_a_node_no_topology_has_is_refused_by_the_parser(clause):
    # the what-if form parses clauses before it starts a run, with no topology at hand
    with pytest.raises(ConfigError, match=r"no node [\d.]+; node ids are 0..65535"):
        parse(clause)
    assert parse("node 65535 down at 1s")[0].items == (65535,)


@pytest.mark.parametrize("call", ["load_trace", "replay-topology", "replay-set", "trace-model"])
def test_text_that_would_break_the_one_line_message_is_refused(call):
    import emu

    bad = "no such\nthing\r"
    run = {"load_trace": lambda: emu.load_trace(bad), "replay-topology": lambda: emu.replay("ring_16k", topology=bad),
           "replay-set": lambda: emu.replay("ring_16k", set={"hw.link_rate": bad}),
           "trace-model": lambda: emu.trace("ring", model=bad)}[call]
    with pytest.raises(ConfigError) as e:
        run()
    assert "control character" in str(e.value) and len(str(e.value).splitlines()) == 1


def test_numbers_are_finite_and_switches_are_bools():
    """docs/api.md, Argument types: a number is finite (NaN and infinities refused), a switch
    is True or False (0, 1 and "true" refused), each in one line naming the argument."""
    import math

    import numpy as np

    from emu.validate import boolean, number

    for bad in (math.nan, math.inf, -math.inf, np.float64("nan")):
        with pytest.raises(ConfigError, match=r"^loss (nan|inf|-inf): must be a finite number$"):
            number(bad, "loss", 0, 1)
    assert number(1, "loss", 0, 1) == 1.0 and number(0.25, "loss", 0, 1) == 0.25
    for bad, kind in ((0, "int"), (1, "int"), ("true", "str"), (None, "NoneType"), (np.int64(1), "int64")):
        with pytest.raises(ConfigError, match=rf"^trains {re.escape(repr(bad))}: expected True or False, got {kind}$"):
            boolean(bad, "trains")
    assert boolean(True, "trains") is True and boolean(np.bool_(False), "trains") is False
