"""Per-link time series: busy time, bytes, frames, queue depth and losses per time bin.

Two ways to fill the same bins. ``LinkStats.of(net, bin_ps)`` has the engine
accumulate them inside its frame loop (kernel table LB), so a run needs no
per-frame transmission log at all. A ``LinkStats(n_links, bin_ps)`` used as a log
sink folds blocks of transmission records into bins with numpy. Either way memory
follows the run's duration and the number of links, never the number of frames,
and both give the same table (the kernel's ``_bin_tx`` is this module's arithmetic,
record by record).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .ethernet import MIN_FRAME, WIRE_OVERHEAD
from .kernel import BINS, DROP_DOWN, LOG, SC_BIN_PS

if TYPE_CHECKING:  # pandas loads where a table is made, not with the replay (95 MiB with pyarrow)
    import pandas as pd


FIELDS = ("busy", "bytes", "frames", "queue", "lost")  # the kernel's BINS fields


class LinkStats:
    """``max_bins`` > 0 bounds the bins: when a run passes that many, the width doubles and
    neighbouring bins merge (exactly: sums, and the larger peak queue), as often as needed,
    so a run far longer than the width was chosen for keeps a table of at most that size."""

    def __init__(self, n_links: int, bin_ps: int, max_bins: int = 0):
        if bin_ps <= 0:
            raise ValueError("bin width must be positive")
        if max_bins < 0:
            raise ValueError("max_bins must be 0 (no limit) or positive")
        self.net = None
        self.n_links = n_links
        self._bin_ps = int(bin_ps)
        self.max_bins = int(max_bins)
        self.busy = np.zeros((n_links, 64), np.int64)
        self.bytes = np.zeros((n_links, 64), np.int64)
        self.frames = np.zeros((n_links, 64), np.int64)
        self.queue = np.zeros((n_links, 64), np.int64)
        self.lost = np.zeros((n_links, 64), np.int64)
        self.records = 0

    @classmethod
    def of(cls, net, bin_ps: int, max_bins: int = 0) -> "LinkStats":
        """Bins accumulated by ``net``'s frame loop (no transmission log needed)."""
        stats = cls(len(net.links), bin_ps, max_bins)
        net.bin_links(stats.bin_ps, stats.max_bins)
        stats.net = net
        return stats

    @property
    def bin_ps(self) -> int:
        """The bins' width (wider than asked for once a run passed ``max_bins`` bins). Widths
        only grow: the engine's, or the one ``frame`` widened its copy to for a later end."""
        if self.net is not None:
            return max(self._bin_ps, int(self.net.SC[SC_BIN_PS]))
        return self._bin_ps

    def _pull(self) -> None:
        """Copy the engine's bins (rows bin * links + link), at its width now, into the per-field arrays."""
        LB = self.net.link_bins()
        nb = LB.shape[0] // self.n_links
        self._bin_ps = int(self.net.SC[SC_BIN_PS])  # the engine may have widened its bins
        cube = LB[: nb * self.n_links].reshape(nb, self.n_links, BINS.width)
        for name in FIELDS:
            setattr(self, name, np.ascontiguousarray(cube[:, :, BINS.col(name)].T))

    def _ensure(self, nbins: int) -> None:
        have = self.busy.shape[1]
        if nbins <= have:
            return
        new = max(nbins, min(2 * have, self.max_bins) if self.max_bins else 2 * have)
        for name in ("busy", "bytes", "frames", "queue", "lost"):
            a = getattr(self, name)
            b = np.zeros((self.n_links, new), np.int64)
            b[:, :have] = a
            setattr(self, name, b)

    def __call__(self, rows: np.ndarray) -> None:
        """Fold a block of kernel transmission records (the kernel's LOG table) into the bins."""
        if self.net is not None:
            raise RuntimeError("these bins are filled by the engine; not a log sink")
        if rows.shape[0] == 0:
            return
        self.records += rows.shape[0]
        rec = LOG.records(rows)
        link = rec["link"]
        start = rec["start"]
        # A frame cut by a link failure was busy until the failure (its record's arrival time).
        end = np.where(rec["fate"] == DROP_DOWN, np.minimum(rec["end"], rec["arr"]), rec["end"])
        last = int(max(end.max() - 1, rec["enq"].max()))
        while self.max_bins and last // self._bin_ps + 1 > self.max_bins:
            self._coarsen()
        w = self._bin_ps
        b0 = start // w
        b1 = (end - 1) // w
        self._ensure(int(max(b1.max(), (rec["enq"] // w).max())) + 1)
        nb = self.busy.shape[1]
        wire = np.maximum(rec["len"], MIN_FRAME) + WIRE_OVERHEAD
        # Bytes and frames count in the bin where transmission started.
        flat0 = link * nb + b0
        self.bytes.ravel()[:] += np.bincount(flat0, weights=wire, minlength=self.n_links * nb).astype(np.int64)
        self.frames.ravel()[:] += np.bincount(flat0, minlength=self.n_links * nb)
        # Busy time: a frame's part in its first bin, its part in its last bin, and whole
        # bins in between (only for frames longer than a bin).
        size = self.n_links * nb
        edge = (b0 + 1) * w
        first = np.where(b0 == b1, end, edge) - start
        busy = np.bincount(flat0, weights=first, minlength=size)
        cross = b1 > b0
        if cross.any():
            busy += np.bincount(link[cross] * nb + b1[cross], weights=(end - b1 * w)[cross], minlength=size)
            for l, lo, hi in zip(link[cross].tolist(), (b0[cross] + 1).tolist(), b1[cross].tolist()):
                self.busy[l, lo:hi] += w
        self.busy.ravel()[:] += busy.astype(np.int64)
        # Frames lost on the wire (loss, corruption) count where their transmission ended.
        bad = rec["fate"] != 0
        if bad.any():
            flat1 = link[bad] * nb + (end[bad] - 1) // w
            self.lost.ravel()[:] += np.bincount(flat1, minlength=self.n_links * nb)
        # Queue depth: the largest backlog a frame found when it was queued, per bin.
        qb = rec["qb"]
        flatq = link * nb + rec["enq"] // w
        np.maximum.at(self.queue.ravel(), flatq, qb)

    def _coarsen(self) -> None:
        """Double the width: bin b becomes old bins 2b and 2b+1 (kernel.coarsen_bins's rule)."""
        nb = self.busy.shape[1]
        for name in FIELDS:
            a = getattr(self, name)
            if nb % 2:
                a = np.concatenate([a, np.zeros((self.n_links, 1), np.int64)], axis=1)
            pairs = a.reshape(self.n_links, -1, 2)
            setattr(self, name, pairs.max(axis=2) if name == "queue" else pairs.sum(axis=2))
        self._bin_ps *= 2

    def nbins(self, end_ps: int) -> int:
        return max(1, -(-int(end_ps) // self.bin_ps))

    def frame(self, links: list[tuple[int, int]], rates: np.ndarray, end_ps: int) -> pd.DataFrame:
        """Long table: one row per link direction and bin, with utilization in [0, 1]."""
        import pandas as pd

        if self.net is not None:
            self._pull()
        while self.max_bins and self.nbins(end_ps) > self.max_bins:
            self._coarsen()  # the clock's end is past the last bin the frames needed
        n = self.nbins(end_ps)
        self._ensure(n)
        L = self.n_links
        link = np.repeat(np.arange(L), n)
        b = np.tile(np.arange(n), L)
        t0 = b * self.bin_ps
        width = np.minimum(self.bin_ps, np.maximum(end_ps - t0, 1))
        busy = self.busy[:, :n].ravel()
        src = np.array([u for u, _ in links], np.int64)
        dst = np.array([v for _, v in links], np.int64)
        return pd.DataFrame({
            "link": link,
            "src": src[link],
            "dst": dst[link],
            "t_start_s": t0 / 1e12,
            "t_end_s": (t0 + width) / 1e12,
            "frames": self.frames[:, :n].ravel(),
            "wire_bytes": self.bytes[:, :n].ravel(),
            "busy_s": busy / 1e12,
            "utilization": np.minimum(busy / width, 1.0),
            "queue_bytes_max": self.queue[:, :n].ravel(),
            "lost_frames": self.lost[:, :n].ravel(),
        })
