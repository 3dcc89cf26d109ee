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
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RtoEstimator:
    min_ps: int
    initial_ps: int
    max_ps: int
    srtt: int | None = None
    rttvar: int = 0
    rto: int = 0

    def __post_init__(self):
        self.rto = self._clamp(self.initial_ps)

    def _clamp(self, x: int) -> int:
        return min(self.max_ps, max(self.min_ps, x))

    def sample(self, r: int) -> None:
        r = max(int(r), 0)
        if self.srtt is None:
            self.srtt, self.rttvar = r, r // 2
        else:
            self.rttvar = (3 * self.rttvar + abs(self.srtt - r)) // 4
            self.srtt = (7 * self.srtt + r) // 8
        self.rto = self._clamp(self.srtt + 4 * self.rttvar)

    def backoff(self) -> None:
        self.rto = min(self.max_ps, 2 * self.rto)
