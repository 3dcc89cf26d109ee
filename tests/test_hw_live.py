"""The hardware path on real interfaces: private namespaces joined by veth pairs (needs root).

Each test makes its own namespaces (``mcfemu-test-<random>-N``) and veth pairs
inside them, runs ``emu hw`` commands there with ``ip netns exec``, and removes
everything in a finalizer, even on failure. No traffic leaves these namespaces.
"""

import signal
import subprocess
import sys

import numpy as np
import pytest

from emu.codec import Collective, Dtype, Op, ReduceOp, Stage, encode_frames, fragment, read_capture
from emu.codec.pcap import CaptureWriter
from emu.hw.netns import Lab, available
from waits import HANG_S, guarded, wait_until

why = available()
pytestmark = pytest.mark.skipif(why is not None, reason=why or "")
TIMEOUT = HANG_S


@pytest.fixture
def lab():
    lab = Lab()
    try:
        yield lab
    finally:
        lab.close()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"mcfemu-test-{lab.tag}" not in left


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, **kw)


class Served:
    """A background `emu hw ...` process that says when it is ready; stopped with SIGTERM."""

    def __init__(self, cmd, ready: str, stream: str = "stdout"):
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with guarded(self.p):
            line = getattr(self.p, stream).readline()
        if ready not in line:
            out, err = self.p.communicate(timeout=TIMEOUT)
            raise AssertionError(f"{cmd} did not start: {line}{out}{err}")
        self.first = line

    def stop(self) -> tuple[str, str]:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        out, err = self.p.communicate(timeout=TIMEOUT)
        return out, err

    def wait(self):
        out, err = self.p.communicate(timeout=TIMEOUT)
        return self.p.returncode, out, err


def packet_sockets_queued(ns) -> int:
    """Bytes received but not yet read by the raw sockets in namespace ``ns`` (Rmem of /proc/net/packet)."""
    rows = run(ns.cmd("cat", "/proc/net/packet")).stdout.splitlines()[1:]
    return sum(int(r.split()[6]) for r in rows)


def frames_capture(path, rng):
    """A capture of MCF messages of many sizes (fragmented), plus one malformed frame."""
    n = 0
    with CaptureWriter(path) as w:
        for m in range(12):
            size = int(rng.integers(0, 5000))
            h, p = fragment(dict(op=1 + m % 9, src_node=m % 3, dst_set=1 << (m % 4), msg_id=m, kv_id=m),
                            data=rng.integers(0, 256, size, dtype=np.uint8).tobytes())
            buf, off = encode_frames(h, p)
            w.write(buf, off, (n + np.arange(len(h))) * 20_000)
            n += len(h)
        bad = bytearray(buf[off[0] : off[1]])
        bad[14 + 3] = 200  # op: unknown value
        w.write(np.frombuffer(bytes(bad), np.uint8), [0, len(bad)], [n * 20_000])
    return n + 1


def test_frames_round_trip_byte_for_byte(lab, tmp_path):
    rx, tx = lab.pair()
    n = frames_capture(tmp_path / "tx.pcap", np.random.default_rng(0))
    listener = Served(rx.emu("hw", "listen", "--iface", rx.iface, "--out", str(tmp_path / "rx.pcap"), "--count",
                             str(n), "--timeout", f"{HANG_S}s"), "listening", "stderr")
    sent = run(tx.emu("hw", "send", "--iface", tx.iface, "--pcap", str(tmp_path / "tx.pcap"), "--rate", "200Mbps"))
    assert sent.returncode == 0, sent.stderr
    assert f"sent {n} frames" in sent.stdout
    rc, out, err = listener.wait()
    assert rc == 0, err
    assert f"frames     {n} ({n - 1} valid)" in out and "malformed  1 (op: 1)" in out
    assert "messages   12: 12 complete, 0 incomplete" in out

    def frames(p):
        return [bytes(b.buf[b.offsets[i] : b.offsets[i + 1]]) for b in read_capture(p) for i in range(len(b))]

    assert frames(tmp_path / "rx.pcap") == frames(tmp_path / "tx.pcap")


def test_check_passes_against_serve_and_names_the_field_against_a_wrong_reduce_op(lab):
    dev, checker = lab.pair()
    srv = Served(dev.emu("hw", "serve", "--iface", dev.iface, "--node", "1", "-v"), "ready")
    try:
        ok = run(checker.emu("hw", "check", "--iface", checker.iface, "--scenario", "all", "--node", "1",
                             "--timeout", f"{HANG_S}s"))
    finally:
        out, _ = srv.stop()
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.count("PASS") == 7, ok.stdout
    assert "directory: kv" in out and "INVALID" in out  # serve -v logs the replica going away

    bad = Served(dev.emu("hw", "serve", "--iface", dev.iface, "--node", "1", "--wrong-reduce-op", "sum"), "FAULT")
    try:
        fail = run(checker.emu("hw", "check", "--iface", checker.iface, "--scenario", "reduce-merge"))
    finally:
        bad.stop()
    assert fail.returncode == 1, fail.stdout + fail.stderr
    assert "reduce_op: expected merge (3), got sum (2)" in fail.stdout
    assert "payload:" in fail.stdout and fail.stdout.rstrip().splitlines()[-1].startswith("FAIL:")


def test_live_reduction_through_two_served_boards_equals_the_emulated_one(lab, tmp_path):
    """bring:4, root 0: board 2 reports to board 1, board 1 to the root; 1 and 2 are `serve` processes on a
    bridge, the test plays board 0 (listening) and the compute engines of 1 and 2 (sending their states)."""
    from emu.net import Network
    from emu.nic import NicConfig
    from pycluster import Cluster
    from emu.nic import reduce as R
    from emu.sim import Simulator
    from emu.topology import Routes, build

    heads, hd, dtype = 8, 32, Dtype.fp32
    rng = np.random.default_rng(11)
    states = {n: R.pack_state(*R.partial_attention(rng.standard_normal((heads, hd)),
                                                    rng.standard_normal((9, heads, hd)),
                                                    rng.standard_normal((9, heads, hd))), dtype) for n in range(4)}
    G = build("bring:4")
    routes = Routes(G)
    c = Cluster(Network(Simulator(), G, routes.next_hop), routes, NicConfig(reliable=False))
    red = c.reduction(range(4), 0, ReduceOp.merge, nbytes=len(states[0]), dtype=dtype, heads=heads, head_dim=hd,
                      kv_id=42, layer=7)
    for n in range(4):
        c.sim.at(0 if n in (1, 2) else 10**9, red.contribute, n, states[n])
    c.net.run()
    want = next(tr for tr in c.transfers if tr.src == 1 and tr.meta["op"] == Op.partial_state)

    meta = dict(op=int(Op.partial_state), stage=int(Stage.decode), collective=int(Collective.reduce),
                reduce_op=int(ReduceOp.merge), dtype=int(dtype), kv_id=42, layer=7)
    with CaptureWriter(tmp_path / "engines.pcap") as w:
        for k in (1, 2):
            h, p = fragment(dict(meta, src_node=k, dst_set=1 << k, msg_id=100 + k), data=states[k])
            buf, off = encode_frames(h, p)
            w.write(buf, off, np.zeros(len(h), np.int64))
    hub, (b1, b2) = lab.star(2)
    servers = [Served(e.emu("hw", "serve", "--iface", e.iface, "--node", str(k)), "ready") for e, k in ((b1, 1), (b2, 2))]
    # board 0 served beside the listener only to say when the result has reached the hub
    root = Served(hub.emu("hw", "serve", "--iface", hub.iface, "--node", "0", "-v"), "ready")
    try:
        listener = Served(hub.emu("hw", "listen", "--iface", hub.iface, "--out", str(tmp_path / "root.pcap"),
                                  "--timeout", f"{HANG_S}s"), "listening", "stderr")
        sent = run(hub.emu("hw", "send", "--iface", hub.iface, "--pcap", str(tmp_path / "engines.pcap")))
        assert sent.returncode == 0, sent.stderr
        with guarded(root.p):
            while "delivered partial_state n1#" not in (line := root.p.stdout.readline()):
                assert line, "board 0 ended before the result reached it"
        # the result is in the listener's socket too: stop it once it has read all that is queued
        wait_until(lambda: packet_sockets_queued(hub) == 0, "the listener reading what is queued")
        out, err = listener.stop()
        assert listener.p.returncode == 0, err
    finally:
        summaries = [s.stop()[0] for s in servers]
        root.stop()
    frames = [(b, i) for b in read_capture(tmp_path / "root.pcap") for i in range(len(b))]
    from emu.codec import Reassembler, decode_frames

    reasm, msgs = Reassembler(), []
    for b, i in frames:
        f = decode_frames(b.buf[b.offsets[i] : b.offsets[i + 1]], [0, int(b.offsets[i + 1] - b.offsets[i])])
        if int(f.headers["src_node"][0]) == 1 and int(f.headers["dst_set"][0]) == 1:
            msgs += reasm.add_frames(f)
    assert len(msgs) == 1, (out, summaries)
    got = msgs[0]
    assert got.data == want.data  # bit for bit the emulator's merge
    for f in ("op", "stage", "collective", "reduce_op", "dtype", "kv_id", "layer", "src_node", "dst_set"):
        assert int(got.header[f]) == want.meta[f], f
    assert "reductions 1 complete" in summaries[0] and "reductions 1 complete" in summaries[1]


def test_no_answer_mtu_and_missing_interface_are_one_line_errors(lab, tmp_path):
    a, b = lab.pair()
    silent = run(b.emu("hw", "check", "--iface", b.iface, "--scenario", "multicast", "--timeout", "0.3"))
    assert silent.returncode == 2
    assert silent.stderr.strip().count("\n") == 0 and "sent nothing back" in silent.stderr
    # jumbo frames on a 1500-byte interface
    h, p = fragment(dict(op=int(Op.kv_replica), src_node=0, dst_set=2), data=bytes(8000), mtu=9000)
    with CaptureWriter(tmp_path / "jumbo.pcap") as w:
        w.write(*encode_frames(h, p), np.zeros(len(h), np.int64))
    big = run(a.emu("hw", "send", "--iface", a.iface, "--pcap", str(tmp_path / "jumbo.pcap")))
    assert big.returncode == 2 and "needs MTU 8048" in big.stderr and "has MTU 1500" in big.stderr
    assert big.stderr.strip().count("\n") == 0 and "Traceback" not in big.stderr
    srv = run(a.emu("hw", "serve", "--iface", a.iface, "--node", "1", "--mtu", "9000"))
    assert srv.returncode == 2 and "mtu 9000" in srv.stderr
    gone = run(a.emu("hw", "listen", "--iface", "mcfnothere0", "--timeout", "0.1"))
    assert gone.returncode == 2 and "no interface 'mcfnothere0'" in gone.stderr
    run(a.cmd("ip", "link", "set", a.iface, "down"))
    down = run(a.emu("hw", "listen", "--iface", a.iface, "--timeout", "0.1"))
    assert down.returncode == 2 and "is down" in down.stderr


def test_raw_sockets_without_privilege_say_so(lab):
    """Root without CAP_NET_RAW (dropped from the bounding set) is refused a raw socket: one line, exit 2."""
    a, _ = lab.pair()
    cmd = a.cmd("setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw", "--",
                sys.executable, "-m", "emu", "hw", "listen", "--iface", a.iface, "--timeout", "0.1")
    try:
        r = run(cmd)
    except FileNotFoundError:  # pragma: no cover
        pytest.skip("setpriv (util-linux) not available")
    if r.returncode == 127 or "setpriv:" in r.stderr:  # pragma: no cover - util-linux missing or too old
        pytest.skip(f"setpriv cannot drop CAP_NET_RAW here: {r.stderr.strip()}")
    assert r.returncode == 2, r.stderr
    assert "need root or CAP_NET_RAW" in r.stderr and "Traceback" not in r.stderr


def test_send_a_trace_replays_it_and_puts_its_frames_on_the_wire(lab, tmp_path):
    trace = tmp_path / "tiny.json"
    made = run([sys.executable, "-m", "emu", "trace", "ring", "--seq", "1024", "--nodes", "4", "--chunk", "256",
                "--set", "model.layers=1", "-o", str(trace)])
    assert made.returncode == 0, made.stderr
    rx, tx = lab.pair()
    listener = Served(rx.emu("hw", "listen", "--iface", rx.iface, "--count", "300", "--timeout", f"{HANG_S}s",
                             "--json"),
                      "listening", "stderr")
    sent = run(tx.emu("hw", "send", "--iface", tx.iface, str(trace), "--capture-filter", "node=1", "--count", "300",
                      "--rate", "1Gbps"))
    assert sent.returncode == 0, sent.stderr
    rc, out, err = listener.wait()
    import json

    s = json.loads(out)
    assert rc == 0 and s["frames"] == 300 and not s["malformed"], err
    assert set(s["per_op"]) <= {o.name for o in Op}
