"""PAUSE thresholds and credits of a link direction (docs/engine.md, "Port buffers and flow control").

Node v accounts, for each link u->v, the bytes of frames that arrived over it and wait in v's
transit queues (one count per copy). When they reach XOFF, v sends u a PAUSE; u's port u->v
obeys it ``delay`` later (the PAUSE frame's own wire time on v->u plus v->u's propagation) and
starts no frame until the resume, which v sends when the count falls below XON. XOFF leaves the
buffer room for what can still arrive after the decision (the headroom):

    window   = u->v's latency (propagation + v's forwarding) + delay
               + v's datapath allowance (one largest frame per ingress port, + its latency)
               + one largest frame's time on u->v (the frame on the wire when the PAUSE lands)
    headroom = (window x rate / 8 + 2 largest frames) x copies

where ``copies`` is v's out-degree (a multicast frame is counted once per egress copy).
XON = XOFF - 2 largest frames: the hysteresis keeps PAUSE and resume from alternating per frame.

Under credit, port u->v starts with ``buffer`` bytes of credit (the room v keeps for frames
arriving over u->v); what v returns reaches u ``delay`` later, the same delay as a PAUSE's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codec.mac import ETH_LEN
from ..errors import ConfigError
from .ethernet import MIN_FRAME, PS_PER_S
from .framing import serialization_ps


@dataclass(frozen=True)
class Thresholds:
    xoff: int      # bytes held for the link at which its far node sends PAUSE
    xon: int       # ... and below which it sends the resume
    delay_ps: int  # from the far node's decision to the port obeying it
    headroom: int  # bytes the buffer keeps above XOFF


def network_flags(flow_control: str) -> dict:
    """``Network``'s switches for an hw.flow_control mode: ``ideal`` is the lossless unbounded
    queue, ``pause`` and ``credit`` bound it with back-pressure, ``drop`` drops at the bound."""
    return {"lossless": flow_control == "ideal", "pause": flow_control == "pause",
            "credit": flow_control == "credit"}


def signal_delay(topology, u: int, v: int) -> int:
    """From v's decision to u's port having it: a minimum frame's wire time on v->u plus v->u's
    propagation (a PAUSE or resume, or a credit return). Every Ethernet link is full duplex:
    where the topology routes no data v -> u (a one-way ring), the signal still takes the
    cable's other direction, at the link's own rate and latency."""
    back = topology.edges[v, u] if topology.has_edge(v, u) else topology.edges[u, v]
    return serialization_ps(MIN_FRAME, int(back["rate_bps"])) + int(back["latency_ps"])


def credit(topology, u: int, v: int, buffer: int) -> int:
    """The delay of link u->v's credit returns, after checking that ``buffer`` bytes of credit
    start the largest frame however many transit copies v makes of it (one per egress port)."""
    delay = signal_delay(topology, u, v)
    need = (int(topology.edges[u, v]["mtu"]) + ETH_LEN) * topology.out_degree(v)
    if buffer < need:
        raise ConfigError(f"link {u}-{v}: a {buffer} B port buffer is too small for credit: the largest "
                          f"frame copied to each of node {v}'s {topology.out_degree(v)} ports needs {need} B")
    return delay


def thresholds(topology, u: int, v: int, buffer: int, lat_uv: int, datapath_rate: int, datapath_lat: int
               ) -> Thresholds:
    """The PAUSE thresholds of link u->v with ``buffer`` bytes at v; ``lat_uv`` is the link's
    latency to v's forwarding (propagation, plus v's latency when v has no finite datapath)."""
    a = topology.edges[u, v]
    delay = signal_delay(topology, u, v)
    rate, frame = int(a["rate_bps"]), int(a["mtu"]) + ETH_LEN
    window = lat_uv + delay + serialization_ps(frame, rate)
    if datapath_rate:
        window += topology.in_degree(v) * serialization_ps(frame, datapath_rate) + datapath_lat
    headroom = (-(-window * rate // (8 * PS_PER_S)) + 2 * frame) * max(1, topology.out_degree(v))
    xoff = buffer - headroom
    xon = xoff - 2 * frame
    if xon < frame:
        raise ConfigError(f"link {u}-{v}: a {buffer} B port buffer leaves no room for pause: it needs "
                          f"{headroom} B of headroom (frames in flight while the PAUSE travels) and 3 "
                          f"frames below it, at least {headroom + 3 * frame} B")
    return Thresholds(xoff=xoff, xon=xon, delay_ps=delay, headroom=headroom)
