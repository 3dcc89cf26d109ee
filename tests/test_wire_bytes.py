"""Wire bytes counted from the frame format written out here, not from the code that counts them.

docs/wire-format.md: a frame is Ethernet (14 B) + MCF header (48 B) + payload, at most
MTU - 48 = 1452 B of payload under a 1500-byte MTU, never padded (62 B is above Ethernet's
60-byte minimum). docs/engine.md: on the wire each frame also costs preamble and SFD (8 B),
FCS (4 B) and the inter-frame gap (12 B). So a message of n bytes is ceil(n / 1452) frames
(one if n is 0), the full ones 14 + 48 + 1452 + 24 = 1538 B on the wire, the last
14 + 48 + (n - 1452 * (frames - 1)) + 24. tests/test_replay_shipped.py counts the shipped
traces' wire bytes with the project's own framing (frame_sizes) and trees (multicast_tree);
these are the same counts by hand.
"""

import copy

import pytest
from test_replay_shipped import per_link_wire

import emu
from emu.replay.summary import summarize
from emu.replay.run import Options, Replay
from emu.workload.builder import OpBuilder
from emu.workload.enums import MsgOp, Stage
from emu.workload.trace import from_columns

ETH, MCF, PREAMBLE_SFD, FCS, GAP = 14, 48, 8, 4, 12   # docs/wire-format.md, docs/engine.md
ON_WIRE = ETH + MCF + PREAMBLE_SFD + FCS + GAP        # 86 B around every frame's payload
FULL = 1500 - MCF                                     # payload of a full frame, MTU 1500


@pytest.mark.parametrize("nbytes, wire", [
    (0, ON_WIRE),                                     # header-only (a control frame): 86
    (1, ON_WIRE + 1),
    (FULL, ON_WIRE + FULL),                           # one full frame: 1538
    (FULL + 1, 2 * ON_WIRE + FULL + 1),               # a full frame and a 1-byte one: 1625
    (4000, 3 * ON_WIRE + 4000),                       # 1452 + 1452 + 1096: 4258
    (65_536, 46 * ON_WIRE + 65_536),                  # 45 full frames and 196 bytes
])
def test_the_shipped_count_per_link_is_the_frame_format_by_hand(nbytes, wire):
    assert per_link_wire(nbytes, 1500) == wire


def test_a_multicast_costs_each_link_of_its_tree_once_by_hand():
    """On bring:4 (0-1-2-3-0) a 4000-byte multicast from board 0 to {1, 2, 3} takes 0->1,
    1->2 (routes to 2 go by the lower next hop, 1) and 0->3: 3 links of 3 frames, 4258 B
    each. A 1452-byte unicast from 1 to 3 is one full frame over 2 hops. Both engines."""
    base = emu.trace("ring", nodes=4, seq=1024, chunk=512)  # its profiles; the ops are these two
    b = OpBuilder()
    b.send(Stage.prefill, MsgOp.kv_transfer, 0, [1, 2, 3], 4000)
    b.send(Stage.prefill, MsgOp.kv_transfer, 1, [3], FULL)
    trace = from_columns(copy.deepcopy(base.meta), copy.deepcopy(base.schedule), b.columns())
    for engine in ("compiled", "python"):
        s = summarize(Replay(trace, Options(topology="bring:4", engine=engine)).run())
        assert s["incomplete_ops"] == 0
        assert s["wire_bytes"] == 3 * (3 * ON_WIRE + 4000) + 2 * (ON_WIRE + FULL) == 15_850
        assert s["frames"] == 3 * 3 + 2
