"""Ethernet framing arithmetic: what a frame costs on the wire beyond its bytes."""

FCS = 4                  # frame check sequence, appended by the MAC
PREAMBLE_SFD = 8         # preamble and start-of-frame delimiter
IFG = 12                 # minimum inter-frame gap
MIN_FRAME = 60           # minimum frame without FCS; shorter frames are padded

# Bytes a frame occupies on the wire beyond its captured length (header + payload).
WIRE_OVERHEAD = FCS + PREAMBLE_SFD + IFG

PS_PER_S = 10**12


def wire_bytes(frame_len: int) -> int:
    """Bytes of line time for a frame of ``frame_len`` bytes (Ethernet header included, FCS not)."""
    return max(frame_len, MIN_FRAME) + WIRE_OVERHEAD


def serialization_ps(frame_len: int, rate_bps: int) -> int:
    """Integer picoseconds to serialize one frame, rounded up so time never runs ahead of the wire."""
    return -(-wire_bytes(frame_len) * 8 * PS_PER_S // rate_bps)


_PER_MTU: dict[int, tuple[int, int]] = {}


def frame_sizes(msg_len: int, mtu: int) -> tuple[int, int, int]:
    """(fragments, frame bytes of a full fragment, frame bytes of the last) for a message.

    The arithmetic twin of ``emu.codec.fragment``: same fragment count and
    payload split, without building header rows, for timing-mode messages.
    """
    known = _PER_MTU.get(mtu)
    if known is None:
        from ..codec import FRAME_HEADER_LEN, max_payload

        known = _PER_MTU[mtu] = (max_payload(mtu), FRAME_HEADER_LEN)
    per, hdr = known
    nfrags = max(1, -(-msg_len // per))
    return nfrags, hdr + min(per, msg_len), hdr + msg_len - (nfrags - 1) * per
