"""pcap and pcapng capture files: batched writing, streaming reading.

Writing takes whole batches of frames (flat buffer + offsets, as the batch codec makes
them, or frames the caller writes in place into the records) and issues one ``write`` per
~8 MB of records, on a thread of its own so that the disk's time overlaps the caller's.
Reading streams the file in chunks of ``batch_bytes`` and yields one ``CaptureBatch`` per
chunk, so memory stays constant however many frames the file holds. Timestamps are integer
nanoseconds throughout: pcap files use the nanosecond magic, pcapng files
declare ``if_tsresol`` = 10^-9.
"""

from __future__ import annotations

import contextlib
import os
import queue
import struct
import sys
import threading
from dataclasses import dataclass

import numpy as np

from ..atomic import atomic_file
from .errors import DecodeError, EncodeError
from .segments import as_uint8, copy_segments, scatter_rows

LINKTYPE_ETHERNET = 1
MAX_RECORD = 0x40000  # Wireshark's largest packet (262144)
HEADERS_ONLY = 62  # snaplen keeping the Ethernet and MCF headers

PCAP_MAGIC_NS = 0xA1B23C4D
PCAP_MAGIC_US = 0xA1B2C3D4
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_BOM = 0x1A2B3C4D
_IDB, _EPB, _SPB, _OLD_PB = 1, 6, 3, 2

_PCAP_REC = np.dtype([("sec", "<u4"), ("frac", "<u4"), ("incl", "<u4"), ("orig", "<u4")])
_EPB_HEAD = np.dtype([("type", "<u4"), ("total", "<u4"), ("iface", "<u4"), ("ts_hi", "<u4"),
                      ("ts_lo", "<u4"), ("incl", "<u4"), ("orig", "<u4")])
_NS = 1_000_000_000
_WRITE_BYTES = 8 << 20


def to_ns(seconds) -> np.ndarray:
    """Simulated time in seconds (float) -> integer nanoseconds, rounded to nearest."""
    return np.rint(np.asarray(seconds, dtype=np.float64) * 1e9).astype(np.int64)


@dataclass(frozen=True)
class CaptureBatch:
    """Frames read from a capture: captured bytes back to back, as ``decode_frames`` takes them."""

    buf: np.ndarray  # uint8
    offsets: np.ndarray  # int64, n + 1
    ts_ns: np.ndarray  # int64
    wirelen: np.ndarray  # int64, the frame's length on the wire (orig_len)
    first_record: int  # record number of frame 0 in the file, counting from 0
    file_offset: np.ndarray  # int64, byte offset of each record in the file
    linktype: int

    def __len__(self) -> int:
        return len(self.ts_ns)


# ---------------------------------------------------------------- writing


def _pcapng_option(code: int, value: bytes) -> bytes:
    pad = -len(value) % 4
    return code.to_bytes(2, "little") + len(value).to_bytes(2, "little") + value + b"\0" * pad


def _pcapng_block(btype: int, body: bytes) -> bytes:
    total = (12 + len(body)).to_bytes(4, "little")
    return btype.to_bytes(4, "little") + total + body + total


class _Spool:
    """A file's writes on a thread of their own, in order and at most ``depth`` buffers behind:
    the time the disk takes overlaps the caller's work (a replay's loop, for a capture). The
    first error a write raises is raised again by the next ``write`` or by ``close``."""

    def __init__(self, fh, depth: int = 4):
        self._fh, self._error, self._drop = fh, None, False
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._run, name="mcf-emu capture writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (buf := self._queue.get()) is not None:
            if self._error is None and not self._drop:
                try:
                    self._fh.write(buf)
                except BaseException as exc:  # handed to the caller
                    self._error = exc

    def write(self, buf) -> None:
        """Queue ``buf``, which the caller no longer changes."""
        self._raise()
        self._queue.put(buf)

    def close(self, write: bool = True) -> None:
        """Wait for the queued writes (``write=False``: drop them), then raise their error if any."""
        self._drop = not write
        self._queue.put(None)
        self._thread.join()
        if write:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


class CaptureWriter:
    """Writes frames to a pcap (nanosecond) or pcapng file; use as a context manager.

    The file appears only when the ``with`` block ends without an exception.
    ``interfaces`` (pcapng only): names of the interfaces to declare, one IDB each (e.g.
    one per link direction, ``"3->4"``); ``write(..., iface=...)`` says which carried a frame.
    """

    def __init__(self, path, *, format: str = "pcap", snaplen: int = 65535, linktype: int = LINKTYPE_ETHERNET,
                 interfaces=None):
        if format not in ("pcap", "pcapng"):
            raise EncodeError(f"format: {format!r}, expected 'pcap' or 'pcapng'")
        if not 0 < snaplen <= MAX_RECORD:
            raise EncodeError(f"snaplen: {snaplen}, must be in 1..{MAX_RECORD}")
        self.path = os.fspath(path)
        self.format = format
        self.snaplen = snaplen
        self.linktype = linktype
        self.interfaces = [str(x) for x in interfaces] if interfaces else [None]
        self.frames = 0
        self._stack: contextlib.ExitStack | None = None
        self._fh = None

    def __enter__(self) -> "CaptureWriter":
        self._stack = contextlib.ExitStack()
        fh = self._stack.enter_context(atomic_file(self.path, "wb"))
        fh.write(self._file_header())
        self._fh = _Spool(fh)
        return self

    def __exit__(self, *exc) -> bool:
        spool, stack, self._stack, self._fh = self._fh, self._stack, None, None
        if exc[0] is not None:  # the file goes: what is still queued need not be written
            spool.close(write=False)
            return stack.__exit__(*exc)
        try:
            spool.close()  # the records still queued reach the file, or their error is raised here
        except BaseException:
            stack.__exit__(*sys.exc_info())
            raise
        return stack.__exit__(None, None, None)

    def _file_header(self) -> bytes:
        if self.format == "pcap":
            return np.array([(PCAP_MAGIC_NS, 2 | 4 << 16, 0, 0, self.snaplen, self.linktype)],
                            dtype="<u4,<u4,<u4,<u4,<u4,<u4").tobytes()
        shb = (PCAPNG_BOM.to_bytes(4, "little") + (1).to_bytes(2, "little") + (0).to_bytes(2, "little")
               + (-1).to_bytes(8, "little", signed=True)
               + _pcapng_option(4, b"mcf-emu") + _pcapng_option(0, b""))
        out = _pcapng_block(PCAPNG_SHB, shb)
        for name in self.interfaces:
            idb = (self.linktype.to_bytes(2, "little") + b"\0\0" + self.snaplen.to_bytes(4, "little")
                   + (_pcapng_option(2, name.encode()) if name else b"")  # if_name
                   + _pcapng_option(9, bytes([9])) + _pcapng_option(0, b""))  # if_tsresol: 10^-9 s
            out += _pcapng_block(_IDB, idb)
        return out

    def write(self, buf, offsets, ts_ns, wirelen=None, iface=None) -> None:
        """Append the frames ``buf[offsets[i]:offsets[i+1]]`` with timestamps ``ts_ns``.

        ``wirelen``: each frame's length on the wire when ``buf`` holds less (a
        timing-mode frame cut short); default the bytes given. Frames longer than
        the snaplen are cut. ``iface``: each frame's interface (an index into
        ``interfaces``; pcapng only), default 0.
        """
        buf = as_uint8(buf)
        offsets = np.asarray(offsets, dtype=np.int64)
        starts = offsets[:-1]
        self.write_frames(np.diff(offsets), ts_ns, wirelen, iface,
                          lambda out, at, cap, a, b: copy_segments(out, at, buf, starts[a:b], cap))

    def write_frames(self, have, ts_ns, wirelen, iface, fill) -> None:
        """Append frames of ``have`` bytes each that ``fill`` writes in place: ``fill(out, at, cap,
        a, b)`` writes the first ``cap[j]`` bytes of frame ``a + j`` at ``out[at[j]:]`` for each j
        of ``range(b - a)`` (``cap``: ``have`` cut at the snaplen). ``ts_ns``, ``wirelen`` and
        ``iface`` as in ``write``."""
        if self._fh is None:
            raise RuntimeError("CaptureWriter.write outside its with block")
        have = np.asarray(have, dtype=np.int64)
        n = len(have)
        if n <= 0:
            return
        wire = have if wirelen is None else np.broadcast_to(np.asarray(wirelen, dtype=np.int64), (n,))
        ts = np.broadcast_to(np.asarray(ts_ns), (n,))
        if not np.issubdtype(ts.dtype, np.integer):
            raise EncodeError("ts_ns: timestamps must be integer nanoseconds (see pcap.to_ns)")
        ts = ts.astype(np.int64)
        _check_range("ts_ns", ts, 0, (1 << 32) * _NS - 1)
        _check_range("wirelen", wire - have, 0, 0xFFFFFFFF, what="wirelen below the bytes given")
        _check_range("wirelen", wire, 0, 0xFFFFFFFF)
        cap = np.minimum(have, self.snaplen)
        ifc = np.broadcast_to(np.asarray(0 if iface is None else iface, dtype=np.int64), (n,))
        _check_range("iface", ifc, 0, len(self.interfaces) - 1, what="interface not declared")
        records = self._pcap_records if self.format == "pcap" else self._pcapng_records
        # at most ~8 MB per write: bounded memory, and the buffer stays warm in the allocator
        size = np.cumsum(cap + 36)  # record bytes, at most 36 of framing each
        targets = np.arange(1, int(size[-1]) // _WRITE_BYTES + 1, dtype=np.int64) * _WRITE_BYTES
        cuts = np.unique(np.concatenate([[0], np.searchsorted(size, targets) + 1, [n]]).clip(0, n))
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            c = cap[a:b]
            out, at = records(int(c[0]) if (c == c[0]).all() else c, wire[a:b], ts[a:b], ifc[a:b])
            fill(out, at, c, a, b)
            self._fh.write(memoryview(out))
        self.frames += n

    @staticmethod
    def _records(head: np.dtype, fields: dict, cap, total=None):
        """Records of a ``head`` (structured dtype) holding ``fields`` (name: a value per record,
        or one for all), ``cap[j]`` bytes left for frame j and, with ``total`` (each record's
        length: a pcapng block's), zero padding and ``total`` again (uint32) to close the
        record. Returns the buffer and where each frame goes in it. ``cap`` is one int when
        the frames are all as long (timing mode at the default snaplen): the records are then
        one record copied, with the fields that differ written in place."""
        n, h = max(len(v) for v in fields.values() if np.ndim(v)), head.itemsize
        size = h + cap if total is None else total
        if np.ndim(cap) == 0:
            rec = int(size)
            cols = [(x, *head.fields[x][:2]) for x in head.names]  # (name, type, offset)
            if total is not None:
                cols.append(("closing", np.dtype("<u4"), rec - 4))
                fields = {**fields, "closing": total}
            names, formats, offsets = zip(*cols)
            layout = np.dtype(dict(names=names, formats=formats, offsets=offsets, itemsize=rec))
            first = np.zeros(1, dtype=layout)  # zeros: the padding
            for name, value in fields.items():
                first[name] = value if np.ndim(value) == 0 else value[0]
            out = np.empty((n, rec), dtype=np.uint8)
            out[:] = first.view(np.uint8)
            recs = out.reshape(-1).view(layout)
            for name, value in fields.items():
                if np.ndim(value):
                    recs[name] = value
            return out.reshape(-1), np.arange(n, dtype=np.int64) * rec + h
        rows = np.empty(n, dtype=head)
        for name, value in fields.items():
            rows[name] = value
        at = np.cumsum(size) - size
        out = np.empty(int(size.sum()), dtype=np.uint8)
        scatter_rows(out, at, rows.view(np.uint8).reshape(n, h))
        if total is not None:
            pad = total - h - cap - 4
            scatter_rows(out, at + h + cap, np.zeros((n, 3), dtype=np.uint8), pad)
            scatter_rows(out, at + h + cap + pad, total.astype("<u4").view(np.uint8).reshape(n, 4))
        return out, at + h

    def _pcap_records(self, cap, wire, ts, ifc):
        sec, frac = np.divmod(ts, _NS)
        return self._records(_PCAP_REC, dict(sec=sec, frac=frac, incl=cap, orig=wire), cap)

    def _pcapng_records(self, cap, wire, ts, ifc):
        # block: head, data, 0-3 zero pad bytes, the block length again
        total = 32 + cap + -cap % 4
        return self._records(_EPB_HEAD, dict(type=_EPB, total=total, iface=ifc, ts_hi=ts >> 32, ts_lo=ts & 0xFFFFFFFF,
                                             incl=cap, orig=wire), cap, total)

    def write_headers(self, headers, ts_ns, payload=None, *, eth_src=None) -> None:
        """Encode header rows (see ``batch.encode_frames``) at this file's snaplen and append them."""
        from .batch import as_headers, encode_frames, frame_wirelen  # here: it loads scapy, plain capture I/O does not

        h = as_headers(headers)
        buf, offsets = encode_frames(h, payload, snaplen=self.snaplen, eth_src=eth_src)
        self.write(buf, offsets, ts_ns, frame_wirelen(h))


def _check_range(name, values, lo, hi, what=None) -> None:
    bad = np.flatnonzero((values < lo) | (values > hi))
    if len(bad):
        i = int(bad[0])
        raise EncodeError(f"frame {i}: {name}: {what or f'{int(values[i])} outside {lo}..{hi}'}")


# ---------------------------------------------------------------- reading


def _guess_run(pos: int, end: int, size: int, alike):
    """After many equal records: guess the next ones have the same ``size`` too.

    Returns the positions of the leading records for which ``alike(positions)``
    holds, and how many were guessed (0: not even one fits before ``end``).
    """
    k = min((end - pos) // size, 1 << 16)
    at = pos + np.arange(k, dtype=np.int64) * size
    ok = alike(at)
    return at[: len(ok) if ok.all() else int(np.argmin(ok))], k


def _swap32(v: int) -> int:
    return int.from_bytes(v.to_bytes(4, "little"), "big")


def _u32(data: np.ndarray, positions: np.ndarray, order: str) -> np.ndarray:
    return data[positions[:, None] + np.arange(4)].view(f"{order}u4").reshape(-1).astype(np.int64)


class CaptureReader:
    """Streams a pcap or pcapng file as ``CaptureBatch``es of at most about ``batch_bytes``.

    A malformed file raises DecodeError naming the record (or block) number and
    its byte offset in the file.
    """

    def __init__(self, path, *, batch_bytes: int = 8 << 20):
        self.path = os.fspath(path)
        self.batch_bytes = max(int(batch_bytes), 1)  # a record longer than a chunk just spans reads
        self._fh = open(self.path, "rb")
        head = self._fh.read(24)
        self._fh.seek(0)
        if len(head) < 4:
            self.close()
            raise DecodeError(f"{self.path}: not a capture file ({len(head)} bytes)")
        magic_le = int.from_bytes(head[:4], "little")
        self.snaplen = None
        self.linktype = None
        self._order = "<"
        self._tsres: list[tuple[int, int]] = []  # pcapng interfaces: (base 10 or 2, exponent)
        self._iface_link: list[int] = []
        if magic_le == PCAPNG_SHB:
            self.format, self.nanosecond = "pcapng", None
            return
        for order, ns in (("<", True), ("<", False), (">", True), (">", False)):
            magic = int.from_bytes(head[:4], "little" if order == "<" else "big")
            if magic == (PCAP_MAGIC_NS if ns else PCAP_MAGIC_US):
                break
        else:
            self.close()
            raise DecodeError(f"{self.path}: not a pcap or pcapng file (magic 0x{magic_le:08x})")
        if len(head) < 24:
            self.close()
            raise DecodeError(f"{self.path}: truncated pcap file header ({len(head)} of 24 bytes)")
        fields = np.frombuffer(head, dtype=f"{order}u4")
        self.format, self.nanosecond, self._order = "pcap", ns, order
        self.snaplen = int(fields[4])
        self.linktype = int(fields[5]) & 0xFFFF

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "CaptureReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self):
        parse = self._pcap_chunk if self.format == "pcap" else self._pcapng_chunk
        base = 24 if self.format == "pcap" else 0  # file offset of data[0]
        self._fh.seek(base)
        data = np.zeros(0, dtype=np.uint8)
        record = 0
        while True:
            chunk = self._fh.read(self.batch_bytes)
            eof = len(chunk) == 0
            new = np.frombuffer(chunk, dtype=np.uint8)
            data = np.concatenate([data, new]) if len(data) else new
            while len(data):
                batch, used = parse(data, base, record, eof)
                if batch is not None:
                    record += len(batch)
                    yield batch
                data, base = data[used:], base + used
                if batch is None or used == 0:
                    break
            if eof:
                return

    # -- pcap

    def _pcap_chunk(self, data: np.ndarray, base: int, record: int, eof: bool):
        fmt = f"{self._order}I"
        end = len(data)
        pos = 0
        found, n_found = [], 0
        same_run, last = 0, -1
        while pos + 16 <= end:
            if same_run >= 32:
                size = 16 + last
                at, k = _guess_run(pos, end, size, lambda at: _u32(data, at + 8, self._order) == last)
                if k == 0:
                    break
                found.append(at)
                n_found += len(at)
                pos += len(at) * size
                same_run = same_run if len(at) == k else 0
                continue
            walk = []
            while pos + 16 <= end and len(walk) < 4096 and same_run < 32:
                incl = struct.unpack_from(fmt, data, pos + 8)[0]
                if incl > MAX_RECORD:
                    raise self._err(record + n_found + len(walk), base + pos, f"incl_len {incl} exceeds {MAX_RECORD}")
                if pos + 16 + incl > end:
                    break
                walk.append(pos)
                pos += 16 + incl
                same_run = same_run + 1 if incl == last else 0
                last = incl
            if not walk:
                break
            found.append(np.array(walk, dtype=np.int64))
            n_found += len(walk)
        if eof and pos < end:
            raise self._err(record + n_found, base + pos, f"truncated: {end - pos} bytes left, the record needs more")
        if not n_found:
            return None, pos
        at = np.concatenate(found)
        rec = data[at[:, None] + np.arange(16)].view(f"{self._order}u4").reshape(-1, 4).astype(np.int64)
        sec, frac, incl, orig = rec.T
        bad = np.flatnonzero(orig < incl)
        if len(bad):
            i = int(bad[0])
            raise self._err(record + i, base + int(at[i]), f"orig_len {orig[i]} below incl_len {incl[i]}")
        if not self.nanosecond:
            frac = frac * 1000
        return self._batch(data, at + 16, incl, orig, sec * _NS + frac, record, base + at), pos

    # -- pcapng

    def _pcapng_chunk(self, data: np.ndarray, base: int, record: int, eof: bool):
        end = len(data)
        pos = 0
        found, n_found, walk = [], 0, []
        same_run, last = 0, -1
        while pos + 12 <= end:
            order = self._order
            if same_run >= 32:
                if walk:
                    found.append(np.array(walk, dtype=np.int64))
                    walk = []
                at, k = _guess_run(pos, end, last,
                                   lambda at: (_u32(data, at, order) == _EPB) & (_u32(data, at + 4, order) == last))
                if k == 0:
                    break
                found.append(at)
                n_found += len(at)
                pos += len(at) * last
                same_run = same_run if len(at) == k else 0
                continue
            btype = struct.unpack_from("<I", data, pos)[0]
            if btype == PCAPNG_SHB:
                if n_found:
                    break  # a new section may change byte order and interfaces: finish this batch first
                bom = struct.unpack_from("<I", data, pos + 8)[0] if pos + 12 <= end else 0
                if bom not in (PCAPNG_BOM, _swap32(PCAPNG_BOM)):
                    raise self._err(record + n_found, base + pos, f"bad byte-order magic 0x{bom:08x}", "block")
                order = self._order = "<" if bom == PCAPNG_BOM else ">"
                self._tsres, self._iface_link = [], []
            fmt = f"{order}I"
            btype = struct.unpack_from(fmt, data, pos)[0]
            blen = struct.unpack_from(fmt, data, pos + 4)[0]
            if blen < 12 or blen % 4 or blen > MAX_RECORD + 4096:
                raise self._err(record + n_found, base + pos, f"block length {blen} invalid", "block")
            if pos + blen > end:
                break
            if btype == _EPB:
                if blen < 32:  # 28 bytes of fixed fields and the trailing length
                    raise self._err(record + n_found, base + pos, f"enhanced packet block length {blen} below 32")
                walk.append(pos)
                n_found += 1
                same_run = same_run + 1 if blen == last else 0
                last = blen
            elif btype in (_SPB, _OLD_PB):
                raise self._err(record + n_found, base + pos,
                                f"block type {btype} (simple/obsolete packet) not supported", "block")
            elif btype == _IDB:
                self._add_interface(data[pos : pos + blen], order, record + n_found, base + pos)
            pos += blen  # other blocks (statistics, name resolution, ...) carry nothing we need
        if eof and pos < end and not n_found:
            raise self._err(record, base + pos, f"truncated: {end - pos} bytes left, the block needs more", "block")
        if not n_found:
            return None, pos
        at = np.concatenate(found + [np.array(walk, dtype=np.int64)])
        order = self._order
        head = data[at[:, None] + np.arange(28)].view(f"{order}u4").reshape(-1, 7).astype(np.int64)
        _, total, iface, hi, lo, incl, orig = head.T
        trailer = _u32(data, at + total - 4, order)
        for bad_mask, what in (
            (trailer != total, "trailing block length differs"),
            (incl + 32 > total, "captured length runs past the block"),
            (orig < incl, "original length below captured length"),
            (iface >= len(self._tsres), "interface id not declared"),
        ):
            bad = np.flatnonzero(bad_mask)
            if len(bad):
                i = int(bad[0])
                raise self._err(record + i, base + int(at[i]), what)
        ts = self._ts_ns((hi << 32) | lo, iface)
        return self._batch(data, at + 28, incl, orig, ts, record, base + at), pos

    def _add_interface(self, block: np.ndarray, order: str, record: int, offset: int) -> None:
        raw = block.tobytes()
        bo = "little" if order == "<" else "big"
        link = int.from_bytes(raw[8:10], bo)
        snap = int.from_bytes(raw[12:16], bo)
        res = (10, 6)  # pcapng default: microseconds
        p = 16
        while p + 4 <= len(raw) - 4:
            code, ln = int.from_bytes(raw[p : p + 2], bo), int.from_bytes(raw[p + 2 : p + 4], bo)
            if code == 0:
                break
            if code == 9 and ln >= 1:
                v = raw[p + 4]
                res = (2, v & 0x7F) if v & 0x80 else (10, v)
            p += 4 + ln + (-ln % 4)
        base, exp = res
        if (base == 10 and exp > 18) or (base == 2 and exp > 32):
            raise self._err(record, offset, f"if_tsresol {base}^-{exp} not supported", "block")
        if self._iface_link and link != self._iface_link[0]:
            raise self._err(record, offset,
                            f"interfaces with different link types ({self._iface_link[0]}, {link})", "block")
        self._iface_link.append(link)
        self._tsres.append(res)
        self.linktype = link
        self.snaplen = snap

    def _ts_ns(self, ts: np.ndarray, iface: np.ndarray) -> np.ndarray:
        ts = ts.astype(np.uint64)
        out = np.empty(len(ts), dtype=np.int64)
        for i, (base, exp) in enumerate(self._tsres):
            sel = iface == i
            t = ts[sel]
            if base == 10:
                v = t * np.uint64(10 ** (9 - exp)) if exp <= 9 else t // np.uint64(10 ** (exp - 9))
            else:
                mask = np.uint64((1 << exp) - 1)
                v = (t >> np.uint64(exp)) * np.uint64(_NS) + (((t & mask) * np.uint64(_NS)) >> np.uint64(exp))
            out[sel] = v.astype(np.int64)
        return out

    # -- shared

    def _batch(self, data, starts, incl, orig, ts, record, file_offset) -> CaptureBatch:
        offsets = np.zeros(len(incl) + 1, dtype=np.int64)
        np.cumsum(incl, out=offsets[1:])
        buf = np.empty(int(offsets[-1]), dtype=np.uint8)
        copy_segments(buf, offsets[:-1], data, starts, incl)
        return CaptureBatch(buf, offsets, ts.astype(np.int64), orig.astype(np.int64), record,
                            file_offset.astype(np.int64), self.linktype if self.linktype is not None else -1)

    def _err(self, record: int, offset: int, what: str, kind: str = "record") -> DecodeError:
        # records are named as Wireshark numbers its frames, from 1
        where = f"frame {record + 1}" if kind == "record" else f"{kind} {record}"
        return DecodeError(f"{self.path}: {where} at byte {offset}: {what}")


def read_capture(path, *, batch_bytes: int = 8 << 20):
    """Yield the ``CaptureBatch``es of a pcap or pcapng file, closing it at the end."""
    with CaptureReader(path, batch_bytes=batch_bytes) as reader:
        yield from reader
