"""Raw layer-2 I/O of MCF frames: one AF_PACKET socket per interface, batches in and out.

The socket is ``AF_PACKET, SOCK_RAW`` bound to the interface and to EtherType
0x88B5, so the kernel hands it MCF frames only; a classic BPF program
(``SO_ATTACH_FILTER``: accept EtherType 0x88B5, drop the rest) repeats that
test inside the socket's own filter, and the socket ignores the frames it sends
itself (``PACKET_IGNORE_OUTGOING``). Frames go out and come in with
``sendmmsg`` / ``recvmmsg`` (through ctypes), up to ``batch`` frames per system
call, into preallocated buffers; the receive side hands back the frames back to
back (``buf``, ``offsets``) as the batch codec takes them, with the kernel's
receive timestamps (``SO_TIMESTAMPNS``) in integer nanoseconds.

Linux only (AF_PACKET). Errors a user meets (no such interface, no permission,
interface down) raise ``emu.hw.errors`` exceptions that print as one line.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import select
import socket
import struct
import time

import numpy as np

from ..codec import ETHERTYPE
from ..codec.mac import ETH_LEN
from ..codec.segments import copy_segments
from .errors import HwError, InterfaceDown, NoInterface, NoPermission

SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
SO_ATTACH_FILTER = 26
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35
SIOCGIFFLAGS = 0x8913
SIOCGIFMTU = 0x8921
IFF_UP = 0x1
MSG_DONTWAIT = 0x40
MSG_TRUNC = 0x20
CONTROL_BYTES = 64  # room for one SCM_TIMESTAMPNS message

# Classic BPF: ldh [12]; jeq #0x88B5 jt 0 jf 1; ret #262144; ret #0
BPF_PROGRAM = [
    (0x28, 0, 0, 12),
    (0x15, 0, 1, ETHERTYPE),
    (0x06, 0, 0, 0x40000),
    (0x06, 0, 0, 0),
]


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.c_void_p),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", _MsgHdr), ("len", ctypes.c_uint)]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _view_dtype() -> np.dtype:
    """numpy view of an mmsghdr array, for filling and reading many entries at once."""
    h = _MMsgHdr.hdr.offset
    f = {name: h + getattr(_MsgHdr, name).offset for name in ("iov", "iovlen", "control", "controllen", "flags")}
    return np.dtype({"names": ["iov", "iovlen", "control", "controllen", "flags", "len"],
                     "formats": [np.uintp, np.uintp, np.uintp, np.uintp, np.int32, np.uint32],
                     "offsets": [f["iov"], f["iovlen"], f["control"], f["controllen"], f["flags"], _MMsgHdr.len.offset],
                     "itemsize": ctypes.sizeof(_MMsgHdr)})


_MMSG_VIEW = _view_dtype()
_IOV_VIEW = np.dtype({"names": ["base", "len"], "formats": [np.uintp, np.uintp],
                      "offsets": [_IoVec.base.offset, _IoVec.len.offset], "itemsize": ctypes.sizeof(_IoVec)})
_libc = None


def _lib():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        for name in ("sendmmsg", "recvmmsg"):
            fn = getattr(_libc, name)
            fn.restype = ctypes.c_int
        _libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
        _libc.recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
    return _libc


def _ifreq(iface: str) -> bytes:
    return struct.pack("16s16s", iface.encode()[:15], b"")


def interface_index(iface: str) -> int:
    """The interface's index; NoInterface if it does not exist in this network namespace."""
    if not iface or len(iface.encode()) > 15 or "/" in iface:
        raise NoInterface(f"{iface!r} is not a valid interface name")
    try:
        return socket.if_nametoindex(iface)
    except OSError:
        raise NoInterface(f"no interface {iface!r} here (ip link shows the interfaces of this network "
                          "namespace; ip netns exec NS runs a command in another)") from None


def interface_mtu(iface: str) -> int:
    """The interface's MTU (largest Ethernet payload)."""
    interface_index(iface)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return struct.unpack_from("i", fcntl.ioctl(s.fileno(), SIOCGIFMTU, _ifreq(iface)), 16)[0]


def interface_up(iface: str) -> bool:
    interface_index(iface)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack_from("H", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, _ifreq(iface)), 16)[0]
    return bool(flags & IFF_UP)


def open_packet_socket(iface: str) -> socket.socket:
    """An AF_PACKET raw socket bound to ``iface`` and EtherType 0x88B5, with the BPF filter attached."""
    interface_index(iface)
    try:
        # protocol 0: the socket hears nothing until bind() names the interface and the EtherType,
        # so no frame of another interface slips in before the bind
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    except PermissionError:
        raise NoPermission("raw sockets need root or CAP_NET_RAW (run with sudo, or grant the interpreter "
                           "the capability: setcap cap_net_raw+ep $(readlink -f $(which python3)))") from None
    except OSError as exc:
        raise HwError(f"cannot open a raw socket: {exc.strerror or exc}") from None
    try:
        _attach_filter(s)
        s.bind((iface, ETHERTYPE))
    except OSError as exc:
        s.close()
        if exc.errno == errno.ENODEV:
            raise NoInterface(f"no interface {iface!r} here") from None
        raise HwError(f"cannot bind a raw socket to {iface}: {exc.strerror or exc}") from None
    try:
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    except OSError:  # kernels before 4.20: our own frames come back; callers skip them by source MAC
        pass
    return s


def _attach_filter(s: socket.socket) -> None:
    prog = (_SockFilter * len(BPF_PROGRAM))(*[_SockFilter(*ins) for ins in BPF_PROGRAM])
    fprog = _SockFprog(len(BPF_PROGRAM), prog)
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(memoryview(fprog).cast("B")))  # copied by the kernel
    # keep the program alive until the call returned (it has: setsockopt copies it)
    del prog


def _grow_buffer(s: socket.socket, forced: int, plain: int, size: int) -> None:
    try:
        s.setsockopt(socket.SOL_SOCKET, forced, size)  # root: past net.core.[rw]mem_max
    except OSError:
        try:
            s.setsockopt(socket.SOL_SOCKET, plain, size)
        except OSError:
            pass


class RawSocket:
    """One interface, opened once: ``send`` batches of frames, ``recv`` batches of frames.

    ``batch``: frames per system call. ``slot``: bytes kept per received frame
    (default: the interface's MTU plus the Ethernet header); a longer frame is
    cut and counted in ``truncated``.
    """

    def __init__(self, iface: str, *, batch: int = 512, rcvbuf: int = 64 << 20, sndbuf: int = 8 << 20,
                 slot: int | None = None, check_up: bool = True):
        self.iface = iface
        self.index = interface_index(iface)
        self.mtu = interface_mtu(iface)
        if check_up and not interface_up(iface):
            raise InterfaceDown(f"interface {iface} is down (ip link set {iface} up)")
        self.sock = open_packet_socket(iface)
        _grow_buffer(self.sock, SO_RCVBUFFORCE, socket.SO_RCVBUF, rcvbuf)
        _grow_buffer(self.sock, SO_SNDBUFFORCE, socket.SO_SNDBUF, sndbuf)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.kernel_timestamps = True
        except OSError:
            self.kernel_timestamps = False
        self.fd = self.sock.fileno()
        self.batch = int(batch)
        self.slot = int(slot or max(self.mtu + ETH_LEN, 64))
        self.truncated = 0
        self.sent_frames = 0
        self.sent_bytes = 0
        self._poll = select.poll()
        self._poll.register(self.fd, select.POLLIN)
        self._rx_ready = False
        self._tx_ready = False

    # ---- lifetime -----------------------------------------------------------------

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self) -> "RawSocket":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- sending --------------------------------------------------------------------

    def _tx_setup(self) -> None:
        n = self.batch
        self._tx_msgs = (_MMsgHdr * n)()
        self._tx_iov = (_IoVec * n)()
        self._tx_mv = np.frombuffer(self._tx_msgs, dtype=_MMSG_VIEW)
        self._tx_iv = np.frombuffer(self._tx_iov, dtype=_IOV_VIEW)
        self._tx_mv["iov"] = ctypes.addressof(self._tx_iov) + np.arange(n, dtype=np.uintp) * ctypes.sizeof(_IoVec)
        self._tx_mv["iovlen"] = 1
        self._tx_ready = True

    def send(self, buf: np.ndarray, offsets: np.ndarray, start: int = 0, stop: int | None = None) -> int:
        """Send frames ``start..stop`` of (``buf``, ``offsets``); returns how many went out.

        ``buf`` must stay alive and unmoved during the call (it is a numpy array).
        Blocks while the interface's queue is full.
        """
        if not self._tx_ready:
            self._tx_setup()
        buf = np.ascontiguousarray(buf, dtype=np.uint8)
        offsets = np.asarray(offsets, dtype=np.int64)
        stop = len(offsets) - 1 if stop is None else stop
        base = buf.ctypes.data
        lib = _lib()
        i = start
        while i < stop:
            k = min(self.batch, stop - i)
            self._tx_iv["base"][:k] = base + offsets[i : i + k]
            self._tx_iv["len"][:k] = offsets[i + 1 : i + k + 1] - offsets[i : i + k]
            done = lib.sendmmsg(self.fd, ctypes.addressof(self._tx_msgs), k, 0)
            if done < 0:
                err = ctypes.get_errno()
                if err in (errno.EINTR, errno.EAGAIN, errno.ENOBUFS):
                    if err != errno.EINTR:
                        time.sleep(50e-6)
                    continue
                raise self._os_error("send", err)
            self.sent_frames += done
            self.sent_bytes += int(offsets[i + done] - offsets[i])
            i += done
        return stop - start

    def send_bytes(self, frame: bytes) -> None:
        try:
            self.sock.send(frame)
        except OSError as exc:
            raise self._os_error("send", exc.errno) from None
        self.sent_frames += 1
        self.sent_bytes += len(frame)

    def _os_error(self, what: str, err: int) -> HwError:
        if err == errno.EMSGSIZE:
            from .errors import MtuTooSmall

            return MtuTooSmall(f"{self.iface}: a frame is larger than the MTU {self.mtu} allows")
        if err == errno.ENETDOWN:
            return InterfaceDown(f"interface {self.iface} went down")
        if err == errno.ENXIO or err == errno.ENODEV:
            return NoInterface(f"interface {self.iface} disappeared")
        return HwError(f"{what} on {self.iface}: {os.strerror(err)}")

    # ---- receiving ------------------------------------------------------------------

    def _rx_setup(self) -> None:
        n, slot = self.batch, self.slot
        self._slots = np.zeros((n, slot), dtype=np.uint8)
        self._control = np.zeros((n, CONTROL_BYTES), dtype=np.uint8)
        self._rx_msgs = (_MMsgHdr * n)()
        self._rx_iov = (_IoVec * n)()
        self._rx_mv = np.frombuffer(self._rx_msgs, dtype=_MMSG_VIEW)
        iv = np.frombuffer(self._rx_iov, dtype=_IOV_VIEW)
        iv["base"] = self._slots.ctypes.data + np.arange(n, dtype=np.uintp) * slot
        iv["len"] = slot
        self._rx_mv["iov"] = ctypes.addressof(self._rx_iov) + np.arange(n, dtype=np.uintp) * ctypes.sizeof(_IoVec)
        self._rx_mv["iovlen"] = 1
        self._rx_mv["control"] = self._control.ctypes.data + np.arange(n, dtype=np.uintp) * CONTROL_BYTES
        self._rx_src = np.arange(n, dtype=np.int64) * slot
        self._out = np.empty(n * slot, dtype=np.uint8)
        self._rx_ready = True

    def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: forever) for a frame to read."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        try:
            return bool(self._poll.poll(ms))
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            return False

    def recv(self, timeout: float | None = 0.1):
        """Up to ``batch`` frames: ``(buf, offsets, ts_ns)``; empty arrays when none came in time.

        ``buf`` is reused by the next call: copy what must outlive it. Frames
        longer than the slot are cut to it and counted in ``truncated``.
        """
        if not self._rx_ready:
            self._rx_setup()
        n = self._recv_some()
        if n == 0 and timeout != 0:
            if not self.wait(timeout):
                return self._out[:0], np.zeros(1, np.int64), np.zeros(0, np.int64)
            n = self._recv_some()
        if n == 0:
            return self._out[:0], np.zeros(1, np.int64), np.zeros(0, np.int64)
        mv = self._rx_mv[:n]
        lens = mv["len"].astype(np.int64)
        over = lens > self.slot
        if over.any():
            self.truncated += int(over.sum())
            lens = np.minimum(lens, self.slot)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        copy_segments(self._out, offsets[:-1], self._slots.reshape(-1), self._rx_src[:n], lens)
        ts = self._timestamps(n)
        return self._out[: int(offsets[-1])], offsets, ts

    def _recv_some(self) -> int:
        mv = self._rx_mv
        mv["controllen"] = CONTROL_BYTES
        got = _lib().recvmmsg(self.fd, ctypes.addressof(self._rx_msgs), self.batch, MSG_DONTWAIT | MSG_TRUNC, None)
        if got < 0:
            err = ctypes.get_errno()
            if err in (errno.EAGAIN, errno.EINTR):
                return 0
            raise self._os_error("receive", err)
        return got

    def _timestamps(self, n: int) -> np.ndarray:
        ctl = self._control[:n]
        clen = self._rx_mv["controllen"][:n]
        level = ctl[:, 8:12].copy().view(np.int32).reshape(n)
        ctype = ctl[:, 12:16].copy().view(np.int32).reshape(n)
        ok = (clen >= 32) & (level == socket.SOL_SOCKET) & (ctype == SO_TIMESTAMPNS)
        sec = ctl[:, 16:24].copy().view(np.int64).reshape(n)
        nsec = ctl[:, 24:32].copy().view(np.int64).reshape(n)
        ts = sec * 1_000_000_000 + nsec
        if not ok.all():
            ts = np.where(ok, ts, time.time_ns())
        return ts

    def kernel_stats(self) -> tuple[int, int]:
        """(frames received, frames dropped for lack of socket buffer) since the last call (PACKET_STATISTICS)."""
        try:
            raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        except OSError:
            return 0, 0
        packets, drops = struct.unpack("II", raw)
        return packets, drops

    def drain(self) -> int:
        """Discard frames waiting in the socket; returns how many."""
        total = 0
        while True:
            buf, offsets, _ = self.recv(timeout=0)
            if len(offsets) == 1:
                return total
            total += len(offsets) - 1
