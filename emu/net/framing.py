"""A message's frames and a frame's time on the wire: the arithmetic the compiled engine runs.

Compiled once and called by the frame kernel and the replay's NICs (inlined there) and by
Python alike, so the numbers a test or a reference model asks for come from the code the
emulator runs. emu.net.ethernet holds the constants; the payload a fragment carries at an
MTU is emu.codec's (``max_payload``), the header bytes before it the wire format's.
"""

from __future__ import annotations

from numba import njit

from .. import compiled_cache  # noqa: F401  (before any cached function: their cache stamp)
from .. import bits
from .ethernet import MIN_FRAME, PS_PER_S, WIRE_OVERHEAD

_arith = njit(cache=True, inline="always", _nrt=False)


@_arith
def fragments(size, per, hdr):
    """(fragments, frame bytes of a full fragment, frame bytes of the last) of a message of
    ``size`` payload bytes cut into fragments of ``per`` bytes, each behind ``hdr`` bytes of
    headers (emu.codec.fragment's split); an empty message is one frame of headers."""
    nfrags = bits.larger(1, (size + per - 1) // per)
    return nfrags, hdr + bits.smaller(per, size), hdr + size - (nfrags - 1) * per


@_arith
def wire_bytes(frame_len):
    """Bytes of line time a frame of ``frame_len`` bytes takes (Ethernet header included, FCS
    not): padded to the minimum frame, plus FCS, preamble and the inter-frame gap."""
    return bits.larger(frame_len, MIN_FRAME) + WIRE_OVERHEAD


@_arith
def serialization_ps(frame_len, rate):
    """Picoseconds to serialize a frame of ``frame_len`` bytes at ``rate`` bit/s, rounded up
    so time never runs ahead of the wire."""
    return (wire_bytes(frame_len) * 8 * PS_PER_S + rate - 1) // rate


_PER_MTU: dict[int, tuple[int, int]] = {}


def frame_sizes(msg_len: int, mtu: int) -> tuple[int, int, int]:
    """``fragments`` for a message at ``mtu``, for Python callers (the payload per fragment and
    the header bytes come from the wire format: emu.codec)."""
    known = _PER_MTU.get(mtu)
    if known is None:
        from ..codec import FRAME_HEADER_LEN, max_payload

        known = _PER_MTU[mtu] = (max_payload(mtu), FRAME_HEADER_LEN)
    return tuple(int(x) for x in fragments(msg_len, *known))
