"""The MCF wire format: one header declaration and everything that reads or writes it.

- ``enums``: the header's enumerations (Stage, Op, Collective, ReduceOp, Dtype, Flags)
- ``layer``: the scapy layer ``MCF`` (the single declaration), MAC addressing
- ``batch``: numpy structured-array codec for whole batches of frames
- ``fragment``: MTU fragmentation and reassembly
- ``pcap``: pcap / pcapng writing and streaming reading
- ``dissector``: the generated Wireshark Lua dissector (``mcfemu.lua``)
- ``summary``: capture summaries for ``emu pcap``

Imports nothing of the project but its errors, so the emulator, capture tools
and board I/O share it. Scapy is loaded only by the names that need it (the
layer and the batch codec), so ``from emu.codec import Op`` stays cheap.
"""

import importlib

# ``fragment`` is both a submodule and a function: importing the (light) submodule
# here, once, leaves the package attribute bound to the function for good
from .enums import ENUM_FIELDS, ETHERTYPE, REPLY_OPS, VERSION, Collective, Dtype, Flags, Op, ReduceOp, Stage
from .errors import EncodeError, FrameError
from .fragment import Message, Pending, Reassembler, fragment, max_payload

# the rest load on first use, so the enums, fragmentation and capture I/O do not import scapy
_LAZY = {
    "batch": ["HEADER_DTYPE", "REASONS", "Frames", "as_headers", "check_headers", "decode_frames", "encode_frames",
              "frame_wirelen", "header_errors", "new_headers", "scan_frames"],
    "layer": ["FRAME_HEADER_LEN", "HEADER_LEN", "MCF", "dst_mac", "group_mac", "mcf_frame", "node_mac"],
    "pcap": ["HEADERS_ONLY", "CaptureBatch", "CaptureReader", "CaptureWriter", "read_capture", "to_ns"],
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}
__all__ = sorted([*_WHERE, "ENUM_FIELDS", "ETHERTYPE", "VERSION", "Collective", "Dtype", "Flags", "Op", "ReduceOp",
                  "Stage", "EncodeError", "FrameError", "Message", "Pending", "Reassembler", "fragment", "max_payload"])


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
