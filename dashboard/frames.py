"""The Frames page's data: a capture decoded once into a columnar index, then filtered.

A 16-node 16K-token capture holds about 11.5 million frames (900 MB). Decoding it for every
request would take seconds, and holding it decoded in memory would take gigabytes, so the
first visit decodes the capture once in a background thread (the codec's ``read_capture``
and ``scan_frames``, which keep malformed frames with their reason) into a Parquet file in
the app's cache folder: one row per frame, time-sorted row groups. A query then reads only
the columns its filters need, skips row groups by their time statistics, and decodes only
the page of rows the table shows.

The capture records, for every hop, the board that transmitted the frame (its Ethernet
source MAC) but not the board that received it, so the "link" filter selects frames by the
transmitting board of the hop.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HEADER_FIELDS = ("version", "flags", "stage", "op", "collective", "reduce_op", "dtype", "ttl", "src_node", "route_id",
                 "dst_set", "kv_id", "layer", "frag_idx", "frag_cnt", "msg_id", "seq", "offset", "msg_len", "pay_len")
ROW_GROUP = 1 << 18
HIST_BINS = 400


def enum_names() -> dict[str, dict[int, str]]:
    from emu.codec.enums import ENUM_FIELDS  # light: no scapy

    return {f: {int(m): m.name for m in e} for f, e in ENUM_FIELDS.items()}


def flag_names(v: int) -> str:
    from emu.codec import Flags

    names = [f.name for f in Flags if v & int(f)]
    return "|".join(names) if names else "-"


@dataclass
class FrameFilter:
    ops: tuple = ()  # op values; -1 selects malformed frames
    src: int | None = None  # src_node
    dst: int | None = None  # board in dst_set (frames addressed by route id are not matched)
    hop: int | None = None  # board that transmitted the hop (Ethernet source)
    t_from: float | None = None  # seconds
    t_to: float | None = None

    def empty(self) -> bool:
        return not self.ops and self.src is None and self.dst is None and self.hop is None \
            and self.t_from is None and self.t_to is None


class CaptureIndex:
    """Builds (once, in the background) and queries the frame index of one capture file."""

    def __init__(self, capture: Path, cache_dir: Path):
        self.capture = Path(capture)
        st = self.capture.stat()
        tag = hashlib.sha1(f"{self.capture.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
        self.size = st.st_size
        self.path = Path(cache_dir) / f"frames-{tag}.parquet"
        self.state = "new"  # new | building | ready | error
        self.error: str | None = None
        self.progress = 0.0
        self.n_frames = 0
        self.build_s = None
        self.hist = None  # (edges_s, {op: counts})
        self.reasons: dict[int, str] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- build ------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self.state != "new":
                return
            self.state = "building"
            if self.path.exists():
                self._thread = threading.Thread(target=self._finish, name="capture-index", daemon=True)
            else:
                self._thread = threading.Thread(target=self._build, name="capture-index", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        self.start()
        if self._thread:
            self._thread.join(timeout)

    def _build(self) -> None:
        t0 = time.perf_counter()
        tmp = self.path.with_suffix(f".part{os.getpid()}")
        try:
            from emu.codec import REASONS, read_capture, scan_frames

            self.reasons = dict(enumerate(REASONS))
            writer = None
            rec = 0
            pending: list[pa.Table] = []
            n_pending = 0
            for batch in read_capture(self.capture):
                h, codes, _, raw = scan_frames(batch.buf, batch.offsets, wirelen=batch.wirelen)
                n = len(h)
                cols = {"rec": np.arange(rec, rec + n, dtype=np.int64), "ts_ns": batch.ts_ns.astype(np.int64)}
                mcf = (raw[:, 6] == 0x02) & (raw[:, 7] == 0x4D) & (raw[:, 8] == 0x43) & (raw[:, 9] == 0x46)
                cols["hop"] = np.where(mcf, raw[:, 10].astype(np.int32) << 8 | raw[:, 11], -1).astype(np.int32)
                cols["err"] = codes.astype(np.uint8)
                cols["wirelen"] = batch.wirelen.astype(np.uint32)
                for f in HEADER_FIELDS:
                    cols[f] = h[f].astype(h.dtype[f].newbyteorder("="))
                pending.append(pa.table(cols))
                n_pending += n
                rec += n
                if n_pending >= ROW_GROUP:
                    t = pa.concat_tables(pending)
                    writer = writer or pq.ParquetWriter(tmp, t.schema, compression="snappy")
                    writer.write_table(t, row_group_size=ROW_GROUP)
                    pending, n_pending = [], 0
                self.progress = min(0.99, float(batch.file_offset[-1]) / max(self.size, 1)) if n else self.progress
            if pending or writer is None:
                t = pa.concat_tables(pending) if pending else _empty_table()
                writer = writer or pq.ParquetWriter(tmp, t.schema, compression="snappy")
                writer.write_table(t, row_group_size=ROW_GROUP)
            writer.close()
            os.replace(tmp, self.path)
            self.build_s = time.perf_counter() - t0
            self._finish()
        except Exception as exc:  # a malformed capture: say so on the page
            try:
                tmp.unlink()
            except OSError:
                pass
            with self._lock:
                self.state, self.error = "error", f"{self.capture.name}: {exc}"

    def _finish(self) -> None:
        try:
            if not self.reasons:
                from emu.codec import REASONS

                self.reasons = dict(enumerate(REASONS))
            pf = pq.ParquetFile(self.path)
            self.n_frames = pf.metadata.num_rows
            self.hist = self._histogram(pf, FrameFilter())
            with self._lock:
                self.state, self.progress = "ready", 1.0
        except Exception as exc:
            with self._lock:
                self.state, self.error = "error", f"{self.capture.name}: index unreadable ({exc})"

    # -- query ------------------------------------------------------------------------------

    def _groups(self, pf: pq.ParquetFile, flt: FrameFilter):
        """Row groups that may hold frames in the time window: (index, first row, rows)."""
        md = pf.metadata
        ts_col = pf.schema_arrow.get_field_index("ts_ns")
        lo = None if flt.t_from is None else int(flt.t_from * 1e9)
        hi = None if flt.t_to is None else int(flt.t_to * 1e9)
        first = 0
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            n = rg.num_rows
            st = rg.column(ts_col).statistics
            skip = False
            if st is not None and st.has_min_max:
                if (lo is not None and st.max < lo) or (hi is not None and st.min > hi):
                    skip = True
            if not skip and n:
                yield g, first, n
            first += n

    @staticmethod
    def _mask(t: pa.Table, flt: FrameFilter) -> np.ndarray:
        n = t.num_rows
        m = np.ones(n, bool)
        if flt.t_from is not None:
            m &= t["ts_ns"].to_numpy() >= int(flt.t_from * 1e9)
        if flt.t_to is not None:
            m &= t["ts_ns"].to_numpy() <= int(flt.t_to * 1e9)
        if flt.ops:
            op = t["op"].to_numpy()
            sel = np.isin(op, [o for o in flt.ops if o >= 0])
            if -1 in flt.ops:
                sel |= t["err"].to_numpy() != 0
            m &= sel
        if flt.src is not None:
            m &= t["src_node"].to_numpy() == flt.src
        if flt.hop is not None:
            m &= t["hop"].to_numpy() == flt.hop
        if flt.dst is not None:
            if 0 <= flt.dst < 64:
                ds = t["dst_set"].to_numpy()
                m &= ((ds >> np.uint64(flt.dst)) & np.uint64(1)).astype(bool) & (t["route_id"].to_numpy() == 0)
            else:
                m &= False
        return m

    @staticmethod
    def _columns(flt: FrameFilter, extra=()) -> list[str]:
        cols = set(extra)
        if flt.t_from is not None or flt.t_to is not None:
            cols.add("ts_ns")
        if flt.ops:
            cols |= {"op", "err"}
        if flt.src is not None:
            cols.add("src_node")
        if flt.hop is not None:
            cols.add("hop")
        if flt.dst is not None:
            cols |= {"dst_set", "route_id"}
        return sorted(cols)

    def _histogram(self, pf: pq.ParquetFile, flt: FrameFilter):
        md = pf.metadata
        if md.num_rows == 0:
            return np.linspace(0, 1, HIST_BINS + 1), {}
        ts_col = pf.schema_arrow.get_field_index("ts_ns")
        t_lo = md.row_group(0).column(ts_col).statistics.min
        t_hi = md.row_group(md.num_row_groups - 1).column(ts_col).statistics.max
        if flt.t_from is not None:
            t_lo = max(t_lo, int(flt.t_from * 1e9))
        if flt.t_to is not None:
            t_hi = min(t_hi, int(flt.t_to * 1e9))
        t_hi = max(t_hi, t_lo + 1)
        width = (t_hi - t_lo) / HIST_BINS
        counts: dict[int, np.ndarray] = {}
        cols = self._columns(flt, ("ts_ns", "op", "err"))
        for g, _, _ in self._groups(pf, flt):
            t = pf.read_row_group(g, columns=cols)
            m = self._mask(t, flt)
            ts = t["ts_ns"].to_numpy()[m]
            op = np.where(t["err"].to_numpy()[m] != 0, -1, t["op"].to_numpy()[m].astype(np.int64))
            b = np.clip(((ts - t_lo) / width).astype(np.int64), 0, HIST_BINS - 1)
            for o in np.unique(op).tolist():
                c = counts.setdefault(int(o), np.zeros(HIST_BINS, np.int64))
                c += np.bincount(b[op == o], minlength=HIST_BINS)
        edges = (t_lo + np.arange(HIST_BINS + 1) * width) / 1e9
        return edges, counts

    def query(self, flt: FrameFilter, page: int = 0, page_size: int = 100, histogram: bool = True):
        """(matches, rows as a list of dicts for the page, histogram) of the frames that pass ``flt``."""
        if self.state != "ready":
            raise RuntimeError(f"capture index is {self.state}")
        pf = pq.ParquetFile(self.path)
        lo = page * page_size
        hi = lo + page_size
        if flt.empty():
            total = self.n_frames
            want = np.arange(min(lo, total), min(hi, total), dtype=np.int64)
            hist = self.hist
        else:
            cols = self._columns(flt)
            total = 0
            found = []
            for g, first, n in self._groups(pf, flt):
                t = pf.read_row_group(g, columns=cols)
                idx = np.flatnonzero(self._mask(t, flt))
                if total < hi and total + len(idx) > lo:
                    a = max(lo - total, 0)
                    found.append(first + idx[a: a + (hi - max(lo, total))])
                total += len(idx)
            want = np.concatenate(found) if found else np.zeros(0, np.int64)
            hist = self._histogram(pf, flt) if histogram else None
        rows = self._rows(pf, want)
        return total, rows, hist

    def _rows(self, pf: pq.ParquetFile, recs: np.ndarray) -> list[dict]:
        if not len(recs):
            return []
        md = pf.metadata
        starts = np.cumsum([0] + [md.row_group(g).num_rows for g in range(md.num_row_groups)])
        g_of = np.searchsorted(starts, recs, side="right") - 1
        out = []
        names = enum_names()
        for g in np.unique(g_of).tolist():
            t = pf.read_row_group(g).to_pandas()
            sub = t.iloc[recs[g_of == g] - starts[g]]
            for r in sub.to_dict("records"):
                row = {"#": int(r["rec"]), "time s": f"{r['ts_ns'] / 1e9:.9f}",
                       "hop from": int(r["hop"]) if r["hop"] >= 0 else "-",
                       "status": "ok" if r["err"] == 0 else f"malformed: {self.reasons.get(int(r['err']), r['err'])}"}
                for f in HEADER_FIELDS:
                    v = int(r[f])
                    if f in names:
                        row[f] = names[f].get(v, str(v))
                    elif f == "flags":
                        row[f] = flag_names(v)
                    elif f == "dst_set":
                        row[f] = f"0x{v:x}"
                    else:
                        row[f] = v
                row["wire len"] = int(r["wirelen"])
                out.append(row)
        return out


def _empty_table() -> pa.Table:
    cols = {"rec": pa.array([], pa.int64()), "ts_ns": pa.array([], pa.int64()), "hop": pa.array([], pa.int32()),
            "err": pa.array([], pa.uint8()), "wirelen": pa.array([], pa.uint32())}
    from emu.codec import HEADER_DTYPE

    for f in HEADER_FIELDS:
        cols[f] = pa.array(np.zeros(0, HEADER_DTYPE[f].newbyteorder("=")))
    return pa.table(cols)


COLUMNS = ["#", "time s", "hop from", "status", *HEADER_FIELDS, "wire len"]


class CaptureIndexes:
    """One index per capture file, built on first use, kept for the app's life."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._d: dict[str, CaptureIndex] = {}
        self._lock = threading.Lock()

    def get(self, key: str, capture: Path) -> CaptureIndex:
        with self._lock:
            ix = self._d.get(key)
            if ix is None or ix.capture != Path(capture):
                ix = self._d[key] = CaptureIndex(capture, self.cache_dir)
        ix.start()
        return ix
