"""The NICs a replay installs before it runs: their configuration, their routes, the board
tree of each reduction.

What the boards do with frames is ``emu.nic.protocol`` (the code `emu hw serve` runs) and,
in a replay, the compiled loop (emu.engine.nic); the Python reference of the same
NICs, message by message, is the test suite's (tests/pycluster.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..codec import max_payload
from ..errors import ConfigError
from ..topology import reduction_parents
from . import protocol as P

CONTROL_LEN = 0  # acks, probes, drains, invalidates and signals are header-only: the Meta says it all
CONTROL_OPS = ("ack", "nack", "probe", "drain", "invalidate", "signal")  # what control_frames_by_op counts


@dataclass(frozen=True)
class NicConfig:
    mtu: int = 1500
    fifo_bytes: int = 16 << 20     # payload FIFO of the packetization buffer: the KR260 profile's comm_buffer
    fifo_entries: int = 256        # metadata FIFO
    reliable: bool = True
    # Retransmission timeout (emu.nic.rto; the kr260 values and why: docs/nic.md), the
    # protocol's defaults: 100 us floor, 1 ms before the first RTT sample of a pair, 64 ms
    # back-off ceiling, 20 timeouts.
    rto_min_ps: int = P.ProtocolConfig.rto_min_ps
    rto_initial_ps: int = P.ProtocolConfig.rto_initial_ps
    rto_max_ps: int = P.ProtocolConfig.rto_max_ps
    max_retries: int = P.ProtocolConfig.max_retries

    def protocol(self) -> P.ProtocolConfig:
        return P.ProtocolConfig(rto_min_ps=self.rto_min_ps, rto_initial_ps=self.rto_initial_ps,
                                rto_max_ps=self.rto_max_ps, max_retries=self.max_retries)


class Nics:
    """All boards' NICs on ``net`` as installed: ``config``, and ``routes`` (the healthy
    topology's until a re-route replaces them)."""

    def __init__(self, net, routes, config: NicConfig = NicConfig()):
        if max_payload(config.mtu) <= 0:
            raise ConfigError(f"mtu {config.mtu} leaves no room for payload")
        self.net, self.routes, self.config = net, routes, config
        self.boards = net.boards

    def board_tree(self, root: int, members: Iterable[int]) -> dict[int, int]:
        """Parent of each member in a reduction towards ``root`` (emu.topology.reduction_parents)."""
        return reduction_parents(self.net.topology, self.routes, root, members)
