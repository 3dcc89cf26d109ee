"""The retransmission timeout of one (sender, receiver) pair, in the manner of RFC 6298.

Samples are the time from a message's last fragment leaving the wire to its completion ack
arriving back at the sender, which is exactly what the timer times. Karn's rule is the
caller's: no sample from a probe's answer, nor from a message that was resent, since its
ack may answer the resend.

Integer picoseconds throughout, with the RFC's gains (alpha = 1/8, beta = 1/4, K = 4) as
shifts, the way a hardware estimator would compute them:

    first sample R:  SRTT = R,  RTTVAR = R / 2
    later samples:   RTTVAR = (3 RTTVAR + |SRTT - R|) / 4,  SRTT = (7 SRTT + R) / 8
    RTO = min(max, max(min, SRTT + 4 RTTVAR))

Before any sample the RTO is the initial value. A timeout doubles it (back-off, up to the
maximum) until the next valid sample recomputes it from SRTT and RTTVAR. Each row also
keeps its worst recent sample (``RT_WORST``: the largest, forgetting 1/2^WORST_DECAY_SHIFT
of itself per sample), a floor the protocol's ``message_rto`` puts under a message's timeout.

A board keeps one row per peer in an int64 table, ``RT`` (``PEERS`` below: columns
``RT_SRTT``, ``RT_RTTVAR``, ``RT_RTO``, ``RT_WORST``; SRTT -1 before the first sample): ``rto_sample``
and ``rto_backoff`` take the table, the row and scalars only, the form a compiled loop or a register file can hold; they are
compiled with numba (``.py_func`` is the same function in Python).
``RtoEstimator`` is a view of one row, for callers that want one pair.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .. import compiled_cache  # noqa: F401  (before any cached function: their cache stamp)
from ..net.tables import Table

PEERS = Table("retransmission timeout per peer (RT)", "RT", (
    ("srtt", "smoothed round-trip time, ps (NO_SAMPLE before the first sample)"),
    ("rttvar", "its variation, ps"),
    ("rto", "the retransmission timeout, ps"),
    ("worst", "the largest recent RTT sample, ps, decaying by 1/2^WORST_DECAY_SHIFT at each sample"),
))
# PEERS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(RT_SRTT, RT_RTTVAR, RT_RTO, RT_WORST) = range(4)
RT_NCOLS = 4
NO_SAMPLE = -1
WORST_DECAY_SHIFT = 10  # the worst RTT forgets 1/1024 of itself per sample (halves in ~700)
WORST_FACTOR = 2        # a message's timeout is at least this many times its board's worst recent RTT


def rto_table(peers: int, min_ps: int, initial_ps: int, max_ps: int) -> np.ndarray:
    """One row per peer, before any sample."""
    rt = np.zeros((peers, RT_NCOLS), np.int64)
    rt[:, RT_SRTT] = NO_SAMPLE
    rt[:, RT_RTO] = min(max_ps, max(min_ps, initial_ps))
    return rt


@njit(cache=True)
def rto_sample(rt, peer, r, min_ps, max_ps):
    """A valid RTT sample ``r`` (ps) towards ``peer``: recompute its RTO."""
    r = max(r, 0)
    srtt = rt[peer, RT_SRTT]
    if srtt == NO_SAMPLE:
        srtt, rttvar = r, r // 2
    else:
        rttvar = (3 * rt[peer, RT_RTTVAR] + abs(srtt - r)) // 4
        srtt = (7 * srtt + r) // 8
    rt[peer, RT_SRTT] = srtt
    rt[peer, RT_RTTVAR] = rttvar
    rt[peer, RT_RTO] = min(max_ps, max(min_ps, srtt + 4 * rttvar))
    w = rt[peer, RT_WORST]
    rt[peer, RT_WORST] = max(r, w - (w >> WORST_DECAY_SHIFT))


@njit(cache=True)
def rto_backoff(rt, peer, max_ps):
    """A timeout towards ``peer``: double its RTO, up to the ceiling."""
    rt[peer, RT_RTO] = min(max_ps, 2 * rt[peer, RT_RTO])


class RtoEstimator:
    """The estimator of one pair: row ``row`` of ``table`` (a table of its own if none is given)."""

    def __init__(self, min_ps: int, initial_ps: int, max_ps: int, table: np.ndarray | None = None, row: int = 0):
        self.min_ps, self.initial_ps, self.max_ps = int(min_ps), int(initial_ps), int(max_ps)
        self.table = rto_table(1, self.min_ps, self.initial_ps, self.max_ps) if table is None else table
        self.row = row

    @property
    def srtt(self) -> int | None:
        s = int(self.table[self.row, RT_SRTT])
        return None if s == NO_SAMPLE else s

    @property
    def rttvar(self) -> int:
        return int(self.table[self.row, RT_RTTVAR])

    @property
    def rto(self) -> int:
        return int(self.table[self.row, RT_RTO])

    def sample(self, r: int) -> None:
        rto_sample(self.table, self.row, int(r), self.min_ps, self.max_ps)

    def backoff(self) -> None:
        rto_backoff(self.table, self.row, self.max_ps)
