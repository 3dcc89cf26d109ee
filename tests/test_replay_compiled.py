"""The compiled replay loop (emu.replay.core) gives exactly what the Python path gives.

Every scheme's generated trace, and randomized scenarios (seeds, topologies, chunk sizes,
packetizer sizes that make compute engines stall, link rates, port arbiters), are replayed
with engine="python" and engine="compiled"; the summaries (all but wall time and the engine
name), every op's start and end, the directory history, the per-link and per-node counters,
the link time series and every delivery time must be identical.
"""

import numpy as np
import pandas as pd
import pytest

import emu
from emu.cli import main
from emu.errors import ConfigError
from emu.replay.results import summarize
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
    return {s: emu.trace(s, seq=2048, nodes=8, chunk=256, decode_tokens=2) for s in SCHEMES}


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


def test_auto_picks_compiled_for_lossless_timing_runs_only(traces):
    t = traces["ring"]
    assert Replay(t, Options()).engine == "compiled"
    assert Replay(t, Options(loss=0.01)).engine == "python"
    assert Replay(t, Options(scenario=("link 0-1 down at 1ms",))).engine == "python"
    assert Replay(t, Options(functional=True)).engine == "python"
    assert Replay(t, Options(reliable=True)).engine == "python"
    with pytest.raises(ConfigError, match="frame loss"):
        Replay(t, Options(engine="compiled", loss=0.01))
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
    assert main(["replay", str(path), "--no-results", "--engine", "compiled", "--loss", "0.1"]) == 2
    assert "frame loss" in capsys.readouterr().err
    assert main(["replay", str(path), "--no-results", "--engine", "compiled", "--capture", "/tmp/x.pcap"]) == 2
    assert "--capture" in capsys.readouterr().err


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
    from emu.replay import core_tables
    from emu.replay.core_state import State

    grown = ("SIM", "WORK", "HIST", "ERR")
    states = []

    def one_row_state(**tables):
        for name in grown:
            tables[name] = np.zeros((1, tables[name].shape[1]), tables[name].dtype)
        states.append(State(**tables))
        return states[-1]

    t = with_unheld_blocks(traces[scheme]) if scheme == "mars" else traces[scheme]
    a = run(t, "python")
    monkeypatch.setattr(core_tables, "State", one_row_state)
    b = run(t, "compiled")
    assert_same(a, b)
    (st,) = states
    used = {"SIM": 2, "WORK": 2, "HIST": len(b.cluster.directory.history()), "ERR": len(b.cluster.directory.errors)}
    for name in grown:
        if used[name] > 1:
            assert st.table(name).shape[0] >= used[name] > 1


def test_the_loops_disk_cache_goes_stale_with_the_kernel_source(tmp_path, monkeypatch):
    """The compiled loop embeds the frame kernel's machine code: its cache entries are stamped
    with the sources of the kernel and of every core module, not only their own file."""
    from emu.net import kernel
    from emu.replay import core, core_cache

    loc = core.drive._cache._impl.locator
    assert isinstance(loc, core_cache._Stamped) and loc.get_source_stamp() == core_cache.stamp()
    assert not isinstance(kernel.advance._cache._impl.locator, core_cache._Stamped)
    assert any(p.endswith("net/kernel.py") for p in core_cache._sources())
    src = tmp_path / "kernel.py"
    src.write_text("x = 1\n")
    monkeypatch.setattr(core_cache, "_sources", lambda: [str(src)])
    before = core_cache.stamp()
    src.write_text("x = 22\n")  # (another size: a rewrite within one mtime tick is still seen)
    assert core_cache.stamp() != before


def test_a_capture_attached_to_a_replay_runs_it_on_the_python_path(traces, tmp_path):
    from emu.replay.capture import Capture

    rp = Replay(traces["ring"], Options())
    cap = Capture(tmp_path / "c.pcap")
    cap.attach(rp)
    rp.run()
    cap.close()
    assert rp.engine == "python" and (tmp_path / "c.pcap").stat().st_size > 0
    rp = Replay(traces["ring"], Options(engine="compiled"))
    Capture(tmp_path / "d.pcap").attach(rp)
    with pytest.raises(ConfigError, match="capture"):
        rp.run()
