"""The compiled replay loop (emu.engine.loop) gives exactly what the Python path gives.

Every scheme's generated trace, and randomized scenarios (seeds, topologies, chunk sizes,
packetizer sizes that make compute engines stall, link rates, port arbiters), lossless, with
frame loss and reliable delivery, and with timelines of failures, repairs, re-routes, rate
and loss changes, are replayed with engine="python" and engine="compiled"; the summaries
(all but wall time and the engine name), every op's start and end, the directory history,
the per-link and per-node counters, the link time series, every delivery time and the
incomplete sends must be identical.
"""

import numpy as np
import pandas as pd
import pytest

import emu
from emu.cli import main
from emu.errors import ConfigError
from emu.engine import layout as L
from emu.replay.summary import summarize
from emu.replay.run import Options, Replay

SCHEMES = ("mars", "ring", "zigzag", "pd", "ulysses", "usp", "full")


def run(trace, engine, **kw):
    return Replay(trace, Options(engine=engine, **kw)).run()


def assert_same(a, b):
    assert a.engine == "python" and b.engine == "compiled"
    sa, sb = summarize(a), summarize(b)
    for s in (sa, sb):
        s.pop("wall_s")
        s.pop("engine")
    assert sa == sb
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.end, b.end)
    pd.testing.assert_frame_equal(a.cluster.directory.history(), b.cluster.directory.history())
    pd.testing.assert_frame_equal(a.net.counters(), b.net.counters())
    pd.testing.assert_frame_equal(a.net.node_counters(), b.net.node_counters())
    end = max(a.sim.now, 1)
    pd.testing.assert_frame_equal(a.linkstats.frame(a.net.links, a.net.LK[:, 2], end),
                                  b.linkstats.frame(b.net.links, b.net.LK[:, 2], end))
    np.testing.assert_array_equal(a.deliveries(), b.deliveries())
    assert a.cluster.directory.errors == b.cluster.directory.errors
    assert a.cluster.incomplete() == b.cluster.incomplete()


@pytest.fixture(scope="module")
def traces():
    from emu.workload.generate import Params, generate

    out = {s: emu.trace(s, seq=2048, nodes=8, chunk=256, decode_tokens=2) for s in SCHEMES if s != "ulysses"}
    # Ulysses on the NIC's all-to-all engine, 12 heads over 8 boards (USP covers the concurrent pairs)
    out["ulysses"] = generate(Params(scheme="ulysses", seq=2048, nodes=8, chunk=256, decode_tokens=2,
                                     all_to_all="pairwise", uneven_heads=True))
    return out


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_replays_identically(traces, scheme):
    a, b = run(traces[scheme], "python"), run(traces[scheme], "compiled")
    assert b.incomplete() == [] and len(b.deliveries()) == len(traces[scheme].dst_idx)
    assert_same(a, b)


CASES = [
    # (scheme, nodes, chunk, topology, overrides): small packetizers stall compute engines,
    # slow links queue frames, every port arbiter, MTUs that split messages differently
    ("mars", 4, 128, "ring", ("hw.comm_buffer=4KiB",)),
    ("ring", 6, 128, "full", ("hw.port_arbiter=transit-first",)),
    ("zigzag", 4, 256, "star", ("hw.port_arbiter=local-first", "hw.link_rate=1Gbps")),
    ("pd", 8, 128, "torus:2x4", ("hw.comm_buffer=2KiB", "hw.mtu=600")),
    ("ulysses", 4, 128, "mesh:2x2", ("hw.nic_rate=2Gbps",)),
    ("usp", 16, 256, "fattree", ("hw.comm_buffer=8KiB", "hw.port_arbiter=transit-first")),
    ("full", 4, 128, "ring", ("hw.mtu=1000",)),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_randomized_scenarios_replay_identically(seed):
    rng = np.random.default_rng(seed)
    for i in rng.permutation(len(CASES))[:3]:
        scheme, nodes, chunk, topo, ov = CASES[i]
        seq = int(rng.choice([512, 1024]))
        trace = emu.trace(scheme, seq=seq, nodes=nodes, chunk=chunk, decode_tokens=int(rng.integers(0, 3)))
        kw = {"topology": topo, "overrides": ov, "seed": int(rng.integers(0, 1000))}
        assert_same(run(trace, "python", **kw), run(trace, "compiled", **kw))


def test_auto_picks_compiled_for_every_timing_run(traces):
    t = traces["ring"]
    assert Replay(t, Options()).engine == "compiled"
    assert Replay(t, Options(loss=0.01)).engine == "compiled"
    assert Replay(t, Options(reliable=True)).engine == "compiled"
    assert Replay(t, Options(scenario=("link 0-1 down at 1ms",))).engine == "compiled"
    assert Replay(t, Options(functional=True)).engine == "compiled"  # emu.replay.functional_feed
    with pytest.raises(ConfigError, match="engine 'fast'"):
        Replay(t, Options(engine="fast"))


def test_cli_engine_option_and_summary_field(tmp_path, capsys):
    path = tmp_path / "ring.json"
    assert main(["trace", "ring", "--seq", "1024", "--nodes", "4", "--chunk", "256", "-o", str(path)]) == 0
    capsys.readouterr()
    import json

    out = {}
    for engine in ("python", "compiled"):
        assert main(["replay", str(path), "--no-results", "--json", "--engine", engine]) == 0
        out[engine] = json.loads(capsys.readouterr().out)
        assert out[engine].pop("engine") == engine
        out[engine].pop("wall_s")
    assert out["python"] == out["compiled"]
    assert main(["replay", str(path), "--no-results", "--json", "--engine", "compiled", "--functional"]) == 0
    assert json.loads(capsys.readouterr().out)["functional"]["payload_mismatches"] == 0
    cap = tmp_path / "x.pcap"  # a capture runs on the compiled loop (emu.replay.wire_meta)
    assert main(["replay", str(path), "--no-results", "--engine", "compiled", "--capture", str(cap)]) == 0
    assert cap.stat().st_size > 24


@pytest.mark.parametrize("scheme", ["mars", "ulysses"])
def test_full_packetizers_stall_compute_identically(traces, scheme):
    """A packetizer of 2 entries and 64 KiB on slow links: sends wait for room, compute engines stall."""
    from dataclasses import replace

    slow = ("hw.link_rate=20Mbps",)

    def small(engine):
        rp = Replay(traces[scheme], Options(engine=engine, overrides=slow))
        rp.cluster.config = replace(rp.cluster.config, fifo_entries=2, fifo_bytes=64 << 10)
        return rp.run()

    a, b = small("python"), small("compiled")
    assert_same(a, b)
    roomy = run(traces[scheme], "compiled", overrides=slow)
    assert summarize(b)["ttft_s"] > summarize(roomy)["ttft_s"]  # the stalls cost time


def with_unheld_blocks(trace):
    """``trace`` with three drains and three invalidates naming blocks nobody holds."""
    import copy

    from emu.workload.enums import Kind

    t = copy.copy(trace)
    t.ops = dict(t.ops)
    kv = t.ops["kv_id"].copy()
    kind = t.ops["kind"]
    for k in (Kind.drain, Kind.invalidate):
        ops = np.flatnonzero(kind == k)[:3]
        kv[ops] = kv.max() + 1 + np.arange(len(ops))  # blocks nobody holds
    t.ops["kv_id"] = kv
    return t


def test_directory_errors_are_the_same(traces):
    """Drains and invalidates naming blocks their holders never got: both engines report the
    same errors, in the same order, and leave the same replicas behind."""
    t = with_unheld_blocks(traces["mars"])
    a, b = run(t, "python"), run(t, "compiled")
    assert len(a.cluster.directory.errors) >= 6
    assert_same(a, b)
    assert not summarize(b)["final_layout_owner_only"]


@pytest.mark.parametrize("scheme", ["mars", "pd", "ulysses"])
def test_tables_the_loop_replaces_when_full_grow_without_changing_results(traces, scheme, monkeypatch):
    """The loop, compiled without reference counting, replaces a full table by a bigger one
    through the few functions that allocate, and reads it from the State again afterwards.
    Started at one row, the event heap, the work stack, the history and the error list are
    each replaced several times during the run; the results stay the Python path's."""
    from emu.engine import tables as engine_tables
    from emu.engine.state import State

    grown = ("SIM", "WORK", "HIST", "HN", "ERR")
    states = []

    def one_row_state(**tables):
        for name in grown:
            tables[name] = np.zeros((1, tables[name].shape[1]), tables[name].dtype)
        states.append(State(**tables))
        return states[-1]

    t = with_unheld_blocks(traces[scheme]) if scheme == "mars" else traces[scheme]
    a = run(t, "python")
    monkeypatch.setattr(engine_tables, "State", one_row_state)
    b = run(t, "compiled")
    assert_same(a, b)
    (st,) = states
    hist = len(b.cluster.directory.history())
    used = {"SIM": 2, "WORK": 2, "HIST": hist, "HN": hist, "ERR": len(b.cluster.directory.errors)}
    for name in grown:
        if used[name] > 1:
            assert st.table(name).shape[0] >= used[name] > 1


def test_the_network_and_the_loop_hand_the_kernel_states_of_one_type(traces):
    """The frame kernel's entry points take one State: a Network's own (the Python path,
    benchmarks, the exactness references) and the compiled loop's must be one numba type,
    or every entry point is compiled twice (a placeholder of another dtype or rank would do it)."""
    import numba

    from emu.net import kernel

    a, b = run(traces["ring"], "python"), run(traces["ring"], "compiled")
    assert a.net.state is not b.net.state  # b's Network adopted the loop's State
    assert numba.typeof(a.net.state) == numba.typeof(b.net.state)
    assert len(kernel.advance.signatures) == 1


def test_a_network_and_a_replay_let_go_of_their_tables(traces):
    """Python calls the kernel and the loop (compiled without reference counting) with a
    State: each call must give back the reference numba's unboxing takes, or the State and
    every table in it outlive the Network or the replay (a sweep worker's memory would grow
    by a replay's tables per run)."""
    import gc
    import weakref

    for engine in ("python", "compiled"):
        rp = run(traces["ring"], engine)
        tables = [weakref.ref(rp.net.FP), weakref.ref(rp.net.LK)]
        assert rp.net.state._meminfo.refcount == 1
        del rp
        gc.collect()
        assert all(t() is None for t in tables), engine


def test_a_capture_attached_to_a_replay_runs_on_the_compiled_loop(traces, tmp_path):
    """A capture is a log sink like any other: the compiled loop writes it (the Meta of each
    frame from emu.replay.wire_meta; tests/test_capture_compiled.py holds it byte-equal)."""
    from emu.replay.capture import Capture

    rp = Replay(traces["ring"], Options())
    cap = Capture(tmp_path / "c.pcap")
    cap.attach(rp)
    rp.run()
    cap.close()
    assert rp.engine == "compiled" and cap.frames > 0 and (tmp_path / "c.pcap").stat().st_size > 0


# ---- reliable delivery (emu.engine.reliable) --------------------------------------------

def _exercised(rp):
    """The run went through every part of reliable delivery: probes, nacks, resends."""
    c = rp.cluster
    return (c.retransmitted_frames > 0 and c.control_frames_by_op["probe"] > 0
            and c.control_frames_by_op["nack"] > 0 and rp.net.duplicates >= 0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_with_frame_loss_replays_identically(traces, scheme):
    """Loss on every link: acks, probes, nacks, resends, RTO back-off, all as the Python path."""
    kw = {"loss": 0.02, "seed": 5}
    a, b = run(traces[scheme], "python", **kw), run(traces[scheme], "compiled", **kw)
    assert b.engine == "compiled" and _exercised(b) and b.incomplete() == []
    assert_same(a, b)


@pytest.mark.parametrize("scheme", ["mars", "ulysses"])
def test_tables_reliable_delivery_grows_start_at_one_row(traces, scheme, monkeypatch):
    """Acks, probes and nacks take message rows the tables did not count, resends fragment
    lists, nacks payload bytes: the loop (compiled without reference counting) replaces those
    tables only through emu.engine.reliable's allocating functions and reads them from the State
    again after any call that may replace them. Started at one row, each is replaced many
    times during a lossy run (probes among them, while a timeout probes several silent
    receivers); the results stay the Python path's."""
    from emu.engine import tables as engine_tables
    from emu.engine.state import State

    grown = ("MS", "MX", "OUT", "MD", "OD", "BITS", "SL", "NKB", "SIM")
    states = []

    def one_row_state(**tables):
        for name in grown:
            tables[name] = np.zeros((1,) + tables[name].shape[1:], tables[name].dtype)
        states.append(State(**tables))
        return states[-1]

    kw = {"loss": 0.02, "seed": 5}
    a = run(traces[scheme], "python", **kw)
    monkeypatch.setattr(engine_tables, "State", one_row_state)
    b = run(traces[scheme], "compiled", **kw)
    assert _exercised(b)
    assert_same(a, b)
    (st,) = states
    nmsg = int(st.table("RS")[L.RS_NMSG])
    assert nmsg > 1000 and st.table("MS").shape[0] >= nmsg and st.table("OUT").shape[0] >= nmsg
    for name in grown:
        assert st.table(name).shape[0] > 1, name


@pytest.mark.parametrize("scheme", ["mars", "pd", "ulysses"])
def test_reliable_delivery_without_loss_replays_identically(traces, scheme):
    """Acks and RTT samples only: the same acks, the same timers (spurious probes included)."""
    a, b = run(traces[scheme], "python", reliable=True), run(traces[scheme], "compiled", reliable=True)
    c = summarize(b)["control_frames_by_op"]
    assert c["ack"] > 0 and c["nack"] == 0 and summarize(b)["retransmitted_frames"] == 0
    assert_same(a, b)


def test_reliable_delivery_holds_the_packetizer_until_acked_identically():
    """docs/nic.md, Packetizer: with reliable delivery a send's bytes stay in the packetization
    buffer until every receiver has acked it, so a 4 KiB buffer stalls the compute engines
    longer than without; the compiled loop and the Python path agree."""
    scheme, nodes, chunk, topo, ov = CASES[0]
    trace = emu.trace(scheme, seq=512, nodes=nodes, chunk=chunk, decode_tokens=1)
    kw = {"topology": topo, "overrides": ov}
    a, b = run(trace, "python", reliable=True, **kw), run(trace, "compiled", reliable=True, **kw)
    assert_same(a, b)
    plain = summarize(run(trace, "compiled", reliable=False, **kw))
    assert summarize(b)["retransmitted_frames"] == 0 and summarize(b)["ttft_s"] > plain["ttft_s"]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_randomized_lossy_scenarios_replay_identically(seed):
    """Random schemes, topologies, packetizers, arbiters, seeds and loss rates; on some links
    Gilbert-Elliott bursts or corruption instead of Bernoulli loss."""
    from emu.net import Loss

    rng = np.random.default_rng(100 + seed)
    for i in rng.permutation(len(CASES))[:2]:
        scheme, nodes, chunk, topo, ov = CASES[i]
        trace = emu.trace(scheme, seq=int(rng.choice([512, 1024])), nodes=nodes, chunk=chunk,
                          decode_tokens=int(rng.integers(0, 3)))
        kw = {"topology": topo, "overrides": ov, "seed": int(rng.integers(0, 1000)),
              "loss": float(rng.choice([1e-3, 5e-3, 0.02, 0.05]))}
        special = {}
        nl = len(Replay(trace, Options(engine="python", **kw)).net.links)
        for link in rng.choice(nl, size=min(3, nl), replace=False).tolist():
            special[link] = (Loss(p=0.05, r=0.3, loss_good=0.0, loss_bad=0.5) if rng.random() < 0.5
                             else Loss(p=kw["loss"], corrupt=0.02))

        def go(engine):
            rp = Replay(trace, Options(engine=engine, **kw))
            for link, loss in special.items():
                rp.net.set_loss(link, loss)
            return rp.run()

        a, b = go("python"), go("compiled")
        assert b.engine == "compiled" and b.cluster.retransmitted_frames > 0
        assert_same(a, b)


def test_loss_without_reliable_delivery_leaves_the_same_sends_incomplete(traces):
    """--reliable off with loss: lost frames are never resent; both name the same sends."""
    a = run(traces["mars"], "python", loss=0.01, reliable=False)
    b = run(traces["mars"], "compiled", loss=0.01, reliable=False)
    assert b.engine == "compiled" and b.cluster.incomplete() and "frames lost" in b.cluster.incomplete()[0]
    assert summarize(b)["control_frames_by_op"]["ack"] == 0
    assert_same(a, b)


def test_retries_used_up_fail_the_same_sends(traces):
    """A board that hears nothing after max_retries timeouts gives up: the same sends fail,
    with the same silent boards and retry counts."""
    from dataclasses import replace

    def failing(engine):
        rp = Replay(traces["ring"], Options(engine=engine, loss=0.3, seed=1))
        rp.cluster.config = replace(rp.cluster.config, max_retries=1)
        for p in getattr(rp.cluster, "proto", ()):  # the reference's boards (the compiled loop reads config)
            p.cfg = replace(p.cfg, max_retries=1)
        return rp.run()

    a, b = failing("python"), failing("compiled")
    assert b.engine == "compiled"
    assert any("no acknowledgement from" in x for x in b.cluster.incomplete())
    assert_same(a, b)


# ---- timelines: failures, repairs, re-routes, rate and loss changes ------------------------------

def _drops(rp):
    return summarize(rp)["dropped_by_cause"]


@pytest.mark.parametrize("scheme,nodes,topology,scenario,loss,cause", [
    # a link of the torus fails while MARS multicasts its replicas over it: frames on the wire and
    # in its queue are lost, the multicast trees are rebuilt and the unsent fragments re-homed
    ("mars", 8, "torus:2x4", ("link 3-7 down at 912.3ms up at 913ms", "link 3-7 down at 970.7ms",
                              "link 0-1 down at 0.5s up at 0.9s"), 0.0, "link_down"),
    # a board goes down and comes back: sends to it have no route meanwhile and are held
    ("pd", 8, "torus:2x4", ("node 3 down at 1ms up at 2ms",), 0.001, "no_route"),
    # rate and loss changes while frames wait, on every link and on one direction
    ("ulysses", 4, "full", ("link * loss 0.05 at 0.8s until 1.2s", "link 0-3 degrade 0.1 at 0.9s until 1.5s",
                            "link 3>2 rate 10000000 at 2.3s"), 0.0, "loss"),
])
def test_failures_mid_transfer_replay_identically(scheme, nodes, topology, scenario, loss, cause):
    trace = emu.trace(scheme, seq=1024, nodes=nodes, chunk=256, decode_tokens=1)
    kw = {"topology": topology, "scenario": scenario, "loss": loss, "seed": 2}
    a, b = run(trace, "python", **kw), run(trace, "compiled", **kw)
    assert b.engine == "compiled" and _drops(b)[cause] > 0
    assert_same(a, b)


@pytest.mark.parametrize("scheme,nodes,topology,scenario,loss", [
    # a one-way ring cut: board 1 is out of reach of board 0's multicasts until the link is back
    ("mars", 4, "ring", ("link 0-1 down at 1ms up at 2ms",), 0.01),
    # a board down for 10 ms while MARS multicasts replicas to it and through it
    ("mars", 8, "torus:2x4", ("node 3 down at 0.3s up at 0.31s",), 0.0),
])
def test_a_multicast_to_a_board_out_of_reach_waits_for_the_repair_identically(scheme, nodes, topology, scenario,
                                                                               loss):
    """docs/nic.md, Multicast engine (out of reach): the multicast goes to the members still
    reachable, reliable delivery holds it for the others (a send with no way out at all is
    held the same way) and its probes reach them after the repair; the replay completes,
    nothing failed, on both engines alike (it stopped with NoRoute before)."""
    trace = emu.trace(scheme, seq=1024, nodes=nodes, chunk=256, decode_tokens=1)
    kw = {"topology": topology, "scenario": scenario, "loss": loss}
    a, b = run(trace, "python", **kw), run(trace, "compiled", **kw)
    assert_same(a, b)
    s, ref = summarize(b), summarize(run(trace, "compiled", topology=topology))
    assert s["incomplete_ops"] == 0 and s["failed_sends"] == [] and b.incomplete() == []
    assert s["control_frames_by_op"]["probe"] > 0 and s["retransmitted_frames"] > 0
    assert s["ttft_s"] > ref["ttft_s"]


FAIL_CASES = [("mars", 8, "torus:2x4"), ("ring", 6, "full"), ("zigzag", 4, "mesh:2x2"), ("pd", 8, "torus:2x4"),
              ("ulysses", 4, "full"), ("usp", 8, "torus:2x4"), ("mars", 4, "star"), ("full", 4, "full")]


def _random_scenario(rng, rp):
    """One to three changes at times when messages are arriving (so mostly mid-transfer)."""
    edges = sorted((u, v) for u, v in rp.G.edges if u < v)
    busy, end = rp.deliveries()[:, 2], int(rp.sim.now)
    out = []
    for _ in range(int(rng.integers(1, 4))):
        u, v = edges[int(rng.integers(len(edges)))]
        t0 = max(1, int(busy[int(rng.integers(len(busy)))]) - int(rng.integers(0, 20_000_000)))
        us = lambda t: f"{t / 1e6:.3f}us"
        kind = rng.choice(["down", "flap", "degrade", "loss", "node"])
        if kind == "down":
            out.append(f"link {u}-{v} down at {us(t0)}")
        elif kind == "flap":
            out.append(f"link {u}-{v} down at {us(t0)} up at {us(t0 + int(rng.integers(1, end // 3 + 2)))}")
        elif kind == "degrade":
            out.append(f"link {u}-{v} degrade {rng.choice([0.1, 0.5])} at {us(t0)} until {us(t0 + end // 4)}")
        elif kind == "loss":
            out.append(f"link {u}>{v} loss {rng.choice([0.05, 0.3])} at {us(t0)} until {us(t0 + end // 5)}")
        else:
            out.append(f"node {int(rng.integers(rp.nodes))} down at {us(t0)} up at {us(t0 + end // 6)}")
    return tuple(out)


@pytest.mark.parametrize("seed", range(8))
def test_randomized_timelines_replay_identically(seed):
    """Random schemes, topologies, failures, flaps, node outages, degrades and loss windows at
    busy times, detection delays, base loss, reliable delivery on or off: identical results,
    or (a partition the schemes cannot route around) both engines refuse to go on."""
    rng = np.random.default_rng(1000 + seed)
    scheme, nodes, topo = FAIL_CASES[int(rng.integers(len(FAIL_CASES)))]
    trace = emu.trace(scheme, seq=int(rng.choice([512, 1024])), nodes=nodes, chunk=256,
                      decode_tokens=int(rng.integers(0, 2)))
    healthy = run(trace, "compiled", topology=topo)
    kw = {"topology": topo, "scenario": _random_scenario(rng, healthy), "seed": int(rng.integers(100)),
          "loss": float(rng.choice([0, 0, 1e-3, 0.01])), "detect_ps": int(rng.choice([0, 10**6, 10**8])),
          "reliable": None if rng.random() < 0.8 else False}
    try:
        a = run(trace, "python", **kw)
    except ConfigError:
        with pytest.raises(Exception):
            run(trace, "compiled", **kw)
        return
    b = run(trace, "compiled", **kw)
    assert b.engine == "compiled"
    assert_same(a, b)


def _bins_per_link(rp):
    return int(rp.linkstats.frame(rp.net.links, rp.net.LK[:, 2], max(rp.sim.now, 1)).groupby("link").size().max())


@pytest.mark.parametrize("scheme", ["mars", "ulysses"])
def test_link_bins_widen_past_their_limit_the_same_way_on_both_engines(traces, scheme, monkeypatch):
    """A run that passes MAX_BINS bins widens them (the table stays bounded), identically on
    both engines; the widened table is the one binned at that width from the start."""
    from emu.replay import run as run_module

    chosen = run(traces[scheme], "compiled").linkstats.bin_ps  # the width the estimate gives
    monkeypatch.setattr(run_module, "MAX_BINS", 6)
    a, b = run(traces[scheme], "python"), run(traces[scheme], "compiled")
    assert_same(a, b)
    assert _bins_per_link(b) <= 6 and b.linkstats.bin_ps >= 8 * chosen
    c = run(traces[scheme], "compiled", bin_ps=b.linkstats.bin_ps)  # that width, asked for
    end = max(b.sim.now, 1)
    pd.testing.assert_frame_equal(b.linkstats.frame(b.net.links, b.net.LK[:, 2], end),
                                  c.linkstats.frame(c.net.links, c.net.LK[:, 2], end))


def test_a_replay_far_longer_than_its_estimate_keeps_a_bounded_bins_table():
    """Slow links make the run last far longer than the compute estimate the bin width comes
    from: the bins widen instead of the table growing with the run (it took gigabytes)."""
    from emu.replay.run import MAX_BINS

    trace = emu.trace("ring", seq=1024, nodes=4, chunk=256, decode_tokens=0)
    fast = run(trace, "compiled")
    slow = run(trace, "compiled", overrides=("hw.link_rate=2Mbps",))
    assert slow.sim.now > 2 * MAX_BINS * fast.linkstats.bin_ps  # would have needed that many bins
    assert slow.linkstats.bin_ps > fast.linkstats.bin_ps
    assert _bins_per_link(slow) <= MAX_BINS
    assert slow.net.LB.shape[0] <= 2 * MAX_BINS * len(slow.net.links)


@pytest.mark.parametrize("scheme,nodes,topology,kw", [
    # board sets of two words (emu.engine.boards): one not full, one exactly full
    ("mars", 72, "auto", {}),
    # on shortest routes its 16-board rings deadlock under pause: dateline routes cannot
    ("full", 128, "torus:16x8", {"routing": "dateline"}),
    # loss with reliable delivery: acks, probes and nacks to boards beyond 63
    ("mars", 72, "auto", {"loss": 0.002, "seed": 3}),
    # a board beyond 63 goes down: sends to it have no route meanwhile
    ("pd", 80, "auto", {"scenario": ("node 70 down at 1ms up at 2ms",), "loss": 0.001}),
])
def test_more_than_64_boards_replay_identically_on_the_compiled_loop(scheme, nodes, topology, kw):
    trace = emu.trace(scheme, seq=256, nodes=nodes, chunk=256, decode_tokens=1, model="qwen2.5-0.5b")
    assert Replay(trace, Options(topology=topology, **kw)).engine == "compiled"  # auto picks it
    assert_same(run(trace, "python", topology=topology, **kw), run(trace, "compiled", topology=topology, **kw))


def _spread_blocks(trace, factor=131071):
    """The same trace with its KV block ids spread over ~2^28 (each id x >= 0 becomes x * factor + 5)."""
    from dataclasses import replace

    ops = dict(trace.ops)
    kv = ops["kv_id"].astype(np.int64)
    ops["kv_id"] = np.where(kv >= 0, kv * factor + 5, kv).astype(trace.ops["kv_id"].dtype)
    blk = trace.blk_idx.astype(np.int64) * factor + 5
    return replace(trace, ops=ops, blk_idx=blk.astype(trace.blk_idx.dtype))


@pytest.mark.parametrize("scheme", ["mars", "pd"])
def test_kv_block_ids_spread_wide_replay_on_the_compiled_loop_as_dense_ones(traces, scheme, tmp_path):
    """The directory's tables are dense in the blocks, not in their ids (emu.engine.tables.block_ids):
    ids spread over 2^28 give the Python path's results, the same times as the trace with
    dense ids, and the frames carry the trace's own ids."""
    dense = traces[scheme]
    spread = _spread_blocks(dense)
    assert int(spread.ops["kv_id"].max()) > 1 << 27
    b = run(spread, "compiled")
    assert b.engine == "compiled"
    assert_same(run(spread, "python"), b)
    np.testing.assert_array_equal(b.end, run(dense, "compiled").end)
    ids = set(b.cluster.directory.owners)
    assert ids and ids <= set(spread.ops["kv_id"].tolist()) | set(spread.blk_idx.tolist())
    # the frames' kv_id is the trace's id, as the Python path's capture has it
    caps = {e: tmp_path / f"{e}.pcapng" for e in ("python", "compiled")}
    for e, path in caps.items():
        emu.replay(spread, capture=str(path), engine=e, loss=0.01, seed=1)
    assert caps["compiled"].read_bytes() == caps["python"].read_bytes()


def test_the_product_has_no_python_replay_path(tmp_path):
    """The Python path is the test suite's reference (tests/pyreplay.py, registered by conftest):
    a user's `emu replay --engine python` is refused in one line, and help does not offer it."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "emu", "replay", "mars_16k", "--no-results", "--engine", "python"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "tests/pyreplay.py" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    h = subprocess.run([sys.executable, "-m", "emu", "replay", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert "--engine" not in h.stdout and "--functional" in h.stdout
