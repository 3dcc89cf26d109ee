"""pcap / pcapng writing and streaming reading, and `emu pcap`."""

import json
from decimal import Decimal
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.l2 import Ether
from scapy.utils import PcapNgWriter, PcapReader, rdpcap, wrpcap

from emu.cli import main
from emu.codec import (
    HEADERS_ONLY,
    MCF,
    CaptureWriter,
    Flags,
    decode_frames,
    encode_frames,
    fragment,
    mcf_frame,
    new_headers,
    read_capture,
    to_ns,
)
from emu.codec.errors import EncodeError
from emu.errors import DecodeError

FORMATS = ["pcap", "pcapng"]


def sample(n_msgs=4, seed=0):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 5000, n_msgs)
    rows = new_headers(n_msgs, src_node=np.arange(n_msgs) % 3, dst_set=1 << (np.arange(n_msgs) % 5),
                       msg_id=np.arange(n_msgs), op=[1, 3, 8, 9][: n_msgs] * (n_msgs // 4) + [1] * (n_msgs % 4))
    data = rng.integers(0, 256, int(lens.sum()), dtype=np.uint8)
    h, pay = fragment(rows, lens, data=data)
    return h, pay


def read_all(path, **kw):
    batches = list(read_capture(path, **kw))
    cat = lambda name: np.concatenate([getattr(b, name) for b in batches]) if batches else np.zeros(0)
    buf = np.concatenate([b.buf for b in batches]) if batches else np.zeros(0, np.uint8)
    sizes = np.concatenate([np.diff(b.offsets) for b in batches]) if batches else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return batches, buf, offsets, cat("ts_ns"), cat("wirelen")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("snaplen", [65535, HEADERS_ONLY, 100])
def test_round_trip(tmp_path, fmt, snaplen):
    h, pay = sample(8)
    ts = (np.arange(len(h)) * 1_234_567 + 5 * 10**9 + 7).astype(np.int64)
    path = tmp_path / f"x.{fmt}"
    with CaptureWriter(path, format=fmt, snaplen=snaplen) as w:
        w.write_headers(h[:5], ts[:5], pay[: int(h["pay_len"][:5].sum())])
        w.write_headers(h[5:], ts[5:], pay[int(h["pay_len"][:5].sum()) :])
    assert w.frames == len(h)
    full, full_off = encode_frames(h, pay)
    batches, buf, offsets, ts_read, wirelen = read_all(path)
    assert ts_read.tolist() == ts.tolist()
    assert wirelen.tolist() == np.diff(full_off).tolist()
    for i in range(len(h)):
        assert buf[offsets[i] : offsets[i + 1]].tobytes() == full[full_off[i] : full_off[i + 1]][:snaplen].tobytes()
    frames = decode_frames(buf, offsets, wirelen=wirelen)
    assert frames.headers.tobytes() == h.tobytes()
    assert batches[0].linktype == 1 and batches[0].first_record == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_streams_in_small_batches(tmp_path, fmt):
    h, pay = sample(40, seed=1)
    path = tmp_path / f"x.{fmt}"
    with CaptureWriter(path, format=fmt) as w:
        w.write_headers(h, np.arange(len(h)), pay)
    whole = read_all(path)
    batches, buf, offsets, ts, wirelen = read_all(path, batch_bytes=3000)  # records span chunk boundaries
    assert len(batches) > 10
    assert [b.first_record for b in batches] == np.cumsum([0] + [len(b) for b in batches[:-1]]).tolist()
    assert buf.tobytes() == whole[1].tobytes() and ts.tolist() == list(range(len(h)))
    assert decode_frames(buf, offsets, wirelen=wirelen).headers.tobytes() == h.tobytes()


def test_constant_memory_for_many_frames(tmp_path):
    n = 200_000
    h = new_headers(n, dst_set=1, flags=Flags.SYNTH, pay_len=1400, msg_len=1400, msg_id=np.arange(n))
    path = tmp_path / "big.pcap"
    with CaptureWriter(path, snaplen=HEADERS_ONLY) as w:
        for i in range(0, n, 50_000):
            w.write_headers(h[i : i + 50_000], np.arange(i, i + 50_000))
    assert path.stat().st_size == 24 + n * (16 + 62)
    del h
    tracemalloc.start()
    count = 0
    for b in read_capture(path, batch_bytes=1 << 20):
        count += len(decode_frames(b.buf, b.offsets, wirelen=b.wirelen))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == n
    assert peak < 12 << 20  # a few 1 MB chunks and their copies, not the 15.6 MB file


def test_interoperates_with_scapy(tmp_path):
    h, pay = sample(4)
    ours = tmp_path / "ours.pcap"
    with CaptureWriter(ours) as w:
        w.write_headers(h, np.arange(len(h)) * 1000 + 10**9, pay)
    pkts = rdpcap(str(ours))
    assert [p[MCF].msg_id for p in pkts] == h["msg_id"].tolist()
    assert float(pkts[1].time) == pytest.approx(1.000001)

    theirs = tmp_path / "theirs.pcap"
    frames = [mcf_frame(b"abc", dst_set=2, msg_id=i, msg_len=3) for i in range(3)]
    for i, f in enumerate(frames):
        f.time = Decimal(2) + Decimal(i) / 4  # exact in binary too: scapy's pcapng writer goes through float
    wrpcap(str(theirs), frames)  # microsecond pcap
    _, buf, offsets, ts, _ = read_all(theirs)
    assert ts.tolist() == [2_000_000_000, 2_250_000_000, 2_500_000_000]
    assert decode_frames(buf, offsets).headers["msg_id"].tolist() == [0, 1, 2]

    ng = tmp_path / "theirs.pcapng"
    with PcapNgWriter(str(ng)) as w:
        for f in frames:
            w.write(f)
    _, buf, offsets, ts, _ = read_all(ng)
    assert ts.tolist() == [2_000_000_000, 2_250_000_000, 2_500_000_000]
    assert buf.tobytes() == b"".join(bytes(f) for f in frames)
    ours_ng = tmp_path / "ours.pcapng"
    with CaptureWriter(ours_ng, format="pcapng") as w:
        w.write_headers(h, 10**9, pay)
    assert [Ether(bytes(p))[MCF].msg_id for p in PcapReader(str(ours_ng))] == h["msg_id"].tolist()


def test_failure_leaves_no_file_and_keeps_the_old_one(tmp_path):
    path = tmp_path / "x.pcap"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with CaptureWriter(path) as w:
            w.write_headers(new_headers(1, dst_set=1, flags=Flags.SYNTH), [0])
            raise RuntimeError("boom")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.pcap"]


def test_a_write_that_fails_on_the_writers_thread_fails_the_file(tmp_path, monkeypatch):
    """Records reach the disk on a thread of their own; the disk's refusal (a full disk) still
    ends the ``with`` block in that OSError, leaves no file and writes nothing after it."""
    import contextlib
    import errno

    import emu.codec.pcap as pcap_mod

    real, written = pcap_mod.atomic_file, []

    @contextlib.contextmanager
    def full_after_the_header(path, mode):
        with real(path, mode) as fh:
            class Full:
                def write(self, data):
                    if written:
                        raise OSError(errno.ENOSPC, "No space left on device")
                    written.append(len(data))
                    return fh.write(data)
            yield Full()

    monkeypatch.setattr(pcap_mod, "atomic_file", full_after_the_header)
    monkeypatch.setattr(pcap_mod, "_WRITE_BYTES", 100)  # a write per record or two
    h = new_headers(64, dst_set=1, flags=Flags.SYNTH)
    with pytest.raises(OSError, match="No space left"):
        with CaptureWriter(tmp_path / "x.pcapng", format="pcapng") as w:
            for _ in range(20):
                w.write_headers(h, np.arange(len(h)))
    assert len(written) == 1 and list(tmp_path.iterdir()) == []


def test_writer_rejects_bad_input(tmp_path):
    h = new_headers(2, dst_set=1, flags=Flags.SYNTH)
    with CaptureWriter(tmp_path / "x.pcap") as w:
        with pytest.raises(EncodeError, match="frame 1: ts_ns: -1 outside"):
            w.write_headers(h, [0, -1])
        with pytest.raises(EncodeError, match="integer nanoseconds"):
            w.write_headers(h, [0.5, 1.0])
        buf, offsets = encode_frames(h)
        with pytest.raises(EncodeError, match="frame 0: wirelen: wirelen below the bytes given"):
            w.write(buf, offsets, [0, 0], wirelen=[10, 62])
    with pytest.raises(EncodeError, match="format"):
        CaptureWriter(tmp_path / "y", format="erf")
    assert to_ns([1.5, 2e-9]).tolist() == [1_500_000_000, 2]


def pcap_bytes(records, snaplen=65535, magic=0xA1B23C4D):
    head = np.array([magic, 2 | 4 << 16, 0, 0, snaplen, 1], dtype="<u4").tobytes()
    return head + b"".join(np.array(r[:4], dtype="<u4").tobytes() + r[4] for r in records)


@pytest.mark.parametrize("content, message", [
    (b"", "not a capture file"),
    (b"GIF89a" + bytes(30), "not a pcap or pcapng file (magic 0x38464947)"),
    (pcap_bytes([])[:20], "truncated pcap file header"),
    (pcap_bytes([(0, 0, 10, 10, bytes(10)), (0, 0, 10, 10, bytes(4))]), "frame 2 at byte 50: truncated"),
    (pcap_bytes([(0, 0, 10, 10, bytes(10)), (0, 0, 1 << 20, 1 << 20, b"")]),
     "frame 2 at byte 50: incl_len 1048576 exceeds"),
    (pcap_bytes([(0, 0, 10, 10, bytes(10)), (0, 0, 4, 3, bytes(4))]), "frame 2 at byte 50: orig_len 3 below incl_len 4"),
])
def test_malformed_pcap(tmp_path, content, message):
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    with pytest.raises(DecodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        list(read_capture(path))


def good_pcapng(tmp_path):
    path = tmp_path / "ok.pcapng"
    with CaptureWriter(path, format="pcapng") as w:
        w.write_headers(new_headers(2, dst_set=1, flags=Flags.SYNTH), [0, 1])
    return bytearray(path.read_bytes())


def test_malformed_pcapng(tmp_path):
    raw = good_pcapng(tmp_path)
    shb_len = int.from_bytes(raw[4:8], "little")
    idb_len = int.from_bytes(raw[shb_len + 4 : shb_len + 8], "little")
    epb = shb_len + idb_len
    cases = []
    bad = raw.copy()
    bad[epb + 4 : epb + 8] = (13).to_bytes(4, "little")
    cases.append((bad, f"block 0 at byte {epb}: block length 13 invalid"))
    bad = raw.copy()
    bad[epb + 8 : epb + 12] = (5).to_bytes(4, "little")
    cases.append((bad, f"frame 1 at byte {epb}: interface id not declared"))
    bad = raw.copy()
    epb_len = int.from_bytes(raw[epb + 4 : epb + 8], "little")
    bad[epb + epb_len - 4 : epb + epb_len] = (0).to_bytes(4, "little")
    cases.append((bad, f"frame 1 at byte {epb}: trailing block length differs"))
    bad = raw.copy()
    bad[epb : epb + 4] = (3).to_bytes(4, "little")
    cases.append((bad, "block type 3 (simple/obsolete packet) not supported"))
    cases.append((raw[:-3], "truncated"))
    for content, message in cases:
        path = tmp_path / "bad.pcapng"
        path.write_bytes(bytes(content))
        with pytest.raises(DecodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
            list(read_capture(path))


# ---------------------------------------------------------------- emu pcap

def capture_with_problems(tmp_path):
    """3 complete messages, one message missing a fragment, two malformed frames."""
    h, pay = fragment(new_headers(4, src_node=[0, 1, 2, 2], dst_set=[1, 6, 0, 8], route_id=[0, 0, 7, 0],
                                  msg_id=[10, 11, 12, 13], op=[1, 3, 8, 9]), [3000, 100, 200, 3000])
    keep = np.ones(len(h), bool)
    keep[np.flatnonzero(h["msg_id"] == 13)[1]] = False  # lose fragment 1 of message 13
    h = h[keep]
    buf, offsets = encode_frames(h, snaplen=HEADERS_ONLY)
    buf = buf.copy()
    buf[offsets[1] + 14 + 3] = 99  # frame 1: unknown op
    buf[offsets[2] + 14 + 0] = 2  # frame 2: wrong version
    path = tmp_path / "run.pcap"
    with CaptureWriter(path, snaplen=HEADERS_ONLY) as w:
        w.write(buf, offsets, np.arange(len(h)) * 1000, wirelen=h["pay_len"].astype(np.int64) + 62)
    return path


def test_emu_pcap_json(tmp_path, capsys):
    path = capture_with_problems(tmp_path)
    assert main(["pcap", str(path), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["frames"] == 7 and s["valid_frames"] == 5 and s["headers_only"]
    assert s["malformed"] == {"version": 1, "op": 1}
    assert s["malformed_examples"][0].startswith("frame 2 at byte 102: op: unknown value 99")
    assert s["per_op"] == {"kv_replica": 1, "kv_fetch_resp": 1, "partial_state": 1, "reduce_result": 2}
    assert s["per_src"] == {"0": 1, "1": 1, "2": 3}
    assert s["per_dst"] == {"0": 1, "1": 1, "2": 1, "3": 2} and s["per_route"] == {"7": 1}
    # message 10 lost two fragments to corruption, 13 lost one on the "wire"
    assert s["messages"] == {"total": 4, "complete": 2, "incomplete": 2, "duplicate_fragments": 0}
    assert [(m["msg_id"], m["missing"]) for m in s["incomplete"]] == [(10, [1, 2]), (13, [1])]
    assert s["wire_bytes"] == 62 * 7 + 3000 + 100 + 200 + 3000 - 1452


def test_emu_pcap_table(tmp_path, capsys):
    path = capture_with_problems(tmp_path)
    assert main(["pcap", str(path)]) == 0
    out = capsys.readouterr().out
    assert "frames     7 (5 valid)" in out
    assert "malformed  2 (version: 1, op: 1)" in out
    assert "reduce_result" in out and "incomplete messages (first 2)" in out


@pytest.mark.parametrize("content", [b"not a capture at all", pcap_bytes([(0, 0, 10, 10, bytes(4))])],
                         ids=["not-a-capture", "truncated-record"])
def test_emu_pcap_malformed_file_is_one_line(tmp_path, content):
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "emu", "pcap", str(path)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("emu pcap: error: ") and r.stderr.count("\n") == 1


def test_emu_pcap_other_link_type(tmp_path, capsys):
    path = tmp_path / "x.pcap"
    with CaptureWriter(path, linktype=101) as w:
        w.write(b"\x45" * 20, [0, 20], [0])
    assert main(["pcap", str(path)]) == 2
    assert "link type 101, expected Ethernet (1)" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("batch_bytes", [997, 1 << 20])
def test_runs_of_equal_and_mixed_lengths(tmp_path, fmt, batch_bytes):
    # long equal runs (read by guessing ahead) broken by odd lengths (read one by one)
    lens = [100] * 70 + [5, 900, 33, 0] + [200] * 40 + [7] * 3 + [1452] * 50 + [1]
    rows = new_headers(len(lens), dst_set=1, pay_len=lens, msg_len=lens, msg_id=np.arange(len(lens)))
    pay = np.random.default_rng(2).integers(0, 256, sum(lens), dtype=np.uint8)
    path = tmp_path / f"x.{fmt}"
    with CaptureWriter(path, format=fmt) as w:
        w.write_headers(rows[:100], np.arange(100), pay[: sum(lens[:100])])
        w.write_headers(rows[100:], np.arange(100, len(lens)), pay[sum(lens[:100]) :])
    _, buf, offsets, ts, wirelen = read_all(path, batch_bytes=batch_bytes)
    frames = decode_frames(buf, offsets, wirelen=wirelen)
    assert frames.headers.tobytes() == rows.tobytes() and ts.tolist() == list(range(len(lens)))
    assert b"".join(bytes(p) for p in frames.payloads()) == pay.tobytes()


def test_large_batches_are_written_in_pieces(tmp_path, monkeypatch):
    import emu.codec.pcap as pcap_mod

    monkeypatch.setattr(pcap_mod, "_WRITE_BYTES", 1000)
    h, pay = sample(12, seed=3)
    for fmt in FORMATS:
        whole, pieces = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
        with CaptureWriter(pieces, format=fmt) as w:
            w.write_headers(h, np.arange(len(h)), pay)
        monkeypatch.setattr(pcap_mod, "_WRITE_BYTES", 1 << 30)
        with CaptureWriter(whole, format=fmt) as w:
            w.write_headers(h, np.arange(len(h)), pay)
        monkeypatch.setattr(pcap_mod, "_WRITE_BYTES", 1000)
        assert pieces.read_bytes() == whole.read_bytes()


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(FORMATS),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
       st.integers(0, 400), st.sampled_from([64, 1 << 20]))
def test_fuzz_mutated_captures(tmp_path_factory, fmt, flips, cut, batch_bytes):
    path = tmp_path_factory.mktemp("fuzz") / f"x.{fmt}"
    h, pay = sample(3, seed=4)
    with CaptureWriter(path, format=fmt, snaplen=100) as w:
        w.write_headers(h, np.arange(len(h)) * 10**9, pay)
    raw = bytearray(path.read_bytes())
    for pos, val in flips:
        raw[pos % len(raw)] = val
    path.write_bytes(bytes(raw[: len(raw) - cut]))
    try:
        for b in read_capture(path, batch_bytes=batch_bytes):
            try:
                decode_frames(b.buf, b.offsets, wirelen=b.wirelen)
            except DecodeError:
                pass
    except DecodeError:
        pass
