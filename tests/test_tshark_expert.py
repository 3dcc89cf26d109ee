"""The shipped dissector flags every malformed header `emu pcap` refuses, with the same reason."""

import shutil
import subprocess

import numpy as np
import pytest

from emu.codec import CaptureWriter, Flags, encode_frames, new_headers
from emu.codec.batch import REASONS, header_errors
from emu.codec.dissector import LUA_FILE, lua_checks
from emu.codec.enums import ENUM_FIELDS

TSHARK = shutil.which("tshark")

# one header breaking each rule (field: value), on a valid 10-byte-payload frame
MALFORMED = {
    "version": {"version": 2},
    "flags": {"flags": 0x04 | 0x40},
    "stage": {"stage": 3},
    "op": {"op": 0},
    "collective": {"collective": 5},
    "reduce_op": {"reduce_op": 4},
    "dtype": {"dtype": 9},
    "pay_len": {"pay_len": 11, "msg_len": 11},
    "frag_cnt": {"frag_cnt": 0, "frag_idx": 0},
    "frag_idx": {"frag_idx": 3, "frag_cnt": 3},
    "offset": {"offset": 1, "msg_len": 10},
    "dst_set": {"dst_set": 0, "route_id": 0},
}


def test_every_header_rule_of_the_codec_has_its_lua_check():
    header_reasons = set(REASONS) - {"ok", "truncated", "ethertype", "caplen"}
    assert {r for r, _c, _t in lua_checks()} == header_reasons == set(MALFORMED)
    assert set(ENUM_FIELDS) <= set(MALFORMED)


def capture(tmp_path):
    good = new_headers(1, dst_set=0b101, flags=Flags.SYNTH, op=1, pay_len=10, msg_len=10, frag_cnt=1)
    buf, offsets = encode_frames(good, snaplen=62)
    rows, frames = [], []
    for reason, fields in [("ok", {}), *MALFORMED.items()]:
        h = good.copy()
        for k, v in fields.items():
            h[k] = v
        if reason != "pay_len":  # the codec's own rules agree on which check fails first
            assert REASONS[header_errors(h)[0]] == reason
        frame = buf.copy()
        frame[14:62] = np.frombuffer(h.tobytes(), np.uint8)
        rows.append(reason)
        frames.append(frame)
    path = tmp_path / "malformed.pcap"
    with CaptureWriter(path) as w:
        w.write(np.concatenate(frames), np.arange(len(frames) + 1) * 62, np.arange(len(frames)) * 1000,
                wirelen=72)
    return path, rows


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed (apt-get install tshark)")
def test_tshark_raises_an_expert_info_naming_each_malformed_field(tmp_path):
    path, reasons = capture(tmp_path)
    out = subprocess.run([TSHARK, "-n", "-X", f"lua_script:{LUA_FILE}", "-r", str(path), "-T", "fields",
                          "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=|",
                          "-e", "frame.number", "-e", "_ws.expert.message"],
                         capture_output=True, text=True, check=True).stdout
    got = {int(n): msg for n, _, msg in (line.partition("\t") for line in out.splitlines())}
    assert len(got) == len(reasons)
    for number, reason in enumerate(reasons, start=1):  # Wireshark numbers frames from 1
        if reason == "ok":
            assert got[number] == "", "a valid frame flagged"
        else:
            assert got[number].split("|")[0].startswith(f"{reason}: "), (reason, got[number])
