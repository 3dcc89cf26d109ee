"""emu pcap diff: a board's capture against the frames expected of it, frame by frame."""

import json

import numpy as np

from emu.cli import main
from emu.codec import CaptureWriter, Flags, encode_frames, new_headers


def write(path, h, ts):
    buf, off = encode_frames(h, snaplen=62)
    with CaptureWriter(path) as w:
        w.write(buf, off, ts, wirelen=h["pay_len"].astype(np.int64) + 62)


def expected_frames(n=12):
    h = new_headers(n, flags=Flags.SYNTH | Flags.ACK_REQ, op=1, src_node=1, dst_set=0b1100, frag_cnt=4,
                    pay_len=100, msg_len=400)
    h["msg_id"] = np.arange(n) // 4
    h["frag_idx"] = np.arange(n) % 4
    h["offset"] = h["frag_idx"].astype(np.int64) * 100
    h["seq"] = np.arange(n)
    return h


def test_the_same_frames_later_are_the_same_and_the_offset_is_reported(tmp_path, capsys):
    h = expected_frames()
    write(tmp_path / "e.pcap", h, np.arange(12) * 1000)
    write(tmp_path / "g.pcap", h, 5_000_000 + np.arange(12) * 1500)  # the board: later, slower
    assert main(["pcap", "diff", str(tmp_path / "e.pcap"), str(tmp_path / "g.pcap"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["matched"] == 12
    assert out["time_offset_ns"] == {"median": 2750, "min": 0, "max": 5500}  # 500 ns more per frame


def test_missing_extra_reordered_and_differing_frames_are_named(tmp_path, capsys):
    h = expected_frames()
    g = h.copy()
    g["ttl"][5] = 3                         # frame 6: a field differs
    g = np.delete(g, 7)                     # frame 8 missing
    g[[1, 2]] = g[[2, 1]]                   # frames 2 and 3 swapped
    extra = expected_frames(1)
    extra["msg_id"] = 99
    g = np.concatenate([g, extra])          # one frame nobody expected
    write(tmp_path / "e.pcap", h, np.arange(12) * 1000)
    write(tmp_path / "g.pcap", g, np.arange(12) * 1000)
    assert main(["pcap", "diff", str(tmp_path / "e.pcap"), str(tmp_path / "g.pcap"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert not out["ok"]
    assert out["missing"] == [8] and out["extra"] == [12]   # Wireshark's frame numbers
    assert out["differing"] == [{"expected_frame": 6, "got_frame": 6, "field": "ttl",
                                 "expected": int(h["ttl"][5]), "got": 3}]
    assert out["reordered_count"] == 1 and out["reordered"][0] in (2, 3)
    assert main(["pcap", "diff", str(tmp_path / "e.pcap"), str(tmp_path / "g.pcap")]) == 1
    text = capsys.readouterr().out
    assert "missing 1:" in text and "frame 8 (kv_replica n1#1 fragment 4/4)" in text
    assert "ttl expected" in text and text.rstrip().endswith("1 reordered")


def test_a_diff_needs_two_captures(tmp_path, capsys):
    assert main(["pcap", "diff", str(tmp_path / "only.pcap")]) == 2
    assert "two captures" in capsys.readouterr().err
