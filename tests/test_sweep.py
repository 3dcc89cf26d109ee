"""emu sweep: sweep files, the local process pool and a real Dask cluster give the same
dataset, resume, failures recorded, interrupted sweeps lose nothing finished."""

import concurrent.futures as cf
import contextlib
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from emu.cli import main
from emu.sweep import dataset, runner, spec
from emu.sweep.worker import run_point
from tiny_sweep import GRID, TINY, write
from waits import HANG_S

ROOT = Path(__file__).resolve().parents[1]

def _frame(out):
    df, meta = dataset.read(out)
    return df.drop(columns=list(dataset.NONDETERMINISTIC)), meta


def _no_executor():
    raise AssertionError("an executor was started though every point is done")


@contextlib.contextmanager
def _threads():
    with cf.ThreadPoolExecutor(2) as ex:
        yield ex


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The tiny sweep on the local process pool (two spawned workers), through the CLI."""
    d = tmp_path_factory.mktemp("local")
    f = write(d, TINY)
    rc = main(["sweep", str(f), "--out", str(d / "out"), "--workers", "2"])
    return f, d / "out", rc


# ------------------------------------------------------------------------- running

def test_local_pool_records_failures_and_completes_the_rest(local):
    f, out, rc = local
    assert rc == 1  # two points failed
    df, meta = _frame(out)
    assert meta["name"] == "tiny" and meta["axes"] == ["scheme", "seq", "kv_budget", "topology"] and meta["points"] == 6
    assert list(df["index"]) == list(range(6))
    assert list(df["status"]) == ["ok"] * 4 + ["failed"] * 2
    ok = df[df.status == "ok"]
    assert ok.error.isna().all() and (ok.ttft_s > 0).all() and (ok.wire_bytes > 0).all()
    assert ok.final_layout_owner_only.all() and (ok.incomplete_ops == 0).all()
    assert set(ok.topology_name) == {"full2"} and (ok.link_rate_bps == 10**9).all()
    mars = ok[ok.scheme == "mars"]
    assert (mars.r_max == 2).all() and (mars.replica_factor_peak == 2).all()
    assert (ok[ok.scheme == "ring"].r_max == 1).all()
    budget, topo = df.iloc[4], df.iloc[5]
    assert budget.kv_budget == "1KiB" and re.match(r"ConfigError: kv budget 1024 B .* below the owner", budget.error)
    assert topo.topology == "torus:3x3" and "9 boards" in topo.error and pd.isna(topo.ttft_s)
    # one whole part per point, no temporary file left
    parts = sorted(p.name for p in (out / "parts").iterdir())
    assert parts == sorted(f"{pid}.parquet" for pid in df.point)
    assert not [p for p in out.rglob("*") if p.name.endswith(".part")]
    # every part has the dataset's schema, so parts/ is a dataset too
    assert len(pd.read_parquet(out / "parts")) == 6


def test_rerun_does_no_work_for_finished_points(local, capsys):
    f, out, _ = local
    before = {p.name: p.stat().st_mtime_ns for p in (out / "parts").iterdir()}

    rep = runner.run(spec.load(f), out, make_executor=_no_executor)
    assert rep.ran == 0 and rep.earlier == 6 and len(rep.rows) == 6
    assert {p.name: p.stat().st_mtime_ns for p in (out / "parts").iterdir()} == before
    assert main(["sweep", str(f), "--out", str(out)]) == 1
    assert "0 run now, 6 done before; 4 ok, 0 incomplete, 2 failed" in capsys.readouterr().out


def test_reordered_grid_reuses_every_point(local, tmp_path):
    f, out, _ = local
    import shutil
    out2 = tmp_path / "out"
    shutil.copytree(out, out2)
    g = write(tmp_path, TINY.replace('scheme = ["mars", "ring"]', 'scheme = ["ring", "mars"]'))
    rep = runner.run(spec.load(g), out2, make_executor=_no_executor)
    assert rep.ran == 0 and [r["index"] for r in rep.rows] == list(range(6))
    assert [r["scheme"] for r in rep.rows][:4] == ["ring", "ring", "mars", "mars"]


def test_resume_runs_only_the_missing_points(local, tmp_path):
    f, out, _ = local
    sweep = spec.load(f)
    # a copy of the finished sweep with two parts gone (as if stopped before they ended)
    import shutil
    out2 = tmp_path / "out"
    shutil.copytree(out, out2)
    for i in (1, 3):
        dataset.part_path(out2, sweep.ids()[i]).unlink()
    rep = runner.run(sweep, out2, make_executor=_threads)
    assert rep.ran == 2 and rep.earlier == 4
    pd.testing.assert_frame_equal(_frame(out2)[0], _frame(out)[0])
    # --retry-failed runs the failed ones again (and they fail again)
    rep = runner.run(sweep, out2, make_executor=_threads, retry_failed=True)
    assert rep.ran == 2 and rep.count("failed") == 2


def test_dask_cluster_gives_the_same_dataset(local, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    f, out, _ = local
    monkeypatch.setattr(runner, "CONNECT_TIMEOUT_S", HANG_S)  # a loaded machine is slow to answer, not absent
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        rc = main(["sweep", str(f), "--out", str(tmp_path / "dask"), "--scheduler", cluster.scheduler_address])
        assert rc == 1
        # the rows were computed on the cluster's workers, not here
        with distributed.Client(cluster.scheduler_address) as client:
            assert len(client.scheduler_info()["workers"]) == 2
    a, ma = _frame(out)
    b, mb = _frame(tmp_path / "dask")
    pd.testing.assert_frame_equal(a, b)
    assert ma == mb


def test_interrupted_sweep_keeps_finished_points(tmp_path, monkeypatch):
    f = write(tmp_path, TINY)
    sweep = spec.load(f)
    out = tmp_path / "out"
    real = dataset.write_part
    calls = []

    def write_then_stop(o, row):
        if calls:
            raise KeyboardInterrupt
        calls.append(row["point"])
        return real(o, row)

    monkeypatch.setattr(dataset, "write_part", write_then_stop)
    with pytest.raises(KeyboardInterrupt):
        runner.run(sweep, out, make_executor=_threads)
    monkeypatch.setattr(dataset, "write_part", real)
    assert [p.stem for p in (out / "parts").iterdir()] == calls
    assert list(pq.read_table(out / "results.parquet").column("point").to_pylist()) == calls
    assert not [p for p in out.rglob("*") if p.name.endswith(".part")]
    rep = runner.run(sweep, out, make_executor=_threads)
    assert rep.ran == 5 and len(rep.rows) == 6


def test_a_signal_between_a_parts_temporary_file_and_its_cleanup_leaves_nothing(tmp_path, monkeypatch):
    # The signal lands after the temporary file exists and before the code that removes it on
    # error runs: the sweep removes what this process staged as it stops.
    from emu.outputs import Terminated, staged_prefix

    sweep = spec.load(write(tmp_path, TINY))
    out = tmp_path / "out"
    real = dataset.write_part
    calls = []

    def staged_then_signal(o, row):
        if calls:
            path = dataset.part_path(o, row["point"])
            (path.parent / (staged_prefix(path.name) + "abc123.part")).write_bytes(b"PAR1")
            raise Terminated(15)
        calls.append(row["point"])
        return real(o, row)

    monkeypatch.setattr(dataset, "write_part", staged_then_signal)
    with pytest.raises(Terminated):
        runner.run(sweep, out, make_executor=_threads)
    assert [p.stem for p in (out / "parts").iterdir()] == calls
    assert not [p for p in out.rglob("*") if p.name.endswith(".part")]


def test_an_interrupted_sweep_leaves_another_runs_staged_files_alone(tmp_path, monkeypatch):
    # What the sweep removes as it stops is its own: a live process's staged part stays.
    import os

    from emu.outputs import owner_token

    sweep = spec.load(write(tmp_path, TINY))
    out = tmp_path / "out"
    other = out / "parts" / f".p.parquet.{owner_token(os.getppid())}.abc123.part"  # a live process's

    def stop(o, row):
        other.parent.mkdir(parents=True, exist_ok=True)
        other.write_bytes(b"PAR1")
        raise KeyboardInterrupt

    monkeypatch.setattr(dataset, "write_part", stop)
    with pytest.raises(KeyboardInterrupt):
        runner.run(sweep, out, make_executor=_threads)
    assert other.read_bytes() == b"PAR1"


class _Dead(cf.Executor):
    """An executor whose worker dies on every point (as when a process is killed)."""

    def submit(self, fn, *args, **kwargs):
        fut = cf.Future()
        fut.set_exception(cf.process.BrokenProcessPool("a child process terminated abruptly"))
        return fut


def test_lost_points_are_not_recorded_and_rerun(tmp_path):
    f = write(tmp_path, TINY)
    sweep = spec.load(f)
    rep = runner.run(sweep, tmp_path / "out", make_executor=lambda: contextlib.nullcontext(_Dead()))
    assert len(rep.lost) == 6 and rep.ran == 0 and not rep.ok and "BrokenProcessPool" in rep.lost[0]
    assert not (tmp_path / "out" / "parts").exists() and rep.rows == []
    rep = runner.run(sweep, tmp_path / "out", make_executor=_threads)
    assert rep.ran == 6


def test_keep_runs_writes_each_points_results_folder(tmp_path):
    f = write(tmp_path, GRID.replace('seq = [256, 512]', 'seq = [256]'))
    out = tmp_path / "out"
    rep = runner.run(spec.load(f), out, keep_runs=True, make_executor=_threads)
    assert rep.ok and len(rep.rows) == 2
    for row in rep.rows:
        assert row["run_dir"] == f"runs/{row['scheme']}-{row['point']}"
        run = out / row["run_dir"]
        assert {"summary.json", "ops.parquet", "links.parquet", "nodes.parquet"} <= {p.name for p in run.iterdir()}


def test_worker_row_is_small_and_matches_columns():
    pt = spec.normalize({**spec.PARAMS, "scheme": "mars", "seq": 256, "nodes": 2, "chunk": 128})
    row = run_point(pt, "x", 0)
    assert row["status"] == "ok", row["error"]
    assert set(row) <= set(dataset.KNOWN)  # no column the docs do not list
    assert all(v is None or isinstance(v, (str, int, float, bool)) for v in row.values())


# ------------------------------------------------------------------------- sweep files

def test_grid_include_exclude_and_duplicates(tmp_path):
    s = spec.load(write(tmp_path, """
[sweep]
name = "x"
[fixed]
nodes = 4
[grid]
scheme = ["mars", "ring", "pd"]
seq = [1024, 2048]
pd_mode = ["bulk", "stream"]
hw.link_rate = ["1Gbps", "10Gbps"]
[[exclude]]
scheme = "ring"
seq = [2048]
[[include]]
scheme = "full"
seq = 512
set = ["model.layers=2"]
"""))
    # 3 x 2 x 2 x 2 = 24; ring at 2048: -4; mars and ring ignore pd_mode: -6 (merged); +1
    assert len(s.points) == 15 and s.duplicates == 6
    assert s.axes == ["scheme", "seq", "pd_mode", "hw.link_rate", "overrides"]
    assert {p["pd_mode"] for p in s.points if p["scheme"] != "pd"} == {None}
    assert s.points[-1]["set"] == ["model.layers=2"] and spec.overrides(s.points[-1]) == ["model.layers=2"]
    assert spec.overrides(s.points[0]) == ["hw.link_rate=1Gbps"]
    # a point's id depends on its parameters only, not on the grid around it
    s2 = spec.parse({"sweep": {"name": "y"}, "fixed": {"nodes": 4, "seq": 1024, "scheme": "mars", "hw.link_rate": "1Gbps"}})
    assert s2.ids()[0] == s.ids()[0]


BAD = [
    ("[sweep]\nname = 'x'\n[grid]\nschemes = ['mars']\n", "grid.schemes: unknown parameter; did you mean 'scheme'?"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\nnodes = [4, 'eight']\n", "grid.nodes[1]: expected an integer >= 2, got 'eight'"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\nnodes = [1]\n", "grid.nodes[0]: must be >= 2, got 1"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars', 'ringg']\n", "grid.scheme[1]: unknown scheme 'ringg'"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = []\n", "grid.scheme: empty list"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = 'mars'\n", "grid.scheme: expected a list of values"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\nseq = [1024, 1024]\n", "grid.seq[1]: 1024 appears twice"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\nchunk = ['big']\n", "grid.chunk[0]: expected an integer >= 1 or \"auto\""),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\nloss = [1.5]\n", "grid.loss[0]: must be in [0.0, 1.0]"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\nlink_rate = ['10 furlongs']\n", "grid.link_rate[0]"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\nmodel = ['gpt-9']\n", "grid.model[0]: model profile 'gpt-9': unknown"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\nset = [['hw.warp=9']]\n", "grid.set[0][0]: override 'hw.warp=9': unknown field"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\n'hw.warp' = [1]\n", "grid.hw.warp: unknown profile field 'hw.warp'"),
    ("[sweep]\nname = 'x'\n[fixed]\nseq = 1024\n[grid]\nscheme = ['mars']\nseq = [1]\n", "grid.seq: also given in [fixed]"),
    ("[sweep]\nname = 'x'\n[fixed]\nseq = [1024]\nscheme = 'mars'\n", "fixed.seq: expected one value, got a list"),
    ("[sweep]\nname = 'x'\n[grid]\nseq = [1024]\n", "scheme: missing"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\n[[exclude]]\nseq = 1024\n", "exclude[0].seq: not a [grid] parameter"),
    ("[sweep]\nname = 'x'\n[grid]\nscheme = ['mars']\n[[exclude]]\nscheme = 'mars'\n", "grid: no points left"),
    ("[sweep]\nname = 'x y'\n[grid]\nscheme = ['mars']\n", "sweep.name: expected a folder-safe name"),
    ("[grid]\nscheme = ['mars']\n", "sweep: missing the [sweep] table"),
    ("[sweep]\nname = 'x'\n[grids]\nscheme = ['mars']\n", "grids: unknown table; did you mean [grid]?"),
    ("[sweep]\nname = 'x'\n[grid\nscheme = ['mars']\n", "invalid TOML"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_malformed_sweep_file_is_one_line_exit_2_nothing_written(tmp_path, capsys, text, message):
    f = write(tmp_path, text)
    out = tmp_path / "out"
    assert main(["sweep", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"emu sweep: error: {f}: ") and message in err, err
    assert not out.exists()


def test_bad_options(tmp_path, capsys, monkeypatch):
    f = write(tmp_path, TINY)
    assert main(["sweep", str(f), "--workers", "0", "--out", str(tmp_path / "o")]) == 2
    assert main(["sweep", str(f), "--workers", "2", "--scheduler", "tcp://127.0.0.1:1", "--out", str(tmp_path / "o")]) == 2
    monkeypatch.setattr(runner, "CONNECT_TIMEOUT_S", 1)
    assert main(["sweep", str(f), "--scheduler", "tcp://127.0.0.1:1", "--out", str(tmp_path / "o")]) == 2
    assert main(["sweep", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("emu sweep: error: ") for line in err), err
    assert "cannot connect" in err[2] and "no such sweep file" in err[3]
    # an output folder holding another sweep is refused before anything runs
    other = tmp_path / "other"
    other.mkdir()
    (other / "sweep.json").write_text('{"name": "another"}')
    assert main(["sweep", str(f), "--out", str(other)]) == 2
    assert "holds sweep 'another'" in capsys.readouterr().err


def test_dry_run_lists_points_and_writes_nothing(tmp_path, capsys):
    f = write(tmp_path, TINY)
    assert main(["sweep", str(f), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "sweep tiny: 6 points" in out and "6 to run, 0 done" in out
    assert len([line for line in out.splitlines() if re.match(r"^\d+\s+[0-9a-f]{12}\s+todo\s", line)]) == 6
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------- shipped sweeps and docs

SHIPPED = {"quick": 16, "ttft_vs_prompt": 24, "nodes_16k": 27, "chunk_mars": 5, "mars_memory": 6}


def test_shipped_sweeps_load():
    files = {p.stem: p for p in (ROOT / "sweeps").glob("*.toml")}
    assert set(files) == set(SHIPPED)
    for name, n in SHIPPED.items():
        s = spec.load(files[name])
        assert s.name == name and len(s.points) == n and s.description
        assert all(p["hw"] == "kr260" and p["kv_budget"] is None and p["link_rate"] is None for p in s.points)
    assert spec.resolve("quick").resolve() == (ROOT / "sweeps" / "quick.toml").resolve()  # package data: a link to sweeps/
    quick = spec.load(files["quick"])
    assert max(p["seq"] for p in quick.points) <= 2048 and max(p["nodes"] for p in quick.points) <= 8
    six = {"mars", "ring", "zigzag", "pd", "ulysses", "usp"}
    # Ulysses only where the board count divides the query heads (16 does not: USP stands for it)
    assert {p["scheme"] for p in spec.load(files["ttft_vs_prompt"]).points} == six - {"ulysses"}
    assert {p["scheme"] for p in spec.load(files["nodes_16k"]).points} == six
    assert sorted({p["nodes"] for p in spec.load(files["nodes_16k"]).points}) == [2, 4, 8, 16]


def test_docs_list_every_column():
    from emu.net.kernel import CAUSE_NAMES

    assert [c for c, _ in dataset.COLUMNS if c.startswith("dropped_") and c != "dropped_frames"] == \
        [f"dropped_{c}" for c in CAUSE_NAMES]
    doc = (ROOT / "docs" / "sweeps.md").read_text()
    missing = [c for c, _ in dataset.COLUMNS if f"`{c}`" not in doc]
    assert not missing, missing
    for name in SHIPPED:
        assert f"sweeps/{name}.toml" in doc
