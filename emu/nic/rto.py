"""The retransmission timeout of one (sender, receiver) pair, in the manner of RFC 6298.

Samples are the time from a message's last fragment leaving the wire to its ack arriving
back at the sender, which is exactly what the timer times. Karn's rule is the caller's:
no sample from a message that was probed or resent, since its ack may answer either.

Integer picoseconds throughout, with the RFC's gains (alpha = 1/8, beta = 1/4, K = 4) as
shifts, the way a hardware estimator would compute them:

    first sample R:  SRTT = R,  RTTVAR = R / 2
    later samples:   RTTVAR = (3 RTTVAR + |SRTT - R|) / 4,  SRTT = (7 SRTT + R) / 8
    RTO = min(max, max(min, SRTT + 4 RTTVAR))

Before any sample the RTO is the initial value. A timeout doubles it (back-off, up to the
maximum) until the next valid sample recomputes it from SRTT and RTTVAR.

A board keeps one row per peer in an int64 table (columns ``SRTT``, ``RTTVAR``, ``RTO``;
SRTT -1 before the first sample): ``rto_sample`` and ``rto_backoff`` take the table, the
row and scalars only, the form a compiled loop or a register file can hold; they are
compiled with numba (``.py_func`` is the same function in Python).
``RtoEstimator`` is a view of one row, for callers that want one pair.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .. import compiled_cache  # noqa: F401  (before any cached function: their cache stamp)

SRTT, RTTVAR, RTO = 0, 1, 2
RTO_COLS = 3
NO_SAMPLE = -1


def rto_table(peers: int, min_ps: int, initial_ps: int, max_ps: int) -> np.ndarray:
    """One row per peer, before any sample."""
    rt = np.zeros((peers, RTO_COLS), np.int64)
    rt[:, SRTT] = NO_SAMPLE
    rt[:, RTO] = min(max_ps, max(min_ps, initial_ps))
    return rt


@njit(cache=True)
def rto_sample(rt, peer, r, min_ps, max_ps):
    """A valid RTT sample ``r`` (ps) towards ``peer``: recompute its RTO."""
    r = max(r, 0)
    srtt = rt[peer, SRTT]
    if srtt == NO_SAMPLE:
        srtt, rttvar = r, r // 2
    else:
        rttvar = (3 * rt[peer, RTTVAR] + abs(srtt - r)) // 4
        srtt = (7 * srtt + r) // 8
    rt[peer, SRTT] = srtt
    rt[peer, RTTVAR] = rttvar
    rt[peer, RTO] = min(max_ps, max(min_ps, srtt + 4 * rttvar))


@njit(cache=True)
def rto_backoff(rt, peer, max_ps):
    """A timeout towards ``peer``: double its RTO, up to the ceiling."""
    rt[peer, RTO] = min(max_ps, 2 * rt[peer, RTO])


class RtoEstimator:
    """The estimator of one pair: row ``row`` of ``table`` (a table of its own if none is given)."""

    def __init__(self, min_ps: int, initial_ps: int, max_ps: int, table: np.ndarray | None = None, row: int = 0):
        self.min_ps, self.initial_ps, self.max_ps = int(min_ps), int(initial_ps), int(max_ps)
        self.table = rto_table(1, self.min_ps, self.initial_ps, self.max_ps) if table is None else table
        self.row = row

    @property
    def srtt(self) -> int | None:
        s = int(self.table[self.row, SRTT])
        return None if s == NO_SAMPLE else s

    @property
    def rttvar(self) -> int:
        return int(self.table[self.row, RTTVAR])

    @property
    def rto(self) -> int:
        return int(self.table[self.row, RTO])

    def sample(self, r: int) -> None:
        rto_sample(self.table, self.row, int(r), self.min_ps, self.max_ps)

    def backoff(self) -> None:
        rto_backoff(self.table, self.row, self.max_ps)
