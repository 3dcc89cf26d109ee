"""Progress on stderr: the replay's bar (wall time, ETA, ending at 100 %), its JSON lines, and
emu trace's progress while it builds and writes a trace."""

import json

import pytest

import emu
from emu.cli import main
from emu.errors import ConfigError
from waits import HANG_S

RING = dict(nodes=4, seq=1024, chunk=256)  # 4033 ops: not a multiple of the 2000-op report step


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("progress") / "ring.json"
    emu.save_trace(emu.trace("ring", **RING), path)
    return path


def json_lines(err: str) -> list[dict]:
    lines = err.splitlines()
    assert lines, "no progress"
    return [json.loads(line) for line in lines]  # every line is one JSON object


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_the_replay_bar_shows_wall_time_and_eta_and_ends_at_100_percent(trace_file, engine, capsys):
    run = emu.replay(trace_file, progress=True, engine=engine)
    err = capsys.readouterr().err
    drawings = [d.strip() for d in err.split("\r") if d.strip()]
    assert err.endswith("\n") and err.count("\n") == 1  # one line, redrawn, then ended
    assert drawings[-1].startswith("replay [" + "#" * 30 + "] 100.0%  simulated")
    assert f"simulated {run.summary['sim_end_s']:9.4f} s  wall " in drawings[-1]
    assert all("  wall " in d for d in drawings)
    assert any("  ETA " in d for d in drawings[1:-1])  # between the first report and the end


def test_the_dashboard_follows_the_json_stream(trace_file, capsys):
    from dashboard.whatif import progress_row  # the what-if page follows a replay by these lines

    run = emu.replay(trace_file, progress="json")
    found = [progress_row(line.encode()) for line in capsys.readouterr().err.splitlines()]
    assert found[0] == (0.0, 0.0) and found[-1] == (1.0, pytest.approx(run.summary["sim_end_s"]))
    assert all(0 < p < 1 for p, _ in found[1:-1])
    assert progress_row(b"emu replay: error: no such trace") is None and progress_row(b"[" * 200_000) is None


def test_emu_replay_progress_json(trace_file, capsys):
    assert main(["replay", str(trace_file), "--no-results", "--progress", "json"]) == 0
    rows = json_lines(capsys.readouterr().err)
    n = emu.load_trace(trace_file).n_ops
    assert rows[0]["ops_done"] == 0 and rows[-1]["ops_done"] == rows[-1]["ops_total"] == n
    assert [r["end"] for r in rows] == [False] * (len(rows) - 1) + [True]
    assert 3 <= len(rows) <= 2 + n // 2000  # the start, about every 2000 ops, the end
    for r in rows:
        assert set(r) == {"progress", "ops_done", "ops_total", "simulated_s", "wall_s", "eta_s", "end"}
        assert r["progress"] == "replay" and r["ops_total"] == n
    for a, b in zip(rows, rows[1:]):
        assert a["ops_done"] <= b["ops_done"] and a["simulated_s"] <= b["simulated_s"] and a["wall_s"] <= b["wall_s"]
    assert rows[-1]["eta_s"] is None


def test_the_api_takes_a_progress_mode(trace_file, capsys):
    emu.replay(trace_file, progress="json")
    assert json_lines(capsys.readouterr().err)[-1]["end"] is True
    emu.replay(trace_file)
    assert capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match=r"^progress 'fast': True or \"bar\""):
        emu.replay(trace_file, progress="fast")


def test_emu_trace_progress_json(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["trace", "ring", *(f"--{k}={v}" for k, v in RING.items()), "-o", str(out), "--progress", "json"]) == 0
    rows = json_lines(capsys.readouterr().err)
    n = emu.load_trace(out).n_ops
    assert [r["phase"] for r in rows[-2:]] == ["writing", "written"] and rows[-1]["end"] is True
    assert rows[-1]["ops_done"] == n and {r["phase"] for r in rows[:-2]} <= {"generating"}
    assert all(r["progress"] == "trace ring" and r["wall_s"] >= 0 for r in rows)


def test_emu_trace_progress_bar(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["trace", "ring", *(f"--{k}={v}" for k, v in RING.items()), "-o", str(out), "--progress"]) == 0
    err = capsys.readouterr().err
    n = emu.load_trace(out).n_ops
    assert err.endswith("\n") and err.count("\n") == 1
    assert err.split("\r")[-1].strip().startswith(f"trace ring: written {n:,} ops  wall ")


def test_bad_input_with_progress_is_one_line(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["trace", "ring", "--set", "hw.link_rate=fast", "-o", str(out), "--progress", "json"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("emu trace: error: ") and not out.exists()


def test_in_a_notebook_the_bar_ends_at_100_percent(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    code = f"import emu\nemu.replay(emu.trace('ring', **{RING!r}), progress=True).ttft_s"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    NotebookClient(nb, timeout=HANG_S, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    err = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.get("name") == "stderr")
    last = err.rstrip("\n").split("\r")[-1]  # what the notebook shows of a redrawn line
    assert "100.0%  simulated" in last, repr(err)


def test_a_functional_replay_reports_its_checks_after_the_loop(capsys):
    """On the compiled loop the functional checks run after every op has finished: the progress
    says so (phase "functional checks", its own count rising to its total) before the last line."""
    trace = emu.trace("mars", seq=1024, nodes=4, chunk=256, decode_tokens=2)
    emu.replay(trace, functional=True, engine="compiled", progress="json")
    rows = json_lines(capsys.readouterr().err)
    checks = [r for r in rows if r.get("phase") == "functional checks"]
    assert checks and rows[-1]["end"] is True and "phase" not in rows[-1]
    assert rows.index(checks[0]) > max(i for i, r in enumerate(rows) if "phase" not in r and not r["end"])
    assert all(r["ops_done"] == r["ops_total"] == trace.n_ops for r in checks)  # every op finished first
    steps = [r["phase_done"] for r in checks]
    assert steps[0] == 0 and steps[-1] == checks[-1]["phase_total"] > 0 and steps == sorted(steps)
    emu.replay(trace, functional=True, engine="compiled", progress=True)
    last = [d for d in capsys.readouterr().err.split("\r") if "functional checks" in d][-1]
    assert f"functional checks {checks[-1]['phase_total']:,}/{checks[-1]['phase_total']:,}" in last
