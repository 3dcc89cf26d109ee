"""The Python API: emu.trace / emu.replay / Result are the CLI's own path, and what they return is the run."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import emu
from emu.cli import main
from emu.errors import ConfigError
from emu.replay.summary import summarize
from emu.replay.run import Options, Replay
from emu.workload.trace import dumps, load_trace

SMALL = dict(nodes=4, seq=1024, chunk=256, decode_tokens=2)
CLI_SMALL = ["--nodes", "4", "--seq", "1024", "--chunk", "256", "--decode-tokens", "2"]
VOLATILE = {"wall_s", "results", "capture", "trace"}


def same(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in VOLATILE} == {k: v for k, v in b.items() if k not in VOLATILE}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("api")
    out = {}
    for scheme in ("mars", "ring"):
        out[scheme] = d / f"{scheme}.json"
        assert main(["trace", scheme, *CLI_SMALL, "-o", str(out[scheme])]) == 0
    out["dir"] = d
    return out


def test_trace_is_the_cli_generator(files):
    assert dumps(emu.trace("mars", **SMALL)) == files["mars"].read_bytes()
    assert dumps(emu.trace("ring", **SMALL, set={"hw.link_rate": "10Gbps"})) != files["ring"].read_bytes()


def test_replay_equals_the_engine_and_the_cli(files, tmp_path, capsys):
    api = emu.replay(str(files["mars"]), loss=0.001, seed=3)
    direct = summarize(Replay(load_trace(str(files["mars"])), Options(loss=0.001, seed=3)).run())
    assert same(api.summary, direct) and api.summary["dropped_frames"] > 0
    assert main(["replay", str(files["mars"]), "--loss", "0.001", "--seed", "3", "--no-results", "--json"]) == 0
    assert same(json.loads(capsys.readouterr().out), api.summary)
    # attributes are the summary's keys
    assert api.ttft_s == direct["ttft_s"] and api.incomplete_ops == 0
    with pytest.raises(AttributeError):
        api.no_such_key
    # options as the CLI spells them and as Python values mean the same run
    a = emu.replay(str(files["ring"]), set={"hw.link_rate": "10Gbps"}, fail="link 0-1 down at 1ms up at 2ms")
    b = emu.replay(load_trace(str(files["ring"])), set=["hw.link_rate=10Gbps"], fail=["link 0-1 down at 1ms up at 2ms"],
                   reliable="auto", detect="100us", seed=0)
    assert same(a.summary, b.summary) and a.ttft_s < emu.replay(str(files["ring"])).ttft_s


def test_tables_are_the_results_folder(files, tmp_path):
    r = emu.replay(str(files["mars"]), out=tmp_path / "run")
    assert r.path == tmp_path / "run" and r.summary["results"] == str(tmp_path / "run")
    back = emu.load(tmp_path / "run")
    assert back.engine is None and same(back.summary, r.summary)
    for name in ("ops", "links", "nodes", "deliveries", "replicas"):
        pd.testing.assert_frame_equal(getattr(r, name), getattr(back, name), check_categorical=False)
    # KV memory over time: the last row per node is the summary's final memory
    last = r.nodes.groupby("node").last()
    assert (last.owner_bytes + last.replica_bytes + last.transient_bytes).tolist() == r.final_node_kv_bytes
    # the replica factor series: at each recorded time, the value after the last change then
    rep = r.replicas
    assert rep.t_s.is_monotonic_increasing and rep.t_s.is_unique
    want = r.nodes.groupby("t_s").replica_factor.last()
    assert np.array_equal(rep.replica_factor.to_numpy(), want.to_numpy())
    assert rep.replica_factor.max() > 1.0 and rep.replica_factor.iloc[-1] == 1.0  # MARS replicates, then drains
    # each send reaches each of its destinations once, and the op ends at its last delivery
    d = r.deliveries.groupby("op")
    sends = r.ops[r.ops.kind == "send"].set_index("op")
    assert (d.size().reindex(sends.index) == sends.dsts).all()
    assert np.allclose(d.t_s.max().reindex(sends.index), sends.end_s)


def test_compare_is_the_table_emu_compare_prints(files, tmp_path, capsys):
    m = emu.replay(str(files["mars"]), out=tmp_path / "mars")
    g = emu.replay(str(files["ring"]), out=tmp_path / "ring")
    assert main(["compare", str(tmp_path / "mars"), str(tmp_path / "ring")]) == 0
    printed = capsys.readouterr().out
    assert str(m.compare(g)) + "\n" == printed
    assert str(emu.load(tmp_path / "mars").compare(emu.load(tmp_path / "ring"))) + "\n" == printed
    f = m.compare(g).frame
    assert list(f.columns) == ["mars", "ring"] and f.loc["TTFT s", "ring"] == g.ttft_s
    assert f.loc["wire MiB", "mars"] == m.wire_bytes / 2**20


def test_absolute_capture_is_written_where_asked(files, tmp_path):
    from emu.codec import read_capture

    cap = tmp_path / "caps" / "ring.pcap"
    cap.parent.mkdir()
    assert main(["replay", str(files["ring"]), "--out", str(tmp_path / "r"), "--capture", str(cap)]) == 0
    assert cap.is_file() and not (tmp_path / "r" / "ring.pcap").exists()
    frames = sum(len(b) for b in read_capture(cap))
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert frames == s["frames"]  # one record per frame-hop, none lost without loss
    assert sorted(p.name for p in cap.parent.iterdir()) == ["ring.pcap"]  # no partial file left
    # without a results folder too
    cap2 = tmp_path / "caps" / "nores.pcapng"
    assert main(["replay", str(files["ring"]), "--no-results", "--capture", str(cap2)]) == 0
    assert sum(len(b) for b in read_capture(cap2)) == frames
    # a relative name still goes into the results folder
    assert main(["replay", str(files["ring"]), "--out", str(tmp_path / "r2"), "--capture", "rel.pcap"]) == 0
    assert (tmp_path / "r2" / "rel.pcap").is_file()


@pytest.mark.parametrize("args, needle", [
    (["--no-results", "--capture", "rel.pcap"], "relative name"),
    (["--no-results", "--capture", "/nonexistent-dir/x.pcap"], "no folder"),
])
def test_capture_paths_that_cannot_work_fail_in_one_line(files, tmp_path, args, needle):
    p = subprocess.run([sys.executable, "-m", "emu", "replay", str(files["ring"]), *args], capture_output=True,
                       text=True, cwd=tmp_path)
    assert p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_failed_run_leaves_no_capture(files, tmp_path):
    with pytest.raises(Exception):
        emu.replay(str(files["ring"]), capture=tmp_path / "x.pcap", capture_filter=["op=nonsense"])
    with pytest.raises(Exception):
        emu.replay(str(files["ring"]), capture=tmp_path / "x.pcap", topology="torus:3x3")
    assert list(tmp_path.iterdir()) == []


def test_sweep_worker_rows_come_from_the_same_replay(files):
    from emu.sweep.spec import PARAMS
    from emu.sweep.worker import run_point

    point = dict(PARAMS) | {"scheme": "mars", "seq": 1024, "nodes": 4, "chunk": 256, "decode_tokens": 2, "seed": 0,
                            "loss": 0.0, "set": ()}
    row = run_point(point)
    r = emu.replay(str(files["mars"]))
    assert row["status"] == "ok"
    for k in ("ttft_s", "wire_bytes", "kv_bytes", "frames", "peak_node_kv_bytes"):
        assert row[k] == r.summary[k], k


def test_shipped_traces_by_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no traces/ here
    assert main(["trace", "list", "--json"]) == 0
    shipped = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert set(shipped) >= {"mars_16k", "ring_16k", "zigzag_16k", "pd_16k"}
    assert shipped["mars_16k"]["scheme"] == "mars" and shipped["pd_16k"]["nodes"] == 16
    assert load_trace(shipped["pd_16k"]["path"]).meta == emu.load_trace("pd_16k").meta == emu.load_trace("pd_16k.json").meta
    assert main(["trace", "show", "ring_16k", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["scheme"] == "ring" and s["ops"] == 255337  # traces/README.md
    p = subprocess.run([sys.executable, "-m", "emu", "replay", "no_such_trace", "--no-results"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert p.returncode == 2 and "shipped" in p.stderr and "mars_16k" in p.stderr


@pytest.mark.parametrize("call", [
    lambda f: emu.load(f["ring"]),                       # a trace, not a results folder
    lambda f: emu.save_trace(emu.load_trace(f["ring"]), ""),
    lambda f: emu.save_trace(emu.load_trace(f["ring"]), f["dir"]),
    lambda f: emu.replay(f["ring"], fail=b"link 0-1 down at 1ms"),
    lambda f: emu.replay(f["ring"], fail=[None]),
    lambda f: emu.replay(f["ring"], capture_filter=[1]),
    lambda f: emu.replay(f["ring"], reliable=[]),
    lambda f: emu.replay(f["ring"], seed="7"),
    lambda f: emu.replay(f["ring"], seed=-1),
    lambda f: emu.replay(f["ring"], loss="0.5"),
    lambda f: emu.replay(f["ring"], trains="false"),
    lambda f: emu.replay(f["ring"], functional=2),
    lambda f: emu.trace("ring", **{**SMALL, "seq": "1e3"}),
], ids=["load-trace", "save-empty", "save-folder", "fail-bytes", "fail-none", "filter-int", "reliable-list",
        "seed-text", "seed-negative", "loss-text", "trains-text", "functional-int", "seq-text"])
def test_bad_arguments_raise_config_error_and_write_nothing(files, call):
    before = sorted(files["dir"].rglob("*"))
    with pytest.raises(ConfigError) as e:
        call(files)
    assert len(str(e.value).splitlines()) == 1
    assert sorted(files["dir"].rglob("*")) == before


@pytest.mark.parametrize("kwargs, argv", [
    (dict(seed=-1), ["--seed", "-1"]), (dict(loss=2), ["--loss", "2"]), (dict(snaplen=10), ["--snaplen", "10"]),
    (dict(detect="-1us"), ["--detect=-1us"]), (dict(reliable="maybe"), None),
    (dict(fail="link 0-1 down at 1ms up at 1ms"), ["--fail", "link 0-1 down at 1ms up at 1ms"]),
])
def test_the_api_raises_the_line_the_cli_prints(files, capsys, kwargs, argv):
    with pytest.raises(ConfigError) as e:
        emu.replay(str(files["ring"]), **kwargs)
    (name,) = kwargs
    msg = str(e.value)
    if argv is None:  # argparse refuses it first; the API names the same choices
        assert msg.startswith(f"{name} 'maybe': one of auto, on, off")
        return
    assert main(["replay", str(files["ring"]), "--no-results", *argv]) == 2
    cli = msg.replace(name, "--" + name, 1) if msg.startswith(name) else msg
    assert capsys.readouterr().err == f"emu replay: error: {cli}\n"
