"""How close `emu calibrate` comes to a latency injected into `emu hw serve` (needs root).

Two private namespaces joined by a veth pair; `emu hw serve --node 1 --topology ring:4
--delay-us D` in one, `emu hw send TRACE --to 1 --rate 10Mbps --out DIR` (the golden diff
of a small MARS trace, paced so that serve keeps up) in the other, then `emu calibrate
DIR/board.pcap`. For each D, prints the forwarding latency found, its 95 % interval, and
how far it is from D (the figure the rehearsal is judged by: within 5 %); D = 0 gives
serve's own time per frame on this machine, which the others carry on top of D.

    sudo python benchmarks/hw_calibrate.py [--delays 0,5000,50000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emu.hw.netns import Lab, available  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delays", default="0,5000,50000", help="injected delays in microseconds")
    args = ap.parse_args()
    why = available()
    if why:
        print(f"skipped: {why}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="mcfemu-bench-cal-"))
    trace = work / "small.json"
    subprocess.run([sys.executable, "-m", "emu", "trace", "mars", "--seq", "512", "--nodes", "4", "--chunk", "256",
                    "--set", "model.layers=1", "-o", str(trace)], check=True, capture_output=True)
    print(f"{'injected':>10} {'found':>10} {'95 % interval':>22} {'found - injected':>17} {'error':>7}")
    with Lab() as lab:
        dev, checker = lab.pair()
        for d in (int(x) for x in args.delays.split(",")):
            srv = subprocess.Popen(dev.emu("hw", "serve", "--iface", dev.iface, "--node", "1", "--topology", "ring:4",
                                           "--delay-us", str(d)), stdout=subprocess.PIPE, text=True)
            srv.stdout.readline()  # ready
            out = work / f"d{d}"
            try:
                subprocess.run(checker.emu("hw", "send", "--iface", checker.iface, str(trace), "--to", "1",
                                           "--topology", "ring:4", "--rate", "10Mbps", "--out", str(out),
                                           "--timeout", "60s"), check=True, capture_output=True)
            finally:
                srv.terminate()
                srv.communicate()
            cal = json.loads(subprocess.run([sys.executable, "-m", "emu", "calibrate", str(out / "board.pcap"),
                                             "--json"], check=True, capture_output=True, text=True).stdout)
            lat = cal["forwarding_latency"]
            found, lo, hi = (v / 1e6 for v in (lat["median"], *lat["ci95"]))  # ps -> us
            err = f"{(found - d) / d:+.2%}" if d else "-"
            print(f"{d:>8} us {found:>7.0f} us {lo:>9.0f} .. {hi:>6.0f} us {found - d:>14.0f} us {err:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
