"""Headers of the NIC's own control frames: acks, probes and nacks.

One definition for the emulated NICs and the live ones (emu.hw): a control frame is
header-only (a nack carries its missing-fragment bitmap) and names the message it is
about by that message's ``msg_id`` and first ``seq``; its source is the ack's
destination, or the probe's own source. A probe is an ``ack`` with ACK_REQ set: it
asks the receiver to answer with an ack or a nack.
"""

from __future__ import annotations

from ..codec import Collective, Flags, Op, Stage

TTL = 16  # the header's default hop limit


def control_meta(src: int, dst: int, op: Op, *, msg_id: int = 0, seq: int = 0, probe: bool = False) -> dict:
    return dict(op=int(op), stage=int(Stage.control), collective=int(Collective.unicast), src_node=src,
                dst_set=(1 << dst) if dst < 64 else 0, ttl=TTL, msg_id=msg_id & 0xFFFFFFFF, seq=seq & 0xFFFFFFFF,
                flags=int(Flags.ACK_REQ) if probe else 0)
