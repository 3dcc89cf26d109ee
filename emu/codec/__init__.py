"""The MCF wire format: one header declaration and everything that reads or writes it.

- ``enums``: the header's enumerations (Stage, Op, Collective, ReduceOp, Dtype, Flags)
- ``layer``: the scapy layer ``MCF`` (the single declaration), MAC addressing
- ``batch``: numpy structured-array codec for whole batches of frames
- ``fragment``: MTU fragmentation and reassembly
- ``pcap``: pcap / pcapng writing and streaming reading
- ``dissector``: the generated Wireshark Lua dissector (``mcfemu.lua``)
- ``summary``: capture summaries for ``emu pcap``

Imports nothing of the project but its errors, so the emulator, capture tools
and board I/O share it. Names are loaded lazily: ``from emu.codec.enums import Op``
stays cheap (no scapy).
"""

import importlib

# name -> submodule; loaded on first use, so ``emu.codec.enums`` alone does not import scapy
_EXPORTS = {
    "batch": ["HEADER_DTYPE", "REASONS", "Frames", "as_headers", "check_headers", "decode_frames", "encode_frames",
              "frame_wirelen", "header_errors", "new_headers", "scan_frames"],
    "enums": ["ENUM_FIELDS", "ETHERTYPE", "VERSION", "Collective", "Dtype", "Flags", "Op", "ReduceOp", "Stage"],
    "errors": ["EncodeError", "FrameError"],
    "fragment": ["Message", "Pending", "Reassembler", "fragment", "max_payload"],
    "layer": ["FRAME_HEADER_LEN", "HEADER_LEN", "MCF", "dst_mac", "group_mac", "mcf_frame", "node_mac"],
    "pcap": ["HEADERS_ONLY", "CaptureBatch", "CaptureReader", "CaptureWriter", "read_capture", "to_ns"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
