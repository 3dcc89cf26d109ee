"""The MCF wire format: one header declaration and everything that reads or writes it.

- ``enums``: the header's enumerations (Stage, Op, Collective, ReduceOp, Dtype, Flags)
- ``layer``: the scapy layer ``MCF`` (the single declaration), MAC addressing
- ``batch``: numpy structured-array codec for whole batches of frames
- ``fragment``: MTU fragmentation and reassembly
- ``pcap``: pcap / pcapng writing and streaming reading
- ``dissector``: the generated Wireshark Lua dissector (``mcfemu.lua``)
- ``summary``: capture summaries for ``emu pcap``

Imports nothing of the project but its errors, so the emulator, capture tools
and board I/O share it.
"""

from .batch import (
    HEADER_DTYPE,
    REASONS,
    Frames,
    as_headers,
    check_headers,
    decode_frames,
    encode_frames,
    frame_wirelen,
    header_errors,
    new_headers,
    scan_frames,
)
from .enums import ENUM_FIELDS, ETHERTYPE, VERSION, Collective, Dtype, Flags, Op, ReduceOp, Stage
from .errors import EncodeError, FrameError
from .fragment import Message, Pending, Reassembler, fragment, max_payload
from .layer import FRAME_HEADER_LEN, HEADER_LEN, MCF, dst_mac, group_mac, mcf_frame, node_mac
from .pcap import HEADERS_ONLY, CaptureBatch, CaptureReader, CaptureWriter, read_capture, to_ns

__all__ = [
    "HEADER_DTYPE", "HEADER_LEN", "FRAME_HEADER_LEN", "HEADERS_ONLY", "REASONS", "ETHERTYPE", "VERSION",
    "ENUM_FIELDS", "Stage", "Op", "Collective", "ReduceOp", "Dtype", "Flags",
    "MCF", "mcf_frame", "node_mac", "group_mac", "dst_mac",
    "Frames", "new_headers", "as_headers", "check_headers", "header_errors", "frame_wirelen",
    "encode_frames", "decode_frames", "scan_frames",
    "fragment", "max_payload", "Reassembler", "Message", "Pending",
    "CaptureWriter", "CaptureReader", "CaptureBatch", "read_capture", "to_ns",
    "FrameError", "EncodeError",
]
