"""Replay: every op completes, bytes are conserved, layouts end as each scheme promises,
runs are deterministic, and bad input fails with one line."""

import json
import subprocess
import sys

import numpy as np
import pytest

from emu.cli import main
from emu.net.ethernet import WIRE_OVERHEAD
from emu.replay.summary import SUMMARY_KEYS, summarize
from emu.replay.run import Options, Replay
from emu.workload.enums import MsgOp
from emu.workload.trace import load_trace

SMALL = ["--seq", "1024", "--nodes", "4", "--chunk", "256", "--decode-tokens", "2"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    out = {}
    for scheme in ("ring", "mars", "zigzag", "pd", "full"):
        path = d / f"{scheme}.json"
        assert main(["trace", scheme, *SMALL, "-o", str(path)]) == 0
        out[scheme] = path
    return out


def replay(path, **kw):
    return Replay(load_trace(str(path)), Options(**kw)).run()


@pytest.mark.parametrize("scheme", ["ring", "mars", "zigzag", "pd", "full"])
def test_every_op_completes_and_links_conserve_frames(traces, scheme):
    rp = replay(traces[scheme])
    assert rp.incomplete() == []
    c = rp.net.counters()
    assert (c.offered_frames == c.delivered_frames + c.dropped_frames).all()
    assert c.dropped_frames.sum() == 0
    s = summarize(rp)
    assert set(SUMMARY_KEYS) <= set(s)
    assert s["ttft_s"] > 0 and s["decode_tokens_per_s"] > 0
    assert not s["directory_errors"]


def test_every_payload_byte_arrives_once_at_each_destination(traces):
    rp = replay(traces["mars"], engine="python")  # its Transfer objects (the compiled loop matches it)
    ops = rp.trace.ops
    kv = np.isin(ops["msg_op"], [MsgOp.kv_replica, MsgOp.kv_fetch_resp, MsgOp.kv_transfer])
    ndst = np.diff(rp.trace.dst_ptr)
    assert rp.kv_bytes == int((ops["bytes"][kv] * ndst[kv]).sum())
    for tr in rp.cluster.transfers:
        assert sorted(tr.delivered) == sorted(tr.dsts)


def test_wire_bytes_equal_frames_times_hops_plus_acks(traces):
    """Independent count: each message's frames cross the links of its route or tree once."""
    rp = replay(traces["ring"], engine="python")  # its Message objects
    expected = 0
    for msg in rp.net.messages:
        nfr, full, last = msg.nfrags, msg.frame_len, msg.last_len
        per_link = (nfr - 1) * (max(full, 60) + WIRE_OVERHEAD) + max(last, 60) + WIRE_OVERHEAD
        if len(msg.dsts) == 1:
            links = len(rp.routes.path(msg.src, msg.dsts[0])) - 1
        else:
            links = sum(len(rp.net.first_hops(msg.route, v)) for v in range(rp.net.nodes))
        expected += per_link * links
    assert expected == summarize(rp)["wire_bytes"]
    # The same total counted from the trace alone, not from the engine's messages.
    from test_replay_shipped import expected_wire_bytes

    assert expected_wire_bytes(rp) == expected


def test_ring_never_holds_replicas_and_mars_ends_owner_only(traces):
    ring = replay(traces["ring"])
    assert ring.cluster.directory.history().replica_bytes.max() == 0
    mars = replay(traces["mars"])
    s = summarize(mars)
    assert s["final_layout_owner_only"]
    assert mars.cluster.directory.history().replica_bytes.max() > 0  # replicas existed, then drained


def test_same_trace_and_seed_give_identical_results_and_captures(traces, tmp_path):
    outs = []
    for k in range(2):
        out = tmp_path / f"r{k}"
        assert main(["replay", str(traces["mars"]), "--loss", "0.002", "--seed", "5", "--out", str(out),
                     "--capture", "cap.pcap", "--json"]) == 0
        s = json.loads((out / "summary.json").read_text())
        s.pop("wall_s")
        outs.append((s, (out / "cap.pcap").read_bytes()))
    assert outs[0][0] == outs[1][0]
    assert outs[0][1] == outs[1][1] and len(outs[0][1]) > 1000


def test_loss_and_failure_still_complete_with_reliability(traces):
    rp = replay(traces["mars"], loss=0.01, seed=3, scenario=("link 0-1 down at 0.2s up at 0.6s",))
    assert rp.incomplete() == []
    s = summarize(rp)
    assert s["dropped_frames"] > 0 and s["retransmitted_frames"] > 0
    assert s["final_layout_owner_only"]
    c = rp.net.counters()
    assert (c.offered_frames == c.delivered_frames + c.dropped_frames).all()


def test_without_reliability_lost_frames_are_reported_not_hidden(traces, capsys):
    status = main(["replay", str(traces["ring"]), "--loss", "0.01", "--reliable", "off", "--no-results"])
    out = capsys.readouterr().out
    assert status == 1 and "INCOMPLETE" in out


def test_results_folder_and_compare(traces, tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["replay", str(traces["ring"]), "--out", str(out)]) == 0
    for name in ("summary.json", "ops.parquet", "links.parquet", "nodes.parquet", "topology.json"):
        assert (out / name).exists()
    import pandas as pd

    links = pd.read_parquet(out / "links.parquet")
    assert links.utilization.between(0, 1).all() and links.wire_bytes.sum() == json.loads(
        (out / "summary.json").read_text())["wire_bytes"]
    capsys.readouterr()
    assert main(["compare", str(out), str(out)]) == 0
    assert "TTFT s" in capsys.readouterr().out


@pytest.mark.parametrize("content,needle", [
    ("{not json", "not valid JSON"),
    ('{"meta": {}}', "meta"),
])
def test_malformed_trace_gives_one_line_and_status_2(tmp_path, content, needle):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "emu", "replay", str(bad), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_bad_options_fail_cleanly(traces, tmp_path):
    for args, needle in [(["--set", "hw.nope=1"], "unknown field"), (["--topology", "torus:3x3"], "boards"),
                         (["--fail", "link 0-9 down at 1s"], "no link"), (["--loss", "2"], "probability")]:
        proc = subprocess.run([sys.executable, "-m", "emu", "replay", str(traces["ring"]), "--no-results", *args],
                              capture_output=True, text=True)
        assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_capture_filters_keep_only_what_was_asked(traces, tmp_path):
    from emu.codec import Op, decode_frames, read_capture

    out = tmp_path / "cap"
    assert main(["replay", str(traces["ring"]), "--out", str(out), "--capture", "kv.pcapng",
                 "--capture-filter", "op=kv_transfer", "--capture-filter", "link=0>1",
                 "--capture-filter", "from=1ms"]) == 0
    frames = 0
    for batch in read_capture(out / "kv.pcapng"):
        f = decode_frames(batch.buf, batch.offsets, wirelen=batch.wirelen)
        frames += len(f.headers)
        assert (f.headers["op"] == Op.kv_transfer).all()
        assert (batch.ts_ns >= 1_000_000).all()
        # Transmitted by board 0 (source MAC 02:4d:43:46:00:00) on link 0->1.
        assert (f.eth_src == np.array([2, 0x4D, 0x43, 0x46, 0, 0], np.uint8)).all()
    assert frames > 0
    assert main(["replay", str(traces["ring"]), "--out", str(tmp_path / "x"), "--capture", "c.pcap",
                 "--capture-filter", "op=nonsense"]) == 2
    assert not (tmp_path / "x").exists()


def test_topology_and_degraded_links_change_what_a_run_costs(traces):
    from test_replay_shipped import expected_wire_bytes

    base = summarize(replay(traces["ring"]))
    slow = summarize(replay(traces["ring"], scenario=("link * degrade 0.05 at 0s",)))
    rp = replay(traces["ring"], topology="star")
    star = summarize(rp)
    assert slow["ttft_s"] > base["ttft_s"]
    assert star["topology"] == "star4" and base["topology"] == "full4"
    # Through a switch a transfer takes two hops (a multicast shares the first).
    assert base["wire_bytes"] < star["wire_bytes"] == expected_wire_bytes(rp) < 2 * base["wire_bytes"]
    assert star["kv_bytes"] == base["kv_bytes"]


def test_retransmitted_frames_carry_retx_in_the_capture(traces, tmp_path):
    from emu.codec import Flags, decode_frames, read_capture

    out = tmp_path / "lossy"
    assert main(["replay", str(traces["ring"]), "--loss", "0.01", "--seed", "2", "--out", str(out),
                 "--capture", "c.pcap"]) == 0
    s = json.loads((out / "summary.json").read_text())
    retx = 0
    for batch in read_capture(out / "c.pcap"):
        f = decode_frames(batch.buf, batch.offsets, wirelen=batch.wirelen)
        retx += int(((f.headers["flags"] & Flags.RETX) != 0).sum())
    # Every resent fragment appears at least once (more when its route has several hops).
    assert s["retransmitted_frames"] > 0 and retx >= s["retransmitted_frames"] - s["dropped_by_cause"]["loss"]
    assert retx > 0


def test_results_record_what_the_run_was_told_and_every_ops_dependencies(traces, tmp_path):
    """The dashboard compares runs on loss, clauses and overrides, and lists an op's dependencies."""
    import pandas as pd

    out = tmp_path / "run"
    assert main(["replay", str(traces["mars"]), "--loss", "0.001", "--set", "hw.link_rate=2Gbps",
                 "--fail", "link 0-1 down at 1ms up at 2ms", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["loss"] == 0.001
    assert s["overrides"] == ["hw.link_rate=2Gbps"]
    assert s["scenario"] == ["link 0-1 down at 1ms up at 2ms"]
    t = load_trace(str(traces["mars"]))
    ops = pd.read_parquet(out / "ops.parquet")
    for i in range(t.n_ops):
        assert list(ops.deps[i]) == t.dep_idx[t.dep_ptr[i]:t.dep_ptr[i + 1]].tolist()


def test_summary_peaks_per_node_match_the_memory_table(traces, tmp_path):
    import pandas as pd

    out = tmp_path / "run"
    assert main(["replay", str(traces["mars"]), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    n = pd.read_parquet(out / "nodes.parquet")
    assert s["peak_node_owner_replica_bytes"] == int((n.owner_bytes + n.replica_bytes).max())
    assert s["peak_node_transient_bytes"] == int(n.transient_bytes.max()) > 0
    assert s["peak_node_kv_bytes"] == int((n.owner_bytes + n.replica_bytes + n.transient_bytes).max())


@pytest.mark.parametrize("block", [1, 3, 1 << 20])
def test_the_history_peaks_read_a_block_at_a_time_are_the_peaks_of_all_rows(block, monkeypatch):
    """history_peaks reads the history a block of rows at a time (13M rows at 128 boards); each
    peak is its column's largest over every row, whichever block holds it."""
    from emu.engine.layout import HISTORY_COLUMNS
    from emu.nic import directory

    monkeypatch.setattr(directory, "_PEAK_ROWS", block)
    rng = np.random.default_rng(5)
    h = {name: rng.integers(0, 1 << 40, size=11) for name in HISTORY_COLUMNS}
    kept = h["owner_bytes"] + h["replica_bytes"]
    transient = h["transient_bytes"]
    want = (int((kept + transient).max()), int(kept.max()), int(transient.max()))
    assert directory.history_peaks(h) == want
    assert directory.history_peaks({name: v[:0] for name, v in h.items()}) == (0, 0, 0)


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_a_packetization_buffer_below_one_mib_is_the_one_modelled(engine):
    """hw.comm_buffer is the packetizer's payload FIFO as given (docs/workloads.md): 64 KiB holds
    back MARS's replica pushes that 1 MiB admits (it was silently raised to 1 MiB), on both engines."""
    import emu

    tr = emu.trace("mars", nodes=8, seq=4096, chunk=1024)
    small, large = (emu.replay(tr, set={"hw.comm_buffer": b}, engine=engine) for b in ("64KiB", "1MiB"))
    assert small.ttft_s > large.ttft_s


def test_an_into_filter_keeps_what_one_board_receives(traces, tmp_path):
    """into=K: the frames on K's inbound links, what board K would be sent on hardware (node=K
    keeps both directions, K's own frames too)."""
    from emu.codec import decode_frames, read_capture

    def receivers(flt):
        out = tmp_path / flt.replace("=", "")
        assert main(["replay", str(traces["mars"]), "--out", str(out), "--capture", "c.pcap",
                     "--capture-filter", flt]) == 0
        rx, src = [], []
        for batch in read_capture(out / "c.pcap"):  # classic pcap: the destination MAC names the receiver
            f = decode_frames(batch.buf, batch.offsets, wirelen=batch.wirelen)
            rx.append(f.eth_dst[:, 4].astype(int) * 256 + f.eth_dst[:, 5])
            src.append(f.headers["src_node"])
        return np.concatenate(rx), np.concatenate(src)

    rx, src = receivers("into=1")
    assert len(rx) and (rx == 1).all() and (src != 1).all()
    rx, src = receivers("node=1")
    assert (rx != 1).any() and (src == 1).any()


def test_ops_parquet_is_the_file_pandas_writes_for_an_array_per_op(traces, tmp_path):
    """ops.parquet's deps column is built from the trace's CSR, not an array object per op; the
    file is byte for byte the one DataFrame.to_parquet writes for those arrays (its pandas
    metadata included), so every reader gets what it got before."""
    import emu
    from emu.replay.summary import _op_columns

    r = emu.replay(str(traces["mars"]), out=tmp_path / "run")
    tr, rp = r.engine.trace, r.engine
    by_pandas = _op_columns(rp).assign(deps=np.split(tr.dep_idx.astype(np.int64), tr.dep_ptr[1:-1]))
    by_pandas.to_parquet(tmp_path / "pandas.parquet", index=False)
    assert (tmp_path / "run" / "ops.parquet").read_bytes() == (tmp_path / "pandas.parquet").read_bytes()
