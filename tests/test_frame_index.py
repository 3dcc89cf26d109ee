"""The frame index in the user cache heals: an interrupted `emu report` leaves no partial
index, a damaged one is rebuilt, and one that is not this capture's is never trusted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from waits import HANG_S

from dashboard.frames import CaptureIndex

MAX_CAPLEN = 0x40000  # the codec's largest record (emu.codec.pcap.MAX_RECORD)

ROOT = Path(__file__).resolve().parents[1]


def _capture(path: Path, n: int, msg: int = 7) -> Path:
    """A pcap of ``n`` MCF frames (16-byte payloads), 1 us apart."""
    from emu.codec import new_headers
    from emu.codec.pcap import CaptureWriter

    h = new_headers(n, op=1, src_node=0, dst_set=0b10, msg_id=msg, frag_cnt=1, pay_len=16, msg_len=16)
    with CaptureWriter(path) as w:
        w.write_headers(h, np.arange(n, dtype=np.int64) * 1000, np.zeros(16 * n, np.uint8), eth_src=np.zeros(n, np.int64))
    return path


def _ready(cap: Path, cache: Path) -> CaptureIndex:
    ix = CaptureIndex(cap, cache)
    ix.wait()
    assert ix.state == "ready", ix.error
    return ix


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


# ------------------------------------------------------------------------- a damaged index

def test_truncated_index_is_rebuilt(tmp_path):
    cap, cache = _capture(tmp_path / "cap.pcap", 50), tmp_path / "cache"
    first = _ready(cap, cache)
    whole = first.path.read_bytes()
    first.path.write_bytes(whole[: len(whole) // 2])  # cut short (a full disk, a crash while copying)
    again = _ready(cap, cache)
    assert again.build_s is not None and again.n_frames == 50  # built anew, not "index unreadable" forever
    assert _files(cache) == [first.path.name]
    assert again.frame(3)[1] == first.frame(3)[1]


def test_index_that_cannot_be_replaced_is_named(tmp_path):
    cap, cache = _capture(tmp_path / "cap.pcap", 10), tmp_path / "cache"
    path = _ready(cap, cache).path
    path.unlink()
    path.mkdir()  # not a file, and not removable by unlink
    (path / "x").write_text("x")
    ix = CaptureIndex(cap, cache)
    ix.wait()
    assert ix.state == "error"
    assert f"index {path} unusable" in ix.error and "delete it" in ix.error, ix.error


# ------------------------------------------------------------------------- whose index it is

def test_another_captures_index_under_this_name_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    small, big = _capture(tmp_path / "small.pcap", 20), _capture(tmp_path / "big.pcap", 300, msg=9)
    mine = _ready(small, cache).path
    other = _ready(big, cache).path
    os.replace(other, mine)  # the big capture's index planted under the small one's name
    ix = _ready(small, cache)
    assert ix.n_frames == 20 and ix.build_s is not None
    assert ix.frame(0)[0]["msg_id"] == 7
    meta = json.loads(pq.ParquetFile(ix.path).metadata.metadata[b"emu.frames"])
    src = meta["source"]
    assert src["size"] == small.stat().st_size and src["mtime_ns"] == small.stat().st_mtime_ns
    assert len(src["head"]) == 32 and len(src["digest"]) == 32


def test_planted_row_never_reads_past_one_record(tmp_path):
    cap, cache = _capture(tmp_path / "cap.pcap", 40), tmp_path / "cache"
    good = _ready(cap, cache)
    want = good.frame(0)[1]
    t = pq.read_table(good.path)  # the schema keeps the index's record of its capture
    caplen = t["caplen"].to_numpy().copy()
    caplen[0] = 0xFFFFFFFF
    t = t.set_column(t.schema.get_field_index("caplen"), "caplen", [caplen])
    pq.write_table(t, good.path)
    ix = _ready(cap, cache)
    row, data = ix.frame(0)
    assert data == want and len(data) < 200  # not the whole capture
    # and a read is bounded by the file and by the largest record, whatever the row says
    ix._raw_rows = lambda pf, recs: [{"data_off": 40, "caplen": 0xFFFFFFFF}]
    assert len(ix.frame(0)[1]) == min(MAX_CAPLEN, cap.stat().st_size - 40)


# ------------------------------------------------------------------------- interrupted `emu report`

# The child's capture never ends (its batches repeat), so the build is certainly running when
# the signal arrives: the partial index appearing is the readiness signal.
ENDLESS = """
import itertools, sys
import emu.codec
real = emu.codec.read_capture
def endless(path, **kw):
    yield from itertools.cycle(list(real(path, **kw)))
emu.codec.read_capture = endless
from emu.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A results folder with a capture (a tiny replay)."""
    from emu.cli import main

    d = tmp_path_factory.mktemp("report")
    assert main(["trace", "mars", "--seq", "256", "--nodes", "2", "--chunk", "128", "-o", str(d / "t.json")]) == 0
    assert main(["replay", str(d / "t.json"), "--out", str(d / "run"), "--capture", "cap.pcap"]) == 0
    return d / "run"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupted_report_leaves_no_partial_index(results, tmp_path, sig):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(ROOT))
    cache = tmp_path / "xdg" / "mcf-emu" / "frames"
    out = tmp_path / "report.html"
    proc = subprocess.Popen([sys.executable, "-c", ENDLESS, "report", str(results), "-o", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not any(".part" in n for n in _files(cache)):  # the build has written its first row group
            assert proc.poll() is None, proc.communicate()
            try:
                proc.wait(0.05)
            except subprocess.TimeoutExpired:
                pass
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=HANG_S)  # a hang guard only
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, err
    assert err.count("\n") == 1 and "unfinished output removed" in err and "Traceback" not in err, err
    assert _files(cache) == []  # no partial index left in the user's cache
    assert not out.exists() and not list(tmp_path.glob(".report.html*"))
