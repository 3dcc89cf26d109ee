"""Ethernet framing arithmetic: what a frame costs on the wire beyond its bytes."""

FCS = 4                  # frame check sequence, appended by the MAC
PREAMBLE_SFD = 8         # preamble and start-of-frame delimiter
IFG = 12                 # minimum inter-frame gap
MIN_FRAME = 60           # minimum frame without FCS; shorter frames are padded

# Bytes a frame occupies on the wire beyond its captured length (header + payload).
WIRE_OVERHEAD = FCS + PREAMBLE_SFD + IFG

PS_PER_S = 10**12
