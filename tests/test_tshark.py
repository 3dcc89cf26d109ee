"""The Lua dissector: generated from the header declaration, and tshark reads back what we wrote."""

import shutil
import subprocess

import numpy as np
import pytest

import emu.commands.wireshark as wireshark_cmd
from emu.cli import main
from emu.codec import HEADER_DTYPE, CaptureWriter, Flags, encode_frames, new_headers
from emu.codec.dissector import LUA_FILE, PROTO, render_lua
from emu.codec.layer import summary_line
from waits import HANG_S

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed (apt-get install tshark)")


def test_shipped_dissector_is_generated_from_the_declaration():
    assert LUA_FILE.parent.name == "codec" and LUA_FILE.suffix == ".lua"
    assert LUA_FILE.read_text() == render_lua(), "run: python -m emu.codec.dissector"
    text = LUA_FILE.read_text()
    assert all(f'"{PROTO}.{name}"' in text for name in HEADER_DTYPE.names)
    assert '[9] = "reduce_result"' in text and '[4] = "all_reduce"' in text


def test_protocol_name_is_not_taken():
    if TSHARK is None:
        pytest.skip("tshark not installed")
    out = subprocess.run([TSHARK, "-G", "protocols"], capture_output=True, text=True, check=True).stdout
    taken = {col for line in out.splitlines() for col in line.split("\t")[1:]}
    assert PROTO not in taken


def random_headers(n, seed):
    rng = np.random.default_rng(seed)
    h = new_headers(n)
    for name in HEADER_DTYPE.names:
        h[name] = rng.integers(0, np.iinfo(HEADER_DTYPE[name].newbyteorder("=")).max, n, endpoint=True,
                               dtype=HEADER_DTYPE[name].newbyteorder("="))
    h["version"] = 1
    h["flags"] &= 0x03  # SYNTH set below where the payload is not carried
    h["stage"] = rng.integers(0, 3, n)
    h["op"] = rng.integers(1, 12, n)
    h["collective"] = rng.integers(0, 5, n)
    h["reduce_op"] = rng.integers(0, 4, n)
    h["dtype"] = rng.integers(0, 5, n)
    h["frag_cnt"] = np.maximum(h["frag_cnt"], 1)
    h["frag_idx"] = h["frag_idx"] % h["frag_cnt"]
    h["pay_len"] = rng.integers(0, 200, n)
    h["offset"] = np.minimum(h["offset"], 2**32 - 1 - 200)
    h["msg_len"] = np.maximum(h["msg_len"], h["offset"] + h["pay_len"])
    h["route_id"][: n // 2] = 0
    h["dst_set"][h["dst_set"] == 0] = 1
    h["dst_set"][:3] = [1, 1 << 63, 0b100001]
    return h


def tshark_fields(path, fields, *extra):
    cmd = [TSHARK, "-n", "-X", f"lua_script:{LUA_FILE}", "-r", str(path), "-T", "fields", "-E", "separator=\t",
           "-E", "occurrence=f", *[a for f in fields for a in ("-e", f)], *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    return [line.split("\t") for line in r.stdout.splitlines()]


def as_int(text):
    return {"True": 1, "False": 0}[text] if text in ("True", "False") else int(text, 0)


@needs_tshark
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_tshark_reads_every_field(tmp_path, fmt):
    n = 40
    h = random_headers(n, seed=7 if fmt == "pcap" else 8)
    payload = np.random.default_rng(1).integers(0, 256, int(h["pay_len"].sum()), dtype=np.uint8)
    half = n // 2
    path = tmp_path / f"t.{fmt}"
    # second half: timing-mode frames written headers-only
    tail = h[half:].copy()
    tail["flags"] |= np.uint8(Flags.SYNTH)
    h[half:] = tail
    buf, offsets = encode_frames(tail, snaplen=62)
    with CaptureWriter(path, format=fmt) as w:
        w.write_headers(h[:half], np.arange(half) * 1000, payload[: int(h["pay_len"][:half].sum())])
        w.write(buf, offsets, np.arange(half, n) * 1000, wirelen=tail["pay_len"].astype(np.int64) + 62)

    names = list(HEADER_DTYPE.names)
    flag_fields = [f"{PROTO}.flags.{f.name.lower()}" for f in Flags]
    rows = tshark_fields(path, [f"{PROTO}.{x}" for x in names] + flag_fields + ["data.data", "_ws.col.Info"])
    assert len(rows) == n
    pay_at = np.concatenate([[0], np.cumsum(h["pay_len"][:half].astype(np.int64))])
    for i, row in enumerate(rows):
        got = {name: as_int(v) for name, v in zip(names, row)}
        assert got == {name: int(h[name][i]) for name in names}, f"frame {i}"
        assert [as_int(v) for v in row[len(names) : len(names) + 3]] == [int(bool(h["flags"][i] & f)) for f in Flags]
        data = row[len(names) + 3]
        expected = payload[pay_at[i] : pay_at[i + 1]].tobytes().hex() if i < half else ""
        assert data.replace(":", "") == expected, f"frame {i} payload"
        assert row[-1] == summary_line(h[i]).removeprefix("MCF "), f"frame {i} info"


@needs_tshark
def test_enum_names_filters_and_expert_info(tmp_path):
    h = new_headers(3, dst_set=1, flags=Flags.SYNTH, op=[1, 8, 8], pay_len=10, msg_len=10)
    buf, offsets = encode_frames(h, snaplen=62)
    buf = buf.copy()
    buf[offsets[2] + 14] = 9  # frame 2: version 9
    path = tmp_path / "x.pcap"
    with CaptureWriter(path) as w:
        w.write(buf, offsets, [0, 1, 2], wirelen=72)
    rows = tshark_fields(path, ["frame.number"], "-Y", f'{PROTO}.op == "partial_state"')
    assert [r[0] for r in rows] == ["2", "3"]
    rows = tshark_fields(path, ["frame.number"], "-Y", f"{PROTO}.malformed")
    assert [r[0] for r in rows] == ["3"]
    r = subprocess.run([TSHARK, "-X", f"lua_script:{LUA_FILE}", "-r", str(path), "-V", "-c", "1"],
                       capture_output=True, text=True, timeout=HANG_S)
    assert "op: kv_replica (1)" in r.stdout and "stage: prefill (0)" in r.stdout and "SYNTH: True" in r.stdout


def test_emu_wireshark_prints_how_to_load(capsys):
    assert main(["wireshark"]) == 0
    out = capsys.readouterr().out
    assert str(LUA_FILE) in out
    assert f"-X lua_script:{LUA_FILE}" in out
    assert str(wireshark_cmd.personal_plugins_dir()) in out


def test_emu_wireshark_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(wireshark_cmd, "personal_plugins_dir", lambda: tmp_path / "plugins")
    assert main(["wireshark", "--install"]) == 0
    assert (tmp_path / "plugins" / LUA_FILE.name).read_text() == LUA_FILE.read_text()
    assert str(tmp_path / "plugins") in capsys.readouterr().out
