"""The Frames page's data: a capture decoded once into a columnar index, then filtered.

A 16-node 16K-token capture holds about 11.5 million frames (900 MB). Decoding it for every
request would take seconds, and holding it decoded in memory would take gigabytes, so the
first visit decodes the capture once in a background thread (the codec's ``read_capture``
and ``scan_frames``, which keep malformed frames with their reason) into a Parquet file in
the user's cache folder (``$XDG_CACHE_HOME/mcf-emu/frames``), named by a hash of the
capture's content: it survives restarts, and a changed capture gets a new index. One row
per frame, time-sorted row groups.

A cache file is checked before it is trusted: it records the capture it was built from
(size, mtime, a hash of its first MiB and of its whole content) and an index that does not
read, or was built from other bytes, or points outside the capture, is rebuilt. An
interrupted build (Ctrl-C, SIGTERM, the app stopping) removes its partial file. A query reads only the columns its filters need, skips
row groups by their time statistics, and decodes only the rows the table shows.

A pcapng capture with one interface per link direction (named ``U->V``) gives every hop its
link: the index keeps the interface of each record, so the link column names the direction
a frame crossed and the copies of a multicast frame are told apart. Without interfaces
(pcap) the board that transmitted the hop (its Ethernet source) is all there is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from emu.jsontext import parse_json

HEADER_FIELDS = ("version", "flags", "stage", "op", "collective", "reduce_op", "dtype", "ttl", "src_node", "route_id",
                 "dst_set", "kv_id", "layer", "frag_idx", "frag_cnt", "msg_id", "seq", "offset", "msg_len", "pay_len")
ROW_GROUP = 1 << 17
HIST_BINS = 400
INDEX_VERSION = 2  # bump when the index's columns change: old indexes are rebuilt
HEAD_BYTES = 1 << 20  # the head of the capture hashed into the index's record of its source
MAX_CAPLEN = 0x40000  # the codec's largest record: no frame read is longer
_IFNAME = re.compile(r"^\s*(\d+)\s*(?:->|→)\s*(\d+)\s*$")


def enum_names() -> dict[str, dict[int, str]]:
    from emu.codec.enums import ENUM_FIELDS  # light: no scapy

    return {f: {int(m): m.name for m in e} for f, e in ENUM_FIELDS.items()}


def flag_names(v: int) -> str:
    from emu.codec import Flags

    names = [f.name for f in Flags if v & int(f)]
    return "|".join(names) if names else "-"


def content_hash(path: Path, progress=None) -> str:
    """BLAKE2b of the file's bytes (the index's name: same content, same index)."""
    h = hashlib.blake2b(digest_size=16)
    size = max(path.stat().st_size, 1)
    done = 0
    with open(path, "rb") as fh:
        while True:
            b = fh.read(8 << 20)
            if not b:
                break
            h.update(b)
            done += len(b)
            if progress:
                progress(done / size)
    return h.hexdigest()


def head_hash(path: Path) -> str:
    """BLAKE2b of the first ``HEAD_BYTES`` of the file."""
    with open(path, "rb") as fh:
        return hashlib.blake2b(fh.read(HEAD_BYTES), digest_size=16).hexdigest()


class StaleIndex(Exception):
    """A cache file that is not a readable index of this capture (it is rebuilt)."""


@dataclass
class FrameFilter:
    ops: tuple = ()  # op values; -1 selects malformed frames
    src: int | None = None  # src_node
    dst: int | None = None  # board in dst_set (frames addressed by route id are not matched)
    hop: int | None = None  # board that transmitted the hop (Ethernet source)
    link: int | None = None  # capture interface (link direction), when the capture has them
    msg: tuple | None = None  # (src_node, msg_id): every fragment of one message, on every hop
    t_from: float | None = None  # seconds
    t_to: float | None = None

    def empty(self) -> bool:
        return not self.ops and self.src is None and self.dst is None and self.hop is None and self.link is None \
            and self.msg is None and self.t_from is None and self.t_to is None


def link_label(name: str) -> str:
    m = _IFNAME.match(name)
    return f"{m[1]}→{m[2]}" if m else name


class CaptureIndex:
    """Builds (once, in the background) and queries the frame index of one capture file."""

    def __init__(self, capture: Path, cache_dir: Path):
        self.capture = Path(capture)
        self.cache_dir = Path(cache_dir)
        self.size = self.capture.stat().st_size
        self.path: Path | None = None  # known once the content is hashed
        self.digest: str | None = None
        self.state = "new"  # new | hashing | building | ready | error
        self.error: str | None = None
        self.progress = 0.0
        self.n_frames = 0
        self.build_s = None
        self.hist = None  # (edges_s, {op: counts})
        self.reasons: dict[int, str] = {}
        self.links: list[str] = []  # interface names, by interface id ([] for pcap)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._tmp: Path | None = None
        self._cancel = False

    # -- build ------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self.state != "new":
                return
            self.state = "hashing"
            self._thread = threading.Thread(target=self._run, name="capture-index", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        """Start the build and wait for it; interrupted (Ctrl-C, SIGTERM), stop it first: the
        build thread is a daemon, and its cleanup would not run once the process exits."""
        self.start()
        if self._thread:
            try:
                self._thread.join(timeout)
            except BaseException:
                self.cancel()
                raise

    def cancel(self) -> None:
        """Stop a build and remove its partial file (Ctrl-C and SIGTERM alike)."""
        self._cancel = True
        if self._thread and self._thread.is_alive():
            self._thread.join(30)
        tmp = self._tmp
        if tmp is not None:
            try:
                tmp.unlink()
            except OSError:
                pass

    def _run(self) -> None:
        try:
            def hp(f):
                if self._cancel:
                    raise InterruptedError("cancelled")
                self.progress = 0.1 * f
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            self.digest = content_hash(self.capture, hp)
            self.path = self.cache_dir / f"frames-v{INDEX_VERSION}-{self.digest}.parquet"
            if self.path.exists() or self.path.is_symlink():
                try:
                    self._finish()
                    return
                except StaleIndex as exc:  # damaged, or another capture's: build it again
                    self._discard(exc)
            self.state = "building"
            self._build()
            if self._cancel:
                return
            try:
                self._finish()
            except StaleIndex as exc:
                raise StaleIndex(f"index {self.path} unreadable after a rebuild ({exc})") from None
        except Exception as exc:  # a malformed capture: say so on the page
            with self._lock:
                self.state, self.error = "error", f"{self.capture.name}: {exc}"

    def _discard(self, why: StaleIndex) -> None:
        """Remove a stale index, or say which file to delete when it cannot be removed."""
        try:
            self.path.unlink()
        except OSError as exc:
            raise StaleIndex(f"index {self.path} unusable ({why}) and cannot be removed "
                             f"({exc.strerror or exc}); delete it") from None

    def _build(self) -> None:
        t0 = time.perf_counter()
        self._tmp = tmp = self.path.with_name(f".{self.path.name}.part{os.getpid()}-{threading.get_ident()}")
        try:
            from emu.codec import REASONS, read_capture, scan_frames

            self.reasons = dict(enumerate(REASONS))
            with open(self.capture, "rb") as fh:
                ng = fh.read(4) == b"\x0a\x0d\x0d\x0a"
            mm = np.memmap(self.capture, dtype=np.uint8, mode="r") if self.size else np.zeros(0, np.uint8)
            writer = None
            rec = 0
            pending: list[pa.Table] = []
            n_pending = 0
            gaps_first, gaps_end = None, None  # for the interface scan: first record, end of the last
            gap_off, gap_tot = [], []
            for batch in read_capture(self.capture):
                if self._cancel:
                    raise InterruptedError("cancelled")
                h, codes, _, raw = scan_frames(batch.buf, batch.offsets, wirelen=batch.wirelen)
                n = len(h)
                off = batch.file_offset.astype(np.int64)
                caplen = np.diff(batch.offsets).astype(np.int64)
                cols = {"rec": np.arange(rec, rec + n, dtype=np.int64), "ts_ns": batch.ts_ns.astype(np.int64)}
                mcf = (raw[:, 6] == 0x02) & (raw[:, 7] == 0x4D) & (raw[:, 8] == 0x43) & (raw[:, 9] == 0x46)
                cols["hop"] = np.where(mcf, raw[:, 10].astype(np.int32) << 8 | raw[:, 11], -1).astype(np.int32)
                if ng and n:
                    iface = mm[off[:, None] + 8 + np.arange(4)].view("<u4").reshape(-1)
                    total = mm[off[:, None] + 4 + np.arange(4)].view("<u4").reshape(-1).astype(np.int64)
                    cols["link"] = iface.astype(np.int32)
                    cols["data_off"] = off + 28
                    # remember where other blocks (interfaces) may sit between records
                    if gaps_first is None:
                        gaps_first = int(off[0])
                    starts = np.r_[gaps_end if gaps_end is not None else off[0], (off + total)[:-1]]
                    g = np.flatnonzero(starts != off)
                    gap_off += starts[g].tolist()
                    gap_tot += (off[g] - starts[g]).tolist()
                    gaps_end = int(off[-1] + total[-1])
                else:
                    cols["link"] = np.full(n, -1, np.int32)
                    cols["data_off"] = off + 16
                cols["caplen"] = caplen.astype(np.uint32)
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
                if n:
                    self.progress = 0.1 + 0.89 * min(1.0, float(batch.file_offset[-1]) / max(self.size, 1))
            if ng:
                self.links = _pcapng_interfaces_from_gaps(self.capture, gaps_first, gaps_end, gap_off, gap_tot, self.size)
            meta = {b"emu.frames": json.dumps({"version": INDEX_VERSION, "capture": self.capture.name,
                                               "links": self.links, "source": self._source()}).encode()}
            if pending or writer is None:
                t = pa.concat_tables(pending) if pending else _empty_table()
                writer = writer or pq.ParquetWriter(tmp, t.schema, compression="snappy")
                writer.write_table(t, row_group_size=ROW_GROUP)
            writer.add_key_value_metadata(meta)
            writer.close()
            os.replace(tmp, self.path)
            self._tmp = None
            self.build_s = time.perf_counter() - t0
        except BaseException:
            try:
                tmp.unlink()
            except OSError:
                pass
            self._tmp = None
            raise

    def _source(self) -> dict:
        """What the index records of its capture, and checks before it is used."""
        st = self.capture.stat()
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "head": head_hash(self.capture), "digest": self.digest}

    def _finish(self) -> None:
        """Open the index and check it against the capture; ``StaleIndex`` when it does not fit."""
        if not self.reasons:
            from emu.codec import REASONS

            self.reasons = dict(enumerate(REASONS))
        try:
            pf = pq.ParquetFile(self.path)
            meta = parse_json((pf.metadata.metadata or {}).get(b"emu.frames", b"{}"), str(self.path), ValueError)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise StaleIndex(" ".join(str(exc).split())) from None
        self._check(pf, meta if isinstance(meta, dict) else {})
        self.links = [str(x) for x in meta.get("links") or []]
        self.n_frames = pf.metadata.num_rows
        try:
            self.hist = self._histogram(pf, FrameFilter())
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise StaleIndex(" ".join(str(exc).split())) from None
        with self._lock:
            self.state, self.progress = "ready", 1.0

    def _check(self, pf: pq.ParquetFile, meta: dict) -> None:
        src = meta.get("source") if isinstance(meta.get("source"), dict) else {}
        now = self._source()
        # the mtime is recorded but not compared: the same bytes copied anew are the same capture
        for key in ("size", "head", "digest"):
            if src.get(key) != now[key]:
                raise StaleIndex(f"built from another capture ({key} differs)")
        if meta.get("version") != INDEX_VERSION:
            raise StaleIndex(f"index version {meta.get('version')!r}, expected {INDEX_VERSION}")
        # every row must point inside the capture: the row groups' statistics tell without a read
        md, names = pf.metadata, pf.schema_arrow.names
        for col, lo, hi in (("data_off", 0, now["size"]), ("caplen", 0, MAX_CAPLEN)):
            if col not in names:
                raise StaleIndex(f"no {col} column")
            c = names.index(col)
            for g in range(md.num_row_groups):
                st = md.row_group(g).column(c).statistics
                if md.row_group(g).num_rows and (st is None or not st.has_min_max or st.min < lo or st.max > hi):
                    raise StaleIndex(f"{col} outside the capture in row group {g}")

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
        if flt.link is not None:
            m &= t["link"].to_numpy() == flt.link
        if flt.msg is not None:
            m &= (t["src_node"].to_numpy() == flt.msg[0]) & (t["msg_id"].to_numpy() == flt.msg[1])
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
        if flt.link is not None:
            cols.add("link")
        if flt.msg is not None:
            cols |= {"src_node", "msg_id"}
        if flt.dst is not None:
            cols |= {"dst_set", "route_id"}
        return sorted(cols)

    def _histogram(self, pf: pq.ParquetFile, flt: FrameFilter, tables=None):
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
            t = tables[g] if tables is not None and g in tables else pf.read_row_group(g, columns=cols)
            m = self._mask(t, flt)
            ts = t["ts_ns"].to_numpy()[m]
            op = np.where(t["err"].to_numpy()[m] != 0, -1, t["op"].to_numpy()[m].astype(np.int64))
            b = np.clip(((ts - t_lo) / width).astype(np.int64), 0, HIST_BINS - 1)
            key = (op + 1) * HIST_BINS + b  # one bincount for every op at once
            cnt = np.bincount(key, minlength=0)
            for o in np.unique(op).tolist():
                c = counts.setdefault(int(o), np.zeros(HIST_BINS, np.int64))
                part = cnt[(o + 1) * HIST_BINS:(o + 2) * HIST_BINS]
                c[:len(part)] += part
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
            cols = self._columns(flt, ("ts_ns", "op", "err") if histogram else ())
            total = 0
            found = []
            tables = {}
            for g, first, n in self._groups(pf, flt):
                t = pf.read_row_group(g, columns=cols)
                tables[g] = t
                idx = np.flatnonzero(self._mask(t, flt))
                if total < hi and total + len(idx) > lo:
                    a = max(lo - total, 0)
                    found.append(first + idx[a: a + (hi - max(lo, total))])
                total += len(idx)
            want = np.concatenate(found) if found else np.zeros(0, np.int64)
            hist = self._histogram(pf, flt, tables) if histogram else None
        rows = self._rows(pf, want)
        return total, rows, hist

    def _raw_rows(self, pf: pq.ParquetFile, recs: np.ndarray) -> list[dict]:
        md = pf.metadata
        starts = np.cumsum([0] + [md.row_group(g).num_rows for g in range(md.num_row_groups)])
        g_of = np.searchsorted(starts, recs, side="right") - 1
        out = []
        for g in np.unique(g_of).tolist():
            t = pf.read_row_group(g).take(pa.array(recs[g_of == g] - starts[g]))
            out += t.to_pylist()
        return out

    def _rows(self, pf: pq.ParquetFile, recs: np.ndarray) -> list[dict]:
        if not len(recs):
            return []
        names = enum_names()
        out = []
        for r in self._raw_rows(pf, recs):
            lk = int(r["link"])
            row = {"#": int(r["rec"]), "time s": f"{r['ts_ns'] / 1e9:.9f}",
                   "link": link_label(self.links[lk]) if 0 <= lk < len(self.links) else "-",
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

    def columns(self) -> list[str]:
        """The table's columns: the link column only when the capture names its links."""
        return [c for c in COLUMNS if c != "link" or self.links]

    # -- one frame --------------------------------------------------------------------------

    def frame(self, rec: int) -> tuple[dict, bytes] | None:
        """(index row, captured bytes) of record ``rec``, or None when there is no such record."""
        if self.state != "ready" or not isinstance(rec, int) or not 0 <= rec < self.n_frames:
            return None
        pf = pq.ParquetFile(self.path)
        row = self._raw_rows(pf, np.array([rec], np.int64))[0]
        with open(self.capture, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            off = min(max(int(row["data_off"]), 0), size)
            fh.seek(off)
            data = fh.read(min(int(row["caplen"]), MAX_CAPLEN, size - off))  # never more than one record
        return row, data

    def message_of(self, rec: int) -> tuple[int, int] | None:
        got = self.frame(rec)
        if got is None:
            return None
        return int(got[0]["src_node"]), int(got[0]["msg_id"])


def _pcapng_interfaces_from_gaps(path, first, end, gap_off, gap_tot, size) -> list[str]:
    """Interface names of a pcapng file, in id order. Interface blocks lie before the first
    record or between records (where a record does not start at the end of the previous one):
    only those spans are read."""
    spans = [(0, first if first is not None else size)]
    spans += [(a, a + n) for a, n in zip(gap_off, gap_tot)]
    if end is not None:
        spans.append((end, size))
    return _pcapng_interfaces_spans(path, spans)


def _pcapng_interfaces_spans(path: Path, spans) -> list[str]:
    names: list[str] = []
    with open(path, "rb") as fh:
        for a, b in spans:
            a, b = int(a), int(b)
            if b - a < 12 or b - a > 64 << 20:
                continue
            fh.seek(a)
            raw = fh.read(b - a)
            names = _idb_names(raw, names)
    return names


def _idb_names(raw: bytes, names: list[str]) -> list[str]:
    p = 0
    while p + 12 <= len(raw):
        btype = int.from_bytes(raw[p:p + 4], "little")
        blen = int.from_bytes(raw[p + 4:p + 8], "little")
        if blen < 12 or p + blen > len(raw):
            break
        if btype == 0x0A0D0D0A:
            names = []  # a new section numbers its interfaces from 0 again
        elif btype == 1:
            name = f"if{len(names)}"
            q = p + 16
            while q + 4 <= p + blen - 4:
                code = int.from_bytes(raw[q:q + 2], "little")
                ln = int.from_bytes(raw[q + 2:q + 4], "little")
                if code == 0:
                    break
                if code == 2:
                    name = raw[q + 4:q + 4 + ln].decode("utf-8", "replace").rstrip("\0")
                q += 4 + ln + (-ln % 4)
            names.append(name)
        p += blen
    return names


def _empty_table() -> pa.Table:
    cols = {"rec": pa.array([], pa.int64()), "ts_ns": pa.array([], pa.int64()), "hop": pa.array([], pa.int32()),
            "link": pa.array([], pa.int32()), "data_off": pa.array([], pa.int64()), "caplen": pa.array([], pa.uint32()),
            "err": pa.array([], pa.uint8()), "wirelen": pa.array([], pa.uint32())}
    from emu.codec import HEADER_DTYPE

    for f in HEADER_FIELDS:
        cols[f] = pa.array(np.zeros(0, HEADER_DTYPE[f].newbyteorder("=")))
    return pa.table(cols)


COLUMNS = ["#", "time s", "link", "hop from", "status", *HEADER_FIELDS, "wire len"]


class CaptureIndexes:
    """One index per capture file, built on first use, kept for the app's life."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = Path(cache_dir)
        self._d: dict[str, CaptureIndex] = {}
        self._lock = threading.Lock()

    def get(self, key: str, capture: Path) -> CaptureIndex:
        with self._lock:
            ix = self._d.get(key)
            if ix is None or ix.capture != Path(capture):
                ix = self._d[key] = CaptureIndex(capture, self.cache_dir)
        ix.start()
        return ix

    def close(self) -> None:
        with self._lock:
            ixs = list(self._d.values())
        for ix in ixs:
            ix.cancel()


# ------------------------------------------------------------------------------ one frame, decoded


def header_tree(row: dict, data: bytes, links: list[str], reasons: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """The frame as Wireshark's detail pane shows it: (section, [(field, value)]) with each
    field's value decoded (enums and flags by name, boards of dst_set) and its bytes."""
    from emu.codec.layer import field_layout
    from emu.codec.mac import ETH_LEN

    names = enum_names()
    lk = int(row["link"])
    sec = [("Frame", [("number", f"{int(row['rec'])}"), ("time", f"{int(row['ts_ns']) / 1e9:.9f} s"),
                      ("wire length", f"{int(row['wirelen'])} bytes"), ("captured", f"{len(data)} bytes"),
                      ("link", link_label(links[lk]) if 0 <= lk < len(links) else "not recorded (no interfaces)"),
                      ("status", "ok" if int(row["err"]) == 0 else f"malformed: {reasons.get(int(row['err']), row['err'])}")])]

    def mac(b: bytes) -> str:
        s = ":".join(f"{x:02x}" for x in b)
        if len(b) == 6 and b[1:4] == b"MCF":
            who = int.from_bytes(b[4:6], "big")
            return s + (f" (route/group {who})" if b[0] & 1 else f" (board {who})")
        return s

    if len(data) >= ETH_LEN:
        sec.append(("Ethernet II", [("destination", mac(data[0:6]) + "  [bytes 0–5]"),
                                    ("source", mac(data[6:12]) + "  [bytes 6–11]"),
                                    ("type", f"0x{int.from_bytes(data[12:14], 'big'):04x}  [bytes 12–13]")]))
    fields = []
    for name, off, size in field_layout():
        a = ETH_LEN + off
        if a + size > len(data):
            fields.append((name, "not captured"))
            continue
        v = int(row[name])
        if name in names:
            txt = f"{names[name].get(v, '?')} ({v})"
        elif name == "flags":
            txt = f"0x{v:02x} {flag_names(v)}"
        elif name == "dst_set":
            boards = [str(i) for i in range(64) if v >> i & 1]
            txt = f"0x{v:016x} (boards {', '.join(boards) or 'none'})"
        else:
            txt = f"{v:,}"
        fields.append((name, f"{txt}  [bytes {a}–{a + size - 1}]"))
    sec.append(("MCF header", fields))
    from emu.codec.layer import FRAME_HEADER_LEN

    pay = int(row["pay_len"])
    have = max(0, len(data) - FRAME_HEADER_LEN)
    sec.append(("Payload", [("length", f"{pay:,} bytes"), ("captured", f"{min(have, pay):,} bytes"
                                                                   + (" (timing-mode capture: headers only)" if have < pay else ""))]))
    return sec


def hexdump(data: bytes) -> str:
    """Offset, 16 bytes in hex, and their printable characters, per line."""
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i:i + 16]
        hx = " ".join(f"{b:02x}" for b in chunk[:8]) + "  " + " ".join(f"{b:02x}" for b in chunk[8:])
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:04x}  {hx:<49}  {asc}")
    return "\n".join(lines)
