"""Ethernet framing arithmetic: what a frame costs on the wire beyond its bytes."""

FCS = 4                  # frame check sequence, appended by the MAC
PREAMBLE_SFD = 8         # preamble and start-of-frame delimiter
IFG = 12                 # minimum inter-frame gap
MIN_FRAME = 60           # minimum frame without FCS; shorter frames are padded

# Bytes a frame occupies on the wire beyond its captured length (header + payload).
WIRE_OVERHEAD = FCS + PREAMBLE_SFD + IFG

PS_PER_S = 10**12


_PER_MTU: dict[int, tuple[int, int]] = {}


def frame_sizes(msg_len: int, mtu: int) -> tuple[int, int, int]:
    """(fragments, frame bytes of a full fragment, frame bytes of the last) for a message at
    ``mtu``: emu.net.framing.fragments, the compiled engine's arithmetic."""
    known = _PER_MTU.get(mtu)
    if known is None:
        from ..codec import FRAME_HEADER_LEN, max_payload

        known = _PER_MTU[mtu] = (max_payload(mtu), FRAME_HEADER_LEN)
    from .framing import fragments

    return tuple(int(x) for x in fragments(msg_len, *known))
