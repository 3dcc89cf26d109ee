"""`emu tune`: each scheme's best configuration by pruned replays, its compute bound, and
MARS's attribution. Small clusters (4-8 boards, 1-2 layers): simulated times only."""

import json

import pytest

from emu.cli import main
from emu.tuning import Cluster, _chunks, lower_bound, tune
from emu.workload import analytic
from emu.workload.generate import Params, generate

SMALL = Cluster(seq=1024, nodes=4, overrides=["model.layers=2"])


@pytest.fixture(scope="module")
def result():
    return tune(SMALL, ["mars", "zigzag", "ring"])


def test_each_scheme_at_its_best(result):
    for r in result["schemes"]:
        done = [c for c in r["candidates"] if "ttft_s" in c]
        assert r["best"]["ttft_s"] == min(c["ttft_s"] for c in done)
        # a bound is a TTFT no replay beats, and the best sits at or above its own
        assert all(c["ttft_s"] >= c["bound_s"] * (1 - 1e-9) for c in done)
        assert r["best"]["ttft_s"] >= r["compute_bound_s"] * (1 - 1e-9)
        assert r["over_bound"] == pytest.approx(r["best"]["ttft_s"] / r["compute_bound_s"] - 1)
        # pruned: bound no better than the best found
        assert all(c["bound_s"] >= r["best"]["ttft_s"] for c in r["candidates"] if c.get("pruned"))
    assert result["pruned"] > 0 and result["replayed"] == sum(
        "ttft_s" in c for r in result["schemes"] for c in r["candidates"]) + 0
    by = {r["scheme"]: r for r in result["schemes"]}
    opts = [c["options"] for c in by["zigzag"]["candidates"]]
    assert {"chunk": "whole"} in opts and {"chunk": 256, "ring_lookahead": True, "ring_forward": "on-arrival"} in opts
    assert any("alpha" in c["options"] for c in by["mars"]["candidates"])  # the second round


def test_chunks_share_one_granule():
    assert _chunks(Cluster(seq=16384, nodes=16)) == ["whole", 8192, 4096, 2048, 1024]
    assert all(c % 64 == 0 for c in _chunks(Cluster(seq=16000, nodes=32))[1:])


def test_one_layer_bound_scales_to_the_model():
    p = SMALL.params("zigzag", chunk=256)
    full = generate(Params(**p))
    assert lower_bound(p)[0] == pytest.approx(analytic.compute_bound(full), rel=1e-9)
    assert analytic.balanced_bound(full) <= analytic.compute_bound(full)


def test_attribution(result):
    att = result["attribution"]
    assert [a["variant"] for a in att] == ["MARS (best)", "replication off (alpha 0)", "lookahead off", "both off"]
    base = att[0]["options"]
    assert att[1]["options"] == {**base, "alpha": 0.0} and att[3]["options"]["mars_lookahead"] is False
    assert all(a["ttft_s"] > 0 for a in att)
    assert att[2]["ttft_s"] > att[0]["ttft_s"]  # pushing after QKV exposes the transfer


def test_cli_table_json_and_errors(capsys):
    argv = ["tune", "--seq", "512", "--nodes", "8", "--set", "model.layers=1", "--schemes", "zigzag,ulysses",
            "--no-attribution", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "zigzag" in out and "8 boards is not a Ulysses degree the model allows (1, 2, 3, 4, 6, 12)" in out
    assert main([*argv, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["scheme"] for r in res["schemes"]] == ["zigzag", "ulysses"] and "attribution" not in res
    assert main(["tune", "--schemes", "mars,rings", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown scheme 'rings'" in err
    assert main(["tune", "--seq", "512", "--nodes", "4", "--topology", "torus:9x9", "--schemes", "zigzag", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("emu tune: error:") and "Traceback" not in err


def test_python_api_exports_tune():
    import emu
    from emu import tuning

    assert emu.tune is tuning.tune and "tune" in emu.__all__
