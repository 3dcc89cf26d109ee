"""Codec throughput: scapy vs the batch codec, and pcap writing/reading.

Prints frames per second (median of --repeats runs) for: scapy build+bytes,
scapy parse, batch encode and decode (1400-byte payloads, in batches), pcap
write of header rows (1400-byte payloads, headers-only snaplen) and pcap
read(+decode); then the batch/scapy ratios. ``--json`` prints the same as JSON.

    python benchmarks/codec.py [--frames 1000000] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
from scapy.layers.l2 import Ether

from emu.codec import (
    HEADERS_ONLY,
    MCF,
    CaptureWriter,
    Flags,
    decode_frames,
    encode_frames,
    mcf_frame,
    new_headers,
    read_capture,
)

PAYLOAD = 1400


def headers(n: int, synth: bool = False) -> np.ndarray:
    i = np.arange(n)
    return new_headers(n, src_node=i % 16, dst_set=np.uint64(1) << (i % 16).astype(np.uint64), kv_id=i,
                       layer=i % 28, msg_id=i, seq=i, pay_len=PAYLOAD, msg_len=PAYLOAD,
                       flags=Flags.SYNTH if synth else 0)


def rate(fn, frames: int, repeats: int) -> float:
    """Median frames/s of ``repeats`` timed calls of ``fn`` (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return frames / statistics.median(times)


def run(frames: int, repeats: int, batch: int, scapy_frames: int) -> dict:
    payload = bytes(range(256)) * 5 + bytes(PAYLOAD - 1280)
    rows = headers(scapy_frames)
    fields = [{name: int(rows[name][i]) for name in rows.dtype.names} for i in range(scapy_frames)]

    def scapy_build():
        for f in fields:
            bytes(mcf_frame(payload, **f))

    wire = [bytes(mcf_frame(payload, **f)) for f in fields]

    def scapy_parse():
        for w in wire:
            Ether(w)[MCF].msg_id

    h = headers(batch)
    pays = np.frombuffer(payload * batch, dtype=np.uint8)
    reps = max(1, 65536 // batch)

    def encode():
        for _ in range(reps):
            encode_frames(h, pays)

    buf, offsets = encode_frames(h, pays)

    def decode():
        for _ in range(reps):
            decode_frames(buf, offsets)

    hs = headers(batch, synth=True)

    def encode_headers_only():
        for _ in range(reps):
            encode_frames(hs, snaplen=HEADERS_ONLY)

    big = headers(frames, synth=True)
    ts = np.arange(frames, dtype=np.int64) * 1000
    tmp = tempfile.mkdtemp(prefix="codec-bench-")
    path = os.path.join(tmp, "bench.pcap")
    chunk = 65536

    def pcap_write():
        with CaptureWriter(path, snaplen=HEADERS_ONLY) as w:
            for i in range(0, frames, chunk):
                w.write_headers(big[i : i + chunk], ts[i : i + chunk])

    def pcap_read():
        n = 0
        for b in read_capture(path):
            n += len(b)
        assert n == frames

    def pcap_read_decode():
        for b in read_capture(path):
            decode_frames(b.buf, b.offsets, wirelen=b.wirelen)

    try:
        r = {
            "scapy_build_bytes": rate(scapy_build, scapy_frames, repeats),
            "scapy_parse": rate(scapy_parse, scapy_frames, repeats),
            "batch_encode": rate(encode, batch * reps, repeats),
            "batch_decode": rate(decode, batch * reps, repeats),
            "batch_encode_headers_only": rate(encode_headers_only, batch * reps, repeats),
            "pcap_write": rate(pcap_write, frames, repeats),
            "pcap_read": rate(pcap_read, frames, repeats),
            "pcap_read_decode": rate(pcap_read_decode, frames, repeats),
        }
        size = os.path.getsize(path)
    finally:
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(tmp)
    return {
        "frames_per_s": r,
        "ratios": {
            "batch_encode / scapy_build_bytes": r["batch_encode"] / r["scapy_build_bytes"],
            "batch_decode / scapy_parse": r["batch_decode"] / r["scapy_parse"],
            "batch_decode / scapy_build_bytes": r["batch_decode"] / r["scapy_build_bytes"],
        },
        "setup": {"payload_bytes": PAYLOAD, "batch_frames": batch, "pcap_frames": frames,
                  "pcap_snaplen": HEADERS_ONLY, "pcap_file_bytes": size, "scapy_frames": scapy_frames,
                  "repeats": repeats, "statistic": "median", "numpy": np.__version__,
                  "python": sys.version.split()[0]},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1_000_000, help="frames in the pcap write/read test")
    ap.add_argument("--batch", type=int, default=8192, help="frames per encode/decode batch")
    ap.add_argument("--scapy-frames", type=int, default=2000, help="frames per scapy run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = run(a.frames, a.repeats, a.batch, a.scapy_frames)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    s = res["setup"]
    print(f"frames/s, median of {s['repeats']} runs; {s['payload_bytes']}-byte payloads, "
          f"batches of {s['batch_frames']}, pcap of {s['pcap_frames']:,} frames at snaplen {s['pcap_snaplen']}")
    for name, v in res["frames_per_s"].items():
        print(f"  {name:<28} {v:>14,.0f}")
    for name, v in res["ratios"].items():
        print(f"  {name:<36} {v:>8,.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
