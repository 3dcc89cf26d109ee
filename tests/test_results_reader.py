"""One reader of results folders (emu.reader): every command, the Python API and the dashboard
refuse a damaged folder with the same one-line message naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import emu
from emu.errors import ConfigError, EmuError


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reader") / "run"
    emu.replay(emu.trace("mars", nodes=4, seq=512, chunk=128), out=out)
    return out


def _copy(run: Path, tmp_path: Path, name="r") -> Path:
    r = tmp_path / name
    shutil.copytree(run, r)
    return r


def _deep(n=100_000) -> str:
    return "[" * n + "]" * n


def test_the_dashboard_reads_a_nested_summary_as_an_unreadable_run(run, tmp_path):
    from dashboard.data import Registry

    r = _copy(run, tmp_path)
    (r / "summary.json").write_text(_deep())
    got = Registry().add(r)
    assert got.error == "r: summary.json: not valid JSON: nested too deeply"


def test_the_dashboard_reads_a_nested_schedule_as_an_error(run, tmp_path):
    from dashboard.data import Registry, ResultsError

    r = _copy(run, tmp_path)
    (r / "schedule.json").write_text(_deep())
    got = Registry().add(r)
    assert got.error is None
    with pytest.raises(ResultsError, match=r"^r: schedule.json: not valid JSON: nested too deeply$"):
        got.schedule()


@pytest.mark.parametrize("damage,message", [
    (lambda r: (r / "links.parquet").write_bytes((r / "ops.parquet").read_bytes()),
     "links.parquet lacks the columns link, dst, t_start_s"),
    (lambda r: (r / "links.parquet").write_bytes(b""), "links.parquet is not a readable Parquet file"),
])
def test_every_reader_gives_the_same_message(run, tmp_path, damage, message):
    from dashboard.data import Registry, ResultsError
    from emu.export.perfetto import perfetto_trace

    r = _copy(run, tmp_path)
    damage(r)
    with pytest.raises(EmuError) as api:
        emu.load(r).links
    with pytest.raises(EmuError) as export:
        perfetto_trace(r)
    with pytest.raises(ResultsError) as dash:
        Registry().add(r).links()
    assert message in str(api.value)
    assert str(api.value) == str(export.value) == str(dash.value).replace("r:", f"{r}:", 1)


def test_a_summary_of_the_wrong_shape_is_refused_by_the_api(run, tmp_path):
    r = _copy(run, tmp_path)
    s = json.loads((r / "summary.json").read_text())
    (r / "summary.json").write_text(json.dumps(dict(s, busiest_link="0->1")))
    with pytest.raises(EmuError, match=r"summary.json: busiest_link is not an object \{src, dst, utilization\}"):
        emu.load(r)


def test_board_ranges_are_checked_before_they_are_expanded(run, tmp_path):
    r = emu.load(run)
    # the syntax the CLI takes works from Python too
    assert r.perfetto(tmp_path / "a.json", nodes="0-1,3") > 0
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["otherData"]["boards"] == [0, 1, 3]
    for nodes in ("0-100000000", range(10**9), range(10**18, 10**18 + 1), [0, 4], "5"):
        with pytest.raises(ConfigError, match=r"nodes .*: node \d+ is not in the run \(boards 0..3\)"):
            r.perfetto(tmp_path / "b.json", nodes=nodes)
    with pytest.raises(ConfigError, match="names no board"):
        r.perfetto(tmp_path / "b.json", nodes=[])
    assert not (tmp_path / "b.json").exists()


def test_an_output_path_ending_in_a_slash_is_refused(run, tmp_path):
    with pytest.raises(ConfigError, match="is a folder; give a file name"):
        emu.load(run).perfetto(str(tmp_path / "nosuchdir") + "/")
    assert list(tmp_path.iterdir()) == []


def test_a_time_past_what_the_engine_counts_is_refused(run, tmp_path):
    import pandas as pd

    from emu.export.perfetto import perfetto_trace

    r = _copy(run, tmp_path)
    links = pd.read_parquet(r / "links.parquet")
    links.loc[3, "t_end_s"] = 1e300
    links.to_parquet(r / "links.parquet", index=False)
    with pytest.raises(EmuError, match=r"links.parquet: column t_end_s holds 1e\+300 in row 3"):
        perfetto_trace(r)


def test_a_column_subset_is_checked_as_the_whole_table(run, tmp_path):
    """A reader of some columns (the dashboard's views read ops.parquet without its deps lists)
    gets each of them checked as in the whole table; columns the file lacks are left out."""
    import pandas as pd

    from emu.reader import ResultsFolder

    r = _copy(run, tmp_path)
    ops = pd.read_parquet(r / "ops.parquet")
    ops.loc[3, "end_s"] = -1.0
    ops.to_parquet(r / "ops.parquet", index=False)
    with pytest.raises(EmuError, match=r"ops.parquet: column end_s holds -1.0 in row 3"):
        ResultsFolder(r).table("ops.parquet", ["op", "end_s"])
    assert list(ResultsFolder(r).table("ops.parquet", ["op", "kind", "deps", "no_such"]).columns) == ["op", "kind", "deps"]


def test_the_ops_file_keeps_its_column_types_whatever_width_the_trace_holds(run):
    # the trace holds its lists int32 (docs/engine.md, Memory); the file's types stay the
    # ones readers were written against
    import pyarrow.parquet as pq

    schema = pq.read_schema(run / "ops.parquet")
    assert {n: str(schema.field(n).type) for n in ("op", "src", "dsts", "deps")} == {
        "op": "int64", "src": "int64", "dsts": "int64", "deps": "list<element: int64>"}
