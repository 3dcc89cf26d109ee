"""Comparing runs that share a name, as a notebook does: every run keeps its column, labelled by
what differs, and emu.table lists many runs with their parameters."""

import pytest

import emu
from emu.cli import main
from emu.errors import ConfigError

SMALL = dict(nodes=4, chunk=256)


@pytest.fixture(scope="module")
def runs():
    mars_1k = emu.replay(emu.trace("mars", seq=1024, **SMALL))
    mars_2k = emu.replay(emu.trace("mars", seq=2048, **SMALL))
    ring_1k = emu.replay(emu.trace("ring", seq=1024, **SMALL))
    trace = emu.trace("mars", seq=1024, **SMALL)
    slow = emu.replay(trace, set={"hw.link_rate": "1Gbps"})
    fast = emu.replay(trace, set={"hw.link_rate": "10Gbps"})
    return mars_1k, mars_2k, ring_1k, slow, fast


def test_same_named_runs_each_keep_a_labelled_column(runs):
    mars_1k, mars_2k, ring_1k, _, _ = runs
    assert mars_1k.name == mars_2k.name == "mars"
    c = mars_1k.compare(mars_2k, ring_1k)
    f = c.frame
    assert list(f.columns) == ["mars seq=1024", "mars seq=2048", "ring seq=1024"]
    assert [f.loc["TTFT s", col] for col in f.columns] == [mars_1k.ttft_s, mars_2k.ttft_s, ring_1k.ttft_s]
    assert f.loc["prompt tokens"].tolist() == [1024, 2048, 1024]
    html = c._repr_html_()
    assert all(label in html for label in f.columns)
    header = str(c).splitlines()[0]
    assert "mars seq=1024" in header and "mars seq=2048" in header


def test_one_trace_at_two_link_rates(runs):
    _, _, _, slow, fast = runs
    f = slow.compare(fast).frame
    assert list(f.columns) == ["mars hw.link_rate=1Gbps", "mars hw.link_rate=10Gbps"]
    assert f.loc["overrides"].tolist() == ["hw.link_rate=1Gbps", "hw.link_rate=10Gbps"]
    assert f.loc["TTFT s", "mars hw.link_rate=10Gbps"] == fast.ttft_s < slow.ttft_s


def test_identical_runs_are_numbered(runs):
    mars_1k = runs[0]
    assert list(mars_1k.compare(mars_1k, mars_1k).frame.columns) == ["mars", "mars #2", "mars #3"]


def test_table_lists_every_run_with_its_parameters(runs, tmp_path):
    t = emu.table(runs)
    assert len(t) == 5 and t.index.is_unique
    assert t.index.tolist() == ["mars seq=1024 no overrides", "mars seq=2048 no overrides",
                                "ring seq=1024 no overrides", "mars seq=1024 hw.link_rate=1Gbps",
                                "mars seq=1024 hw.link_rate=10Gbps"]
    assert t.seq.tolist() == [1024, 2048, 1024, 1024, 1024]
    assert t.scheme.tolist() == ["mars", "mars", "ring", "mars", "mars"]
    assert t.overrides.tolist() == ["", "", "", "hw.link_rate=1Gbps", "hw.link_rate=10Gbps"]
    assert t["TTFT s"].tolist() == [r.ttft_s for r in runs]
    # results folders too
    emu.replay(emu.trace("ring", seq=1024, **SMALL), out=tmp_path / "a")
    t = emu.table([tmp_path / "a", runs[2]])
    assert t.index.tolist() == ["a", "ring"] and t["TTFT s"].tolist() == [runs[2].ttft_s] * 2


@pytest.mark.parametrize("bad", [None, "results/x", 3, [object()]])
def test_table_refuses_what_is_not_runs(bad):
    with pytest.raises(ConfigError, match="results"):
        emu.table(bad)


def test_emu_compare_labels_same_named_folders(runs, tmp_path, capsys):
    for d, rate in (("1g", "1Gbps"), ("10g", "10Gbps")):
        emu.replay(emu.trace("mars", seq=1024, **SMALL), set={"hw.link_rate": rate}, out=tmp_path / d / "m4")
    assert main(["compare", str(tmp_path / "1g" / "m4"), str(tmp_path / "10g" / "m4")]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "m4 hw.link_rate=1Gbps" in header and "m4 hw.link_rate=10Gbps" in header
