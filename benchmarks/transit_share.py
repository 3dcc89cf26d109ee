"""Which frame-hops of a replay a train through forwarding nodes could take, from the per-frame log.

A train is granted on its stream's first link; a frame a board forwards still moves frame by
frame (docs/engine.md, "Trains"). This script replays a trace with a transmission log and
counts, per link, the frame-hops that are transit (forwarded, not the sending board's own), and
of those: the ones granted the instant they were offered (no wait behind other frames or the
arbiter), the ones whose previous transmission on the same link was the previous fragment of the
same message, and the ones that are both. The last figure bounds what a train through an
uncontended forwarding port would take over: a run of one message's frames granted as they
arrive, with nothing between them.

    python benchmarks/transit_share.py TRACE [--topology auto] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def transit_share(path: str, topology: str = "auto") -> dict:
    from emu.net import kernel as K
    from emu.replay.run import Options, Replay
    from emu.workload.trace import load_trace

    rp = Replay(load_trace(path), Options(topology=topology, routing="dateline", trains=False))
    links = len(rp.net.links) + rp.net.nodes  # physical links, then the datapaths
    prev_msg = np.full(links, -1, np.int64)
    prev_frag = np.full(links, -1, np.int64)
    n = dict(frame_hops=0, local=0, transit=0, granted_on_offer=0, continues_message=0, both=0)

    def sink(rows: np.ndarray) -> None:
        # A flush holds every record of its span: per link in start order, the last one carried over.
        rows = rows[np.lexsort((rows[:, K.G_START], rows[:, K.G_LINK]))]
        link = rows[:, K.G_LINK]
        same = np.r_[False, link[1:] == link[:-1]]
        pm = np.where(same, np.r_[-1, rows[:-1, K.G_MSG]], prev_msg[link])
        pf = np.where(same, np.r_[-1, rows[:-1, K.G_FRAG]], prev_frag[link])
        transit = rows[:, K.G_LOCAL] == 0
        on_offer = rows[:, K.G_START] == rows[:, K.G_ENQ]
        cont = (pm == rows[:, K.G_MSG]) & (pf == rows[:, K.G_FRAG] - 1)
        n["frame_hops"] += len(rows)
        n["local"] += int((~transit).sum())
        n["transit"] += int(transit.sum())
        n["granted_on_offer"] += int((transit & on_offer).sum())
        n["continues_message"] += int((transit & cont).sum())
        n["both"] += int((transit & on_offer & cont).sum())
        last = np.r_[~same[1:], True]
        prev_msg[link[last]] = rows[last, K.G_MSG]
        prev_frag[link[last]] = rows[last, K.G_FRAG]

    rp.net.log = True
    rp.net.log_sinks.append(sink)
    rp.run()
    return {"trace": path, "boards": rp.nodes, **n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--topology", default="auto")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = transit_share(args.trace, args.topology)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    hops, tr = r["frame_hops"], max(r["transit"], 1)
    print(f"{r['trace']} ({r['boards']} boards): {hops:,} frame-hops, {r['transit']:,} transit "
          f"({100 * r['transit'] / max(hops, 1):.1f}%); of the transit: granted on offer "
          f"{100 * r['granted_on_offer'] / tr:.1f}%, continuing its message on the link "
          f"{100 * r['continues_message'] / tr:.1f}%, both {100 * r['both'] / tr:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
