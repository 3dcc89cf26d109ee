"""Captures say which link each hop crossed and carry the ttl of the route actually taken."""

import shutil
import subprocess

import numpy as np
import pytest

from emu.cli import main
from emu.codec import decode_frames, read_capture
from emu.codec.fragment import max_payload
from emu.net import kernel as K
from emu.replay.capture import Capture, Filter, parse_filters
from emu.replay.run import Options, Replay
from emu.workload.trace import load_trace

TSHARK = shutil.which("tshark")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("cap") / "mars.json"
    assert main(["trace", "mars", "--seq", "512", "--nodes", "4", "--chunk", "256", "--decode-tokens", "1",
                 "-o", str(path)]) == 0
    return path


def capture(trace, path, scenario=(), flt=Filter(), loss=0.0, lost=False):
    """Replay with a capture; also keep the engine's own transmission records to compare with
    (those of the frames that arrived; ``lost``: all of them)."""
    rp = Replay(load_trace(str(trace)), Options(topology="ring", scenario=scenario, loss=loss, seed=1))
    rows = []
    rp.net.log_sinks.append(rows.append)
    cap = Capture(path, flt)
    cap.attach(rp)
    rp.run()
    cap.close()
    rows = np.concatenate(rows)
    return rp, rows if lost else rows[rows[:, K.G_FATE] == 0]


def records(path):
    """(transmitting node, receiving node, MCF header, time in ns) of each record of a classic pcap."""
    src, dst, heads, ts = [], [], [], []
    for b in read_capture(path):
        f = decode_frames(b.buf, b.offsets, wirelen=b.wirelen)
        assert (f.eth_dst[:, :4] == np.frombuffer(b"\x02MCF", np.uint8)).all()
        src.append(f.eth_src[:, 4].astype(np.int64) * 256 + f.eth_src[:, 5])
        dst.append(f.eth_dst[:, 4].astype(np.int64) * 256 + f.eth_dst[:, 5])
        heads.append(f.headers)
        ts.append(b.ts_ns)
    return [np.concatenate(x) for x in (src, dst, heads, ts)]


def test_pcapng_has_one_interface_per_link_and_ttl_from_the_hops_taken(trace, tmp_path):
    # A ring of 4 with link 0-1 failing: after the re-route frames go the long way, and
    # their ttl follows the hops they took, not the static shortest paths.
    path = tmp_path / "c.pcapng"
    rp, rows = capture(trace, path, scenario=("link 0-1 down at 5ms",))
    names = [f"{u}->{v}" for u, v in rp.net.links]
    ts, ttl, n = [], [], 0
    for b in read_capture(path):
        f = decode_frames(b.buf, b.offsets, wirelen=b.wirelen)
        ttl.append(f.headers["ttl"].astype(np.int64))
        n += len(b)
    ttl = np.concatenate(ttl)
    assert n == len(rows)
    # Records are written in the order of the engine's log: ttl = 16 - hops before this link.
    assert np.array_equal(ttl, 16 - rows[:, K.G_HOPS])
    assert rows[:, K.G_HOPS].max() >= 2  # some frame went round the failed link
    if TSHARK is None:
        pytest.skip("tshark not installed")
    out = subprocess.run([TSHARK, "-r", str(path), "-T", "fields", "-e", "frame.interface_name"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [names[l] for l in rows[:, K.G_LINK].tolist()]


def test_classic_pcap_names_the_hop_in_the_ethernet_addresses(trace, tmp_path):
    path = tmp_path / "c.pcap"
    rp, rows = capture(trace, path)
    src, dst, _, _ = records(path)
    links = rp.net.LK[rows[:, K.G_LINK]]
    assert np.array_equal(src, links[:, K.L_SRC])
    assert np.array_equal(dst, links[:, K.L_DST])
    if TSHARK is not None:
        subprocess.run([TSHARK, "-r", str(path), "-c", "5"], capture_output=True, check=True)


def test_an_into_filter_keeps_exactly_the_frames_the_board_receives(trace, tmp_path):
    """into=K (docs/hardware.md, Send): the frames that reach board K over its inbound links,
    each hop once, and only those: not a frame lost on the way in, not one K sends or forwards."""
    path = tmp_path / "c.pcap"
    rp, rows = capture(trace, path, flt=parse_filters(["into=1"]), loss=0.05, lost=True)
    into = rp.net.LK[rows[:, K.G_LINK], K.L_DST] == 1
    arrived = rows[:, K.G_FATE] == 0
    assert (into & ~arrived).any() and (~into & arrived).any()  # some lost on the way in, some to other boards
    want = rows[into & arrived]
    src, dst, h, ts = records(path)
    assert (dst == 1).all() and len(dst) == len(want)
    assert np.array_equal(src, rp.net.LK[want[:, K.G_LINK], K.L_SRC])
    assert np.array_equal(h["frag_idx"], want[:, K.G_FRAG]) and np.array_equal(ts, (want[:, K.G_ARR] + 500) // 1000)


def test_each_records_fragment_fields_follow_the_frame_format(trace, tmp_path):
    """docs/wire-format.md, Fragmentation: fragment i of a message has offset i * (mtu - 48),
    pay_len min(mtu - 48, msg_len - offset) and seq the message's first + i; a source's
    messages take blocks of seq that never overlap; and the frames of each message tile it."""
    path = tmp_path / "c.pcap"
    rp, rows = capture(trace, path)
    _, _, h, _ = records(path)
    per = max_payload(int(rp.hw["mtu"]))
    idx, off = h["frag_idx"].astype(np.int64), h["offset"].astype(np.int64)
    assert np.array_equal(idx, rows[:, K.G_FRAG]) and idx.max() >= 2  # messages of several fragments
    assert np.array_equal(off, idx * per)
    assert np.array_equal(h["pay_len"], np.minimum(per, h["msg_len"].astype(np.int64) - off))
    msg = h["src_node"].astype(np.int64) << 32 | h["msg_id"]
    first = (h["seq"].astype(np.int64) - idx) & 0xFFFFFFFF
    keys, at = np.unique(msg, return_index=True)
    assert len(set(zip(msg.tolist(), first.tolist()))) == len(keys)  # one first seq per message
    for src in np.unique(h["src_node"]):  # in seq order, each message's block ends before the next begins
        mine = at[h["src_node"][at] == src]
        order = np.argsort(first[mine])
        starts, counts = first[mine][order], h["frag_cnt"][mine][order].astype(np.int64)
        assert (starts[1:] >= starts[:-1] + counts[:-1]).all()
    for k, i in zip(keys, at):  # each message's fragments, once each, cover its bytes
        frags = np.unique(idx[msg == k])
        assert np.array_equal(frags, np.arange(int(h["frag_cnt"][i])))
        cover = np.minimum(per, int(h["msg_len"][i]) - frags * per)
        assert cover.sum() == h["msg_len"][i]


@pytest.mark.parametrize("name, snaplen", [("c.pcapng", 62), ("c.pcap", 62), ("c.pcapng", 101), ("c.pcap", 99)])
def test_each_record_is_the_codecs_encoding_of_its_frames_header(trace, tmp_path, name, snaplen):
    """The frames are stamped in place from their message's encoded headers (emu.replay.capture_frames);
    each must be what the codec's encode_frames makes of the frame's own header row, the
    message's with the frame's fields (the MCF layer declares them), resends and re-routes
    included, at any snap length and alignment in the file."""
    from emu.codec import Flags, encode_frames

    path = tmp_path / name
    rp = Replay(load_trace(str(trace)), Options(topology="ring", scenario=("link 0-1 down at 5ms",), loss=0.02,
                                                 seed=1))
    rows = []
    rp.net.log_sinks.append(rows.append)
    cap = Capture(path, snaplen=snaplen)
    cap.attach(rp)
    rp.run()
    cap.close()
    rows = np.concatenate(rows)
    rows = rows[rows[:, K.G_FATE] == 0]
    assert rows[:, K.G_RETX].any() and rows[:, K.G_HOPS].max() >= 2
    h, nfrags = cap.messages.headers(rows[:, K.G_MSG])
    frag = rows[:, K.G_FRAG]
    h["frag_idx"], h["frag_cnt"], h["offset"] = frag, nfrags, frag * max_payload(int(rp.hw["mtu"]))
    h["pay_len"] = rows[:, K.G_LEN] - 62
    h["seq"] = (h["seq"].astype(np.int64) + frag) & 0xFFFFFFFF
    h["flags"] |= np.where(rows[:, K.G_RETX] == 1, int(Flags.RETX), 0).astype(np.uint8)
    h["ttl"] = 16 - rows[:, K.G_HOPS]
    links = rp.net.LK[rows[:, K.G_LINK]]
    want, offsets = encode_frames(h, None, snaplen=snaplen, eth_src=links[:, K.L_SRC])
    got = np.concatenate([b.buf for b in read_capture(path)])
    if name.endswith(".pcap"):  # the hop's receiving board as destination MAC
        at = offsets[:-1]
        want[at[:, None] + np.arange(4)] = np.frombuffer(b"\x02MCF", np.uint8)
        want[at + 4], want[at + 5] = links[:, K.L_DST] >> 8, links[:, K.L_DST] & 0xFF
    assert got.tobytes() == want.tobytes()
