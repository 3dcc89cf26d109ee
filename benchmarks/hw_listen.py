"""How many frames per second `emu hw listen` takes off a veth pair (needs root).

Two private namespaces joined by a veth pair; `emu hw listen --count N --json`
in one, `emu hw send --count N` (a 1000-frame capture, cycled, as fast as the
sender goes) in the other. Reports the arrival rate the listener saw, frames
lost (kernel drops: the socket buffer overflowed because the listener fell
behind), and the listener's CPU time per frame, whose inverse is the rate it
could take with a core to itself.

    sudo python benchmarks/hw_listen.py [--frames 1000000] [--payload 64]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emu.codec import CaptureWriter, encode_frames, new_headers  # noqa: E402
from emu.hw.netns import Lab, available  # noqa: E402


def make_capture(path: str, payload: int, n: int = 1000) -> None:
    h = new_headers(n, src_node=0, dst_set=1 << 1, op=4, msg_len=payload, pay_len=payload)
    h["msg_id"] = np.arange(n)
    buf, off = encode_frames(h, np.zeros(n * payload, np.uint8))
    with CaptureWriter(path) as w:
        w.write(buf, off, np.arange(n, dtype=np.int64) * 1000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--payload", type=int, default=64, help="MCF payload bytes per frame (frame = 62 + this)")
    ap.add_argument("--rate", help="pace the sender, e.g. 500Mbps (default: as fast as it goes)")
    args = ap.parse_args()
    why = available()
    if why:
        print(f"hw_listen: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp, Lab() as lab:
        pcap = os.path.join(tmp, "frames.pcap")
        make_capture(pcap, args.payload)
        rx, tx = lab.pair()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        listener = subprocess.Popen(rx.emu("hw", "listen", "--iface", rx.iface, "--count", str(args.frames),
                                           "--timeout", "120", "--json"),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # wait for the listener's socket
        line = listener.stderr.readline()
        assert line.startswith("listening"), line
        send = ["hw", "send", "--iface", tx.iface, "--pcap", pcap, "--count", str(args.frames)]
        if args.rate:
            send += ["--rate", args.rate]
        t = time.perf_counter()
        sent = subprocess.run(tx.emu(*send), capture_output=True, text=True, check=True)
        out, _ = listener.communicate(timeout=180)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    s = json.loads(out)
    print(sent.stdout.strip())
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(f"listen: {s['frames']:,} frames in {s['arrival_span_s']:.3f} s of arrivals = "
          f"{s['frames_per_s']:,.0f} frames/s; kernel drops {s['kernel_drops']:,}; malformed "
          f"{sum(s['malformed'].values())}; messages {s['messages']['complete']:,} complete")
    per = s["cpu_s"] / max(1, s["frames"])
    print(f"frames of {62 + args.payload} bytes; wall {wall:.2f} s; sender + listener CPU {cpu:.2f} s; listener CPU "
          f"{s['cpu_s']:.2f} s = {per * 1e6:.2f} us/frame, about {1 / per:,.0f} frames/s on a core of its own")
    return 0 if s["frames"] == args.frames and not s["kernel_drops"] else 1


if __name__ == "__main__":
    sys.exit(main())
