"""The hardware path: MCF frames on a real network interface.

- ``rawsock``: one AF_PACKET socket per interface (EtherType 0x88B5, BPF filter),
  batched ``sendmmsg`` / ``recvmmsg`` into preallocated buffers;
- ``send``: frames of a capture (or a trace's replay) on the wire, paced;
- ``listen``: frames off the wire, validated and counted in batches, captured;
- ``model``: the board NIC's wire semantics shared by ``serve`` and ``check``;
- ``serve``: the NIC of one board as a live device (``emu hw serve``);
- ``check``: conformance scenarios and field-by-field diffs (``emu hw check``).

Linux only (AF_PACKET); raw sockets need root or CAP_NET_RAW. See docs/hardware.md.
"""
