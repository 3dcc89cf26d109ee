"""examples/quickstart.ipynb runs top to bottom in a fresh kernel, and its figures show the runs' numbers."""

import base64
import json
from pathlib import Path

import nbformat
import numpy as np
from nbclient import NotebookClient

import emu
from waits import HANG_S

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"
SETUP = dict(nodes=8, seq=4096, chunk=512, decode_tokens=4)  # the notebook's SETUP


def values(v) -> list:
    """A figure's array: a plain list, or plotly's typed-array form {"dtype", "bdata"} (base64)."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v)


def figures(nb) -> dict[str, dict]:
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            fig = o.get("data", {}).get("application/vnd.plotly.v1+json")
            if fig is not None:
                fig = json.loads(fig) if isinstance(fig, str) else fig
                out[fig["layout"]["title"]["text"]] = fig
    return out


def test_quickstart_runs_and_plots_the_runs(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"  # the kernel's temporary folder: the notebook must leave no run in it
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # shipped without outputs
    NotebookClient(nb, timeout=HANG_S, startup_timeout=HANG_S, iopub_timeout=HANG_S, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    figs = figures(nb)
    assert set(figs) == {"Time to first token", "KV memory per board"}
    runs = {s: emu.replay(emu.trace(s, **SETUP)) for s in ("mars", "ring")}
    bar = figs["Time to first token"]["data"][0]
    assert values(bar["x"]) == ["mars", "ring"]
    assert values(bar["y"]) == [runs["mars"].ttft_s, runs["ring"].ttft_s]
    kv = figs["KV memory per board"]["data"]
    assert len(kv) == 2 * SETUP["nodes"]  # one line per board, per run
    peaks = {"x": [], "x2": []}
    for t in kv:
        x, y = values(t["x"]), values(t["y"])
        assert len(x) == len(y) > 1 and x == sorted(x)
        peaks[t.get("xaxis", "x")].append(max(y))
    assert max(peaks["x"]) * 2**20 == runs["mars"].peak_node_kv_bytes
    assert max(peaks["x2"]) * 2**20 == runs["ring"].peak_node_kv_bytes
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "same TTFT: True" in text
    assert not [p for p in scratch.rglob("*") if p.name in ("summary.json", "timeline.json")]
