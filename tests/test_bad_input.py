"""Bad input, enumerated: every input kind times the mutations that break it.

Input kinds: trace, topology (spec and file), ``--set``, scenario clauses, other options,
sweep TOML, pcap/pcapng, results folders, output paths, profiles. Mutations: truncated,
wrong type, huge, negative, nested, bombs, unwritable, a directory where a file goes.
For each case the command must

- exit 2,
- print one line on stderr that names the file or option at fault,
- print no traceback,
- leave no new file (anything under the case's working folder, the inputs excepted).

Each case runs ``emu.cli.main`` in a forked child (imports already paid for; a fresh
process state per case) in its own working folder, with an address-space limit so an
unbounded allocation fails instead of taking the machine, and an alarm at the suite's hang
guard (tests/waits.py: generous, never a speed limit) that counts a hang as a failure.
``PYTHONPATH=<tree> python3 -m pytest tests/test_bad_input.py -q`` gives the case count and how many fail on that tree (the before/after figures).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import resource
import signal
import subprocess
import sys
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from waits import HANG_S

TIMEOUT_S = HANG_S         # a case still running after this is a hang, however loaded the machine
ADDRESS_SPACE = 6 << 30    # bytes a case may map: a runaway allocation fails fast
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Case:
    id: str
    argv: list             # may hold "{in}" (the inputs folder) to be filled in
    names: tuple = ()      # each must appear in the error line (the file or the option)
    setup: object = None   # callable(inputs: Path) -> None, makes the case's input files
    status: int = 2
    files_ok: tuple = field(default_factory=tuple)  # outputs a case may legitimately leave


# ----------------------------------------------------------------- input material
def _tiny_trace_doc() -> dict:
    from emu.workload.generate import Params, generate
    from emu.workload.trace import dumps

    tr = generate(Params(scheme="mars", seq=512, nodes=4, chunk=128))
    return json.loads(dumps(tr))


@pytest.fixture(scope="session")
def material(tmp_path_factory):
    """Shared valid inputs (read-only for the cases): a tiny trace, a results folder, a capture."""
    base = tmp_path_factory.mktemp("material")
    doc = _tiny_trace_doc()
    (base / "tiny.json").write_text(json.dumps(doc))
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    subprocess.run([sys.executable, "-m", "emu", "replay", str(base / "tiny.json"), "--out", str(base / "res")],
                   env=env, check=True, capture_output=True)
    from emu.codec import encode_frames, fragment
    from emu.codec.pcap import CaptureWriter

    h, p = fragment(dict(op=1, src_node=0, dst_set=2), data=b"x" * 3000)
    with CaptureWriter(base / "ok.pcap") as w:
        buf, off = encode_frames(h, p)
        w.write(buf, off, np.arange(len(h)) * 1000)
    with CaptureWriter(base / "ok.pcapng", format="pcapng") as w:
        w.write(buf, off, np.arange(len(h)) * 1000)
    return base


def _trace_variant(mutate):
    """setup: the tiny trace with ``mutate(doc)`` applied, as {in}/t.json."""
    def setup(d: Path, material: Path):
        doc = json.loads((material / "tiny.json").read_text())
        out = mutate(doc)
        (d / "t.json").write_text(out if isinstance(out, str) else json.dumps(doc))
    return setup


def _write(name: str, data):
    def setup(d: Path, material: Path):
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return setup


def _mkdir(name: str):
    def setup(d: Path, material: Path):
        (d / name).mkdir(parents=True)
    return setup


def _many(*setups):
    def setup(d: Path, material: Path):
        for s in setups:
            s(d, material)
    return setup


def _deep(n: int = 100_000) -> str:
    return "[" * n + "]" * n


def _huge_int() -> str:
    return "9" * 5000


def _gzip_bomb(d: Path, material: Path):
    # 1.5 GB of spaces inside a valid-looking JSON document, ~1.5 MB compressed
    co = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = b" " * (16 << 20)
    with open(d / "bomb.json.gz", "wb") as fh:
        fh.write(co.compress(b'{"meta": {}, "pad": "'))
        for _ in range(96):
            fh.write(co.compress(chunk))
        fh.write(co.compress(b'"}') + co.flush())


def _set_path(doc, path, value):
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value


def _with(path, value):
    def m(doc):
        _set_path(doc, path, value)
    return m


def _plain_column(name, fn):
    """Replace ops.<name> by a plain list computed from the decoded column."""
    def m(doc):
        from emu.workload import columns

        col = columns.decode(doc["ops"][name], name).tolist()
        doc["ops"][name] = fn(col)
    return m


def _topology_file(nodes, links, directed=False, name="topo.json"):
    def setup(d: Path, material: Path):
        doc = {"name": "t", "nodes": list(range(nodes)),
               "links": [{"u": u, "v": v, **({"directed": True} if directed else {})} for u, v in links]}
        (d / name).write_text(json.dumps(doc))
    return setup


def _pcapng_short_block(d: Path, material: Path):
    data = bytearray((material / "ok.pcapng").read_bytes())
    # find the first Enhanced Packet Block (type 6) and claim a block length shorter than its fixed part
    pos = 0
    while pos + 8 <= len(data):
        btype = int.from_bytes(data[pos:pos + 4], "little")
        blen = int.from_bytes(data[pos + 4:pos + 8], "little")
        if btype == 6:
            data[pos + 4:pos + 8] = (16).to_bytes(4, "little")
            data[pos + 12:pos + 16] = (16).to_bytes(4, "little")
            break
        pos += blen
    (d / "short.pcapng").write_bytes(bytes(data[:pos + 16]))


def _pcap_huge_record(d: Path, material: Path):
    data = bytearray((material / "ok.pcap").read_bytes())
    data[24 + 8:24 + 12] = (0xFFFFFFF0).to_bytes(4, "little")  # incl_len of record 0
    (d / "huge.pcap").write_bytes(bytes(data))


def _results_with_summary(content: bytes | str | None, kind="file"):
    def setup(d: Path, material: Path):
        r = d / "r"
        r.mkdir()
        if kind == "dir":
            (r / "summary.json").mkdir()
        else:
            (r / "summary.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    return setup


def _sweep(text: str, name: str = "s.toml"):
    return _write(name, text)


T = "{in}/t.json"
TINY = "{material}/tiny.json"
REPLAY = ["replay", TINY]
SWEEP_OK = '[sweep]\nname = "s"\n[fixed]\nchunk = 128\n[grid]\nscheme = ["mars"]\nseq = [512]\nnodes = [4]\n'


def cases() -> list[Case]:
    c: list[Case] = []
    add = lambda *a, **k: c.append(Case(*a, **k))  # noqa: E731

    # ---- trace files: emu replay and emu trace show
    trace_mutations = {
        "truncated": lambda doc: json.dumps(doc)[:5000],
        "top-list": lambda doc: "[1, 2, 3]",
        "top-string": lambda doc: '"a trace"',
        "binary": None,
        "nested": lambda doc: '{"meta": ' + _deep() + "}",
        "huge-int-n": lambda doc: json.dumps(doc).replace('"n":', '"n":' + _huge_int() + ', "x":', 1),
        "huge-int-meta": _with(("meta", "seq"), None),
        "n-negative": _with(("ops", "n"), -5),
        "n-huge": _with(("ops", "n"), 10**15),
        "n-string": _with(("ops", "n"), "4257"),
        "rle-bomb": _with(("ops", "stage"), {"codec": "rle", "values": [0], "runs": [10**15]}),
        "rle-bomb-many": _with(("ops", "stage"), {"codec": "rle", "values": [0] * 1000, "runs": [10**12] * 1000}),
        "delta-rle-bomb": _with(("ops", "layer"), {"codec": "delta_rle", "values": [1], "runs": [2**62]}),
        "kind-wraps": _plain_column("kind", lambda col: [257 if i == 0 else v for i, v in enumerate(col)]),
        "node-wraps": _plain_column("node", lambda col: [2**32 if i == 0 else v for i, v in enumerate(col)]),
        "node-negative": _plain_column("node", lambda col: [-7 if i == 0 else v for i, v in enumerate(col)]),
        "bytes-negative": _plain_column("bytes", lambda col: [-1] + col[1:]),
        "flops-huge": _plain_column("flops", lambda col: [2**63 - 1] + col[1:]),
        "dep-cycle": _plain_column("dep_idx", lambda col: [len(col) and 4000] + col[1:]),
        "mtu-70000": _with(("meta", "hw", "mtu"), 70000),
        "mtu-string": _with(("meta", "hw", "mtu"), "70000"),
        "nodes-huge": _with(("meta", "nodes"), 100_000_000),
        "layers-exponent": _with(("meta", "model", "layers"), "1e9999999"),
        "link-rate-1bps": _with(("meta", "hw", "link_rate"), "1bps"),
        "flops-zero": _with(("meta", "hw", "compute_flops"), 0),
        "mem-bw-tiny": _with(("meta", "hw", "mem_bw"), "1e-30"),
        "meta-list": _with(("meta",), [1]),
        "column-float": _with(("ops", "kind"), [0.5] * 4257),
        "column-nested": _with(("ops", "kind"), [[0]] * 4257),
    }
    for name, mut in trace_mutations.items():
        if name == "huge-int-meta":
            setup = _trace_variant(lambda doc: json.dumps(doc).replace('"seq": 512', '"seq": ' + _huge_int(), 1))
        elif mut is None:
            setup = _write("t.json", bytes(range(256)) * 10)
        else:
            setup = _trace_variant(mut)
        add(f"trace-{name}-replay", ["replay", T, "--no-results"], ("t.json",), setup)
        add(f"trace-{name}-show", ["trace", "show", T], ("t.json",), setup)
    add("trace-gzip-bomb", ["replay", "{in}/bomb.json.gz", "--no-results"], ("bomb.json.gz",), _gzip_bomb)
    add("trace-gzip-truncated", ["trace", "show", "{in}/t.json.gz"], ("t.json.gz",),
        _write("t.json.gz", gzip.compress(b'{"meta": {}}' * 100)[:60]))
    add("trace-missing", ["replay", "{in}/nope.json"], ("nope.json",))
    add("trace-directory", ["replay", "{in}/d.json"], ("d.json",), _mkdir("d.json"))
    add("trace-empty", ["trace", "show", "{in}/e.json"], ("e.json",), _write("e.json", b""))
    add("trace-not-utf8", ["trace", "show", "{in}/t.json"], ("t.json",), _write("t.json", b'{"meta": "\xff\xfe"}'))

    # ---- topology specs and files (emu replay --topology)
    for spec in ("ring:100000000", "torus:3000x3000", "fattree:1000", "full:20000", "mesh:100000x100000",
                 "ring:1e9", "torus:0x4", "ring:-3", "bogus", "fattree:3", "star:0", "ring:" + "9" * 5000):
        add(f"topology-spec-{spec[:24]}", [*REPLAY, "--no-results", "--topology", spec], ("topology",))
    topo = {
        "disconnected": _topology_file(4, [[0, 1], [2, 3]]),
        "one-way": _topology_file(4, [[0, 1], [1, 2], [2, 3]], directed=True),
        "truncated": _write("topo.json", '{"name": "t", "nodes": [0, 1, 2, 3], "links": [{"u": 0'),
        "nested": _write("topo.json", '{"links": ' + _deep() + "}"),
        "huge-int": _write("topo.json", '{"name": "t", "nodes": [' + _huge_int() + '], "links": []}'),
        "huge-boards": _topology_file(300_000, [[0, 1]]),
        "list": _write("topo.json", "[1, 2]"),
        "bad-link": _topology_file(4, [[0, 9]]),
        "binary": _write("topo.json", bytes(range(256))),
    }
    for name, setup in topo.items():
        add(f"topology-file-{name}", [*REPLAY, "--no-results", "--topology", "{in}/topo.json"], ("topo.json",), setup)
    add("topology-file-directory", [*REPLAY, "--no-results", "--topology", "{in}/t.graphml"], ("t.graphml",),
        _mkdir("t.graphml"))
    add("topology-graphml-garbage", [*REPLAY, "--no-results", "--topology", "{in}/t.graphml"], ("t.graphml",),
        _write("t.graphml", "<graphml><graph><node id='0'/>"))

    # ---- --set overrides (replay and trace)
    sets = ["hw.compute_flops=0", "hw.mem_bw=1e-30", "hw.compute_flops=1e30", "hw.link_rate=1bps",
            "hw.link_rate=1e999999999Gbps", "model.layers=1e9999999", "hw.ports=0", "model.heads=7",
            "hw.mtu=70000", "hw.mtu=10", "hw.bogus=1", "nokey", "hw.link_rate=-5Gbps", "hw.link_rate=fast",
            "model.layers=0", "hw.comm_buffer=1e30", "hw.link_latency_ps=1e999s", "hw.gamma=nan",
            "model.kv_heads=5", "model.vocab=" + "9" * 5000, "hw.dram_bytes=-1"]
    for s in sets:
        key = s.split("=")[0]
        add(f"set-replay-{s[:30]}", [*REPLAY, "--no-results", "--set", s], (key,))
        add(f"set-trace-{s[:30]}", ["trace", "mars", "--seq", "512", "--nodes", "4", "-o", "{in}/o.json", "--set", s],
            (key,))

    # ---- scenario clauses
    for clause in ("", "garbage", "link 3-4 down at 0.5s", "node 99 down at 1s", "link 0-1 down at 1e999999999s",
                   "link 0-1 degrade 2 at 1s", "link 0-1 degrade -1 at 1s", "link * loss 7 at 0s",
                   "link 0-1 down at -1s", "link 0-1 rate 0bps at 1s", "link 0-1 down at 2s up at 1s",
                   "link 99999999999999999999-1 down at 1s"):
        flag = "--degrade" if "degrade" in clause else "--fail"
        add(f"scenario-{clause[:28] or 'empty'}", [*REPLAY, "--no-results", flag, clause], (flag if not clause else clause,))

    # ---- other replay options
    opts = [("--seed", "1e999999999"), ("--seed", "x"), ("--loss", "inf"), ("--loss", "2"),
            ("--loss", "nan"), ("--detect", "1e999999s"), ("--detect", "-1us"), ("--snaplen", "1e9"),
            ("--snaplen", "10"), ("--capture-filter", "link=abc"), ("--capture-filter", "node=" + "9" * 5000),
            ("--capture-filter", "from=1e99999999s")]
    for opt, val in opts:
        extra = ["--capture", "c.pcap", "--out", "{in}/r"] if opt.startswith(("--snaplen", "--capture-filter")) else ["--no-results"]
        add(f"replay-{opt}-{val[:20]}", [*REPLAY, *extra, opt, val], (opt,))
    add("replay-capture-dir", [*REPLAY, "--out", "{in}/r", "--capture", "/tmp/"], ("--capture",))
    add("replay-capture-subdir", [*REPLAY, "--out", "{in}/r", "--capture", "sub/dir/c.pcap"], ("--capture",))
    add("replay-capture-no-results", [*REPLAY, "--no-results", "--capture", "c.pcap"], ("--capture",))
    add("replay-out-no-results", [*REPLAY, "--no-results", "--out", "{in}/r"], ("--out",))
    add("replay-out-exists", [*REPLAY, "--out", "{in}/r"], ("--out", "/r"), _mkdir("r"))
    add("replay-out-under-file", [*REPLAY, "--out", "{in}/f/r"], ("/f",), _write("f", ""))
    add("replay-out-proc", [*REPLAY, "--out", "/proc/emu-results"], ("/proc/emu-results",))
    add("replay-out-readonly", [*REPLAY, "--out", "/sys/emu-results"], ("/sys/emu-results",))

    # ---- emu trace options
    gen = ["trace", "mars", "-o", "{in}/o.json"]
    for opt, val in (("--nodes", "100000"), ("--nodes", "1e999999999"), ("--alpha", "inf"), ("--alpha", "nan"),
                     ("--alpha", "-1"), ("--decode-tokens", "1e10"), ("--seq", "1e999999999"), ("--seq", "0"),
                     ("--seq", "10000000000"), ("--chunk", "0"), ("--kv-budget", "-5"), ("--kv-budget", "0x"),
                     ("--topology", "ring:100000000"), ("--model", "{in}/m.toml"), ("--hw", "nope"),
                     ("--prefill-nodes", "99")):
        argv = ["trace", "pd" if opt == "--prefill-nodes" else "mars", "-o", "{in}/o.json", opt, val]
        setup = _write("m.toml", "layers = [") if val == "{in}/m.toml" else None
        name = {"--model": "m.toml", "--hw": "nope", "--topology": "topology"}.get(opt, opt)
        add(f"trace-opt-{opt}-{val[-16:]}", argv, (name,), setup)
    add("trace-out-dir", [*gen[:-1], "{in}/d"], ("d",), _mkdir("d"))
    add("trace-out-under-file", [*gen[:-1], "{in}/f/o.json"], ("/f",), _write("f", ""))
    add("trace-out-proc", [*gen[:-1], "/proc/o.json"], ("/proc/o.json",))

    # ---- sweep files and options
    sweeps = {
        "truncated": '[sweep]\nname = "s',
        "wrong-type": '[sweep]\nname = "s"\n[grid]\nseq = "abc"\n',
        "huge-grid": '[sweep]\nname = "s"\n[grid]\nseq = [' + ", ".join(map(str, range(512, 512 + 3000))) + "]\n"
                     "nodes = [" + ", ".join(map(str, range(2, 2000))) + "]\n",
        "nested": "a = " + "[" * 5000 + "]" * 5000 + "\n",
        "unknown-key": '[sweep]\nname = "s"\nbogus = 1\n',
        "huge-int": '[sweep]\nname = "s"\n[fixed]\nseq = ' + _huge_int() + "\n",
        "exponent": '[sweep]\nname = "s"\n[fixed]\nseq = "1e999999999"\n',
        "binary": "\x00\x01\x02",
        "bad-set": SWEEP_OK.replace("chunk = 128", 'chunk = 128\nset = ["hw.compute_flops=0"]'),
        "bad-set-grid": SWEEP_OK + '"hw.link_rate" = ["1Gbps", "1e999999999Gbps"]\n',
    }
    for name, text in sweeps.items():
        add(f"sweep-{name}", ["sweep", "{in}/s.toml", "--out", "{in}/o"], ("s.toml",), _sweep(text))
    add("sweep-missing", ["sweep", "{in}/none.toml"], ("none.toml",))
    add("sweep-directory", ["sweep", "{in}/d.toml"], ("d.toml",), _mkdir("d.toml"))
    add("sweep-scheduler-bogus", ["sweep", "{in}/s.toml", "--out", "{in}/o", "--scheduler", "bogus://x"],
        ("--scheduler",), _sweep(SWEEP_OK))
    add("sweep-scheduler-refused", ["sweep", "{in}/s.toml", "--out", "{in}/o", "--scheduler", "tcp://127.0.0.1:9"],
        ("--scheduler",), _sweep(SWEEP_OK))
    add("sweep-workers-0", ["sweep", "{in}/s.toml", "--out", "{in}/o", "--workers", "0"], ("--workers",),
        _sweep(SWEEP_OK))
    add("sweep-workers-exp", ["sweep", "{in}/s.toml", "--out", "{in}/o", "--workers", "1e9999"], ("--workers",),
        _sweep(SWEEP_OK))
    add("sweep-out-under-file", ["sweep", "{in}/s.toml", "--out", "{in}/f/o"], ("/f",),
        _many(_sweep(SWEEP_OK), _write("f", "")))
    add("sweep-out-is-file", ["sweep", "{in}/s.toml", "--out", "{in}/f"], ("/f",),
        _many(_sweep(SWEEP_OK), _write("f", "")))
    add("sweep-out-proc", ["sweep", "{in}/s.toml", "--out", "/proc/emu-sweep"], ("/proc/emu-sweep",), _sweep(SWEEP_OK))

    # ---- captures (emu pcap)
    caps = {
        "empty": _write("c.pcap", b""),
        "magic": _write("c.pcap", b"\x00" * 64),
        "truncated-header": _write("c.pcap", b"\x4d\x3c\xb2\xa1" + b"\x00" * 10),
        "pcapng-short-block": _pcapng_short_block,
        "huge-record": _pcap_huge_record,
        "directory": _mkdir("c.pcap"),
        "text": _write("c.pcap", "hello, not a capture\n" * 10),
    }
    for name, setup in caps.items():
        fname = {"pcapng-short-block": "short.pcapng", "huge-record": "huge.pcap"}.get(name, "c.pcap")
        add(f"pcap-{name}", ["pcap", "{in}/" + fname], (fname,), setup)
    add("pcap-missing", ["pcap", "{in}/none.pcap"], ("none.pcap",))

    # ---- results folders (emu compare, emu report)
    res = {
        "binary": _results_with_summary(bytes(range(256))),
        "list": _results_with_summary("[1, 2, 3]"),
        "string": _results_with_summary('"x"'),
        "directory": _results_with_summary(None, kind="dir"),
        "nested": _results_with_summary(_deep()),
        "huge-int": _results_with_summary('{"ttft_s": ' + _huge_int() + "}"),
        "wrong-types": _results_with_summary('{"ttft_s": "fast", "wire_bytes": [1], "frames": {"a": 1}}'),
        "empty-folder": _mkdir("r"),
    }
    for name, setup in res.items():
        add(f"compare-{name}", ["compare", "{in}/r", "{material}/res"], ("r",), setup)
        add(f"report-{name}", ["report", "{in}/r", "-o", "{in}/rep.html"], ("r",), setup)
    add("compare-pcap", ["compare", "{material}/ok.pcap"], ("ok.pcap",))
    add("compare-missing", ["compare", "{in}/none"], ("none",))
    add("report-missing", ["report", "{in}/none", "-o", "{in}/rep.html"], ("none",))
    add("report-out-dir", ["report", "{material}/res", "-o", "{in}/d"], ("-o", "d"), _mkdir("d"))
    add("report-out-under-file", ["report", "{material}/res", "-o", "{in}/f/rep.html"], ("/f",), _write("f", ""))
    add("report-out-proc", ["report", "{material}/res", "-o", "/proc/rep.html"], ("/proc/rep.html",))
    add("report-frames-negative", ["report", "{material}/res", "-o", "{in}/rep.html", "--frames", "-1"], ("--frames",))

    # ---- damaged results folders: every command reads them with one reader (emu.reader)
    def damaged(mutate):
        def setup(d: Path, material: Path):
            import shutil

            shutil.copytree(material / "res", d / "r")
            mutate(d / "r")
        return setup

    def put(name, data):
        return lambda r: (r / name).write_bytes(data if isinstance(data, bytes) else data.encode())

    def summary_with(**changes):
        def m(r):
            s = json.loads((r / "summary.json").read_text())
            s.update(changes)
            (r / "summary.json").write_text(json.dumps({k: v for k, v in s.items() if v is not None}))
        return m

    damage = {
        "links-empty": put("links.parquet", b""),
        "links-garbage": put("links.parquet", b"PAR1" + bytes(range(256)) * 4 + b"PAR1"),
        "links-is-ops": lambda r: (r / "links.parquet").write_bytes((r / "ops.parquet").read_bytes()),
        "summary-list": put("summary.json", "[1, 2, 3]"),
        "summary-no-nodes": summary_with(nodes=None),
        "summary-nodes-text": summary_with(nodes="4"),
        "summary-busiest-link": summary_with(busiest_link=[0, 1]),
        "summary-nested": put("summary.json", _deep()),
    }
    for name, mutate in damage.items():
        file = "links.parquet" if name.startswith("links") else "summary.json"
        add(f"export-{name}", ["export", "perfetto", "{in}/r", "-o", "{in}/t.json"], ("r", file), damaged(mutate))
    add("report-schedule-nested", ["report", "{in}/r", "-o", "{in}/rep.html"], ("r", "schedule.json"),
        damaged(put("schedule.json", _deep())))
    add("report-links-garbage", ["report", "{in}/r", "-o", "{in}/rep.html"], ("r", "links.parquet"),
        damaged(damage["links-garbage"]))
    add("export-nodes-past-the-run", ["export", "perfetto", "{material}/res", "-o", "{in}/t.json", "--nodes",
                                      "0-100000000"], ("--nodes", "100000000"))
    add("export-out-ends-in-slash", ["export", "perfetto", "{material}/res", "-o", "{in}/nosuchdir/"],
        ("-o", "nosuchdir"))
    # a folder named 200 times is read once: a summary that parses to ~60 MB of objects
    pad = "[" + "[]," * 900_000 + "[]]"
    add("compare-one-folder-200-times", ["compare", *["{in}/r"] * 200], (), damaged(summary_with(pad=json.loads(pad))),
        status=0)

    # ---- hardware: outputs are checked before any socket opens (loopback only)
    add("hw-listen-out-dir", ["hw", "listen", "--iface", "lo", "--out", "{in}/d", "--count", "1", "--timeout", "1s"],
        ("--out",), _mkdir("d"))
    add("hw-listen-out-proc", ["hw", "listen", "--iface", "lo", "--out", "/proc/x.pcap", "--count", "1", "--timeout", "1s"],
        ("/proc/x.pcap",))
    add("hw-listen-timeout-exp", ["hw", "listen", "--iface", "lo", "--timeout", "1e999999999s"], ("--timeout",))
    add("hw-send-rate-zero", ["hw", "send", "--iface", "lo", "--pcap", "{material}/ok.pcap", "--rate", "0bps"], ("--rate",))
    add("hw-serve-node-huge", ["hw", "serve", "--iface", "lo", "--node", "1e999999999", "--duration", "1s"], ("--node",))
    add("hw-send-to-negative", ["hw", "send", "--iface", "lo", "{material}/tiny.json", "--to", "-1"], ("--to",))
    add("hw-send-to-not-a-number", ["hw", "send", "--iface", "lo", "{material}/tiny.json", "--to", "x"], ("--to",))
    add("hw-send-to-with-pcap", ["hw", "send", "--iface", "lo", "--pcap", "{material}/ok.pcap", "--to", "1"],
        ("--to",))
    add("hw-send-to-with-count", ["hw", "send", "--iface", "lo", "{material}/tiny.json", "--to", "1", "--count",
                                  "5"], ("--count",))
    add("hw-send-to-out-not-empty", ["hw", "send", "--iface", "lo", "{material}/tiny.json", "--to", "1", "--out",
                                     "{in}/d"], ("--out",), _write("d/x", "x"))
    add("hw-send-to-unknown-iface", ["hw", "send", "--iface", "nosuch0", "{material}/tiny.json", "--to", "1"],
        ("nosuch0",))
    add("hw-serve-delay-negative", ["hw", "serve", "--iface", "lo", "--node", "1", "--delay-us", "-5",
                                    "--duration", "1s"], ("--delay-us",))
    add("hw-bringup-unknown-iface", ["hw", "bringup", "nosuch0", "--report", "{in}/r"], ("nosuch0",))
    add("hw-bringup-rates-zero", ["hw", "bringup", "lo", "--rates", "0bps", "--report", "{in}/r"], ("--rates",))
    add("hw-bringup-report-under-a-file", ["hw", "bringup", "lo", "--report", "{in}/f/r"], ("--report",),
        _write("f", "x"))
    add("calibrate-missing-capture", ["calibrate", "{in}/none.pcap", "-o", "{in}/p.toml"], ("none.pcap",))
    add("calibrate-no-board-frames", ["calibrate", "{material}/ok.pcap", "-o", "{in}/p.toml"], ("ok.pcap",))
    add("calibrate-garbage-capture", ["calibrate", "{in}/g.pcap", "-o", "{in}/p.toml"], ("g.pcap",),
        _write("g.pcap", b"\x00" * 100))
    add("calibrate-output-not-toml", ["calibrate", "{material}/ok.pcap", "-o", "{in}/p.txt"], ("-o",))
    add("calibrate-node-negative", ["calibrate", "{material}/ok.pcap", "--node", "-2"], ("--node",))
    add("calibrate-unknown-base", ["calibrate", "{material}/ok.pcap", "--base", "kr26"], ("kr26",))
    add("hw-serve-topology-huge", ["hw", "serve", "--iface", "lo", "--node", "1", "--topology", "full:20000",
                                   "--duration", "1s"], ("topology",))

    # ---- profiles
    add("profiles-show-unknown", ["profiles", "show", "nope"], ("nope",))
    add("profiles-show-bad-file", ["profiles", "show", "{in}/p.toml"], ("p.toml",), _write("p.toml", "x = ["))

    # ---- option values: one check for the CLI and the API (emu.validate), numbers in range
    idle = _trace_variant(_with(("meta", "nodes"), 5))  # the tiny trace's ops use 4 boards
    add("trace-meta-nodes-idle-replay", ["replay", T, "--no-results"], ("t.json", "meta.nodes"), idle)
    add("trace-meta-nodes-idle-show", ["trace", "show", T], ("t.json", "meta.nodes"), idle)
    add("scenario-zero-length", [*REPLAY, "--no-results", "--fail", "link 0-1 down at 1ms up at 1ms"],
        ("link 0-1 down at 1ms up at 1ms",))
    add("replay-seed-negative", [*REPLAY, "--no-results", "--seed", "-1"], ("--seed",))
    add("replay-snaplen-no-capture", [*REPLAY, "--no-results", "--snaplen", "10"], ("--snaplen",))
    for attr, val in (("latency_us", 1e30), ("latency_ns", "1e999999999"), ("rate_gbps", 1e30), ("mtu", 10**6)):
        add(f"topology-file-{attr}-{val}", [*REPLAY, "--no-results", "--topology", "{in}/topo.json"],
            ("topo.json", attr), _write("topo.json", json.dumps(
                {"nodes": [0, 1, 2, 3], "links": [{"u": i, "v": (i + 1) % 4, attr: val} for i in range(4)]})))
    add("hw-listen-snaplen-no-out", ["hw", "listen", "--iface", "lo", "--snaplen", "10", "--timeout", "1s"],
        ("--snaplen",))
    add("hw-listen-snaplen-out-big", ["hw", "listen", "--iface", "lo", "--out", "{in}/c.pcap", "--snaplen", "100000",
                                      "--timeout", "1s"], ("--snaplen",))
    for hd in ("100000000", "0"):
        add(f"hw-check-head-dim-{hd}", ["hw", "check", "--iface", "lo", "--scenario", "reduce-merge", "--head-dim", hd,
                                        "--timeout", "1s"], ("--head-dim",))
    add("dashboard-host-unresolvable", ["dashboard", "--host", "no.such.host.invalid", "--port", "0"], ("--host",))
    return c


CASES = cases()


# ------------------------------------------------------------------------- runner
@dataclass
class Outcome:
    status: int | None      # exit status; None: killed (by the alarm: a hang, or a signal)
    signal: int | None
    out: str
    err: str


def run_in_child(argv: list[str], cwd: Path, logs: Path) -> Outcome:
    """``emu.cli.main(argv)`` in a forked child, as ``python -m emu`` would run it."""
    from emu.cli import main

    sys.stdout.flush()
    sys.stderr.flush()
    out_p, err_p = logs / "out", logs / "err"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            fd_out = os.open(out_p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            fd_err = os.open(err_p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd_out, 1)
            os.dup2(fd_err, 2)
            sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
            os.chdir(cwd)
            resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.alarm(TIMEOUT_S)
            try:
                status = main(argv)
            except SystemExit as exc:
                code = exc.code
                if code is None:
                    status = 0
                elif isinstance(code, int):
                    status = code
                else:
                    print(code, file=sys.stderr)
                    status = 1
            except BaseException:  # what the interpreter would print
                traceback.print_exc()
                status = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(int(status) & 0xFF if isinstance(status, int) else 1)
    _, st = os.waitpid(pid, 0)
    read = lambda p: p.read_text(errors="replace") if p.exists() else ""  # noqa: E731
    if os.WIFSIGNALED(st):
        return Outcome(None, os.WTERMSIG(st), read(out_p), read(err_p))
    return Outcome(os.WEXITSTATUS(st), None, read(out_p), read(err_p))


def _tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def judge(case: Case, o: Outcome, new_files: set[str]) -> list[str]:
    """What is wrong with this outcome (empty: the case passes)."""
    problems = []
    if o.status is None:
        what = "hang (killed after %d s)" % TIMEOUT_S if o.signal == signal.SIGALRM else f"killed by signal {o.signal}"
        return [what]
    err = o.err.strip()
    if "Traceback" in o.err:
        last = err.splitlines()[-1] if err else ""
        problems.append(f"traceback: {last[:200]}")
    if o.status != case.status:
        problems.append(f"exit {o.status}, expected {case.status}")
    lines = err.splitlines()
    if case.status == 2 and len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr")
    if case.status == 2 and lines and not all(n in err for n in case.names):
        problems.append(f"does not name {' / '.join(case.names)}: {lines[-1][:200]}")
    if new_files:
        problems.append(f"left {sorted(new_files)[:3]}")
    return problems


def _fill(argv, inputs: Path, material: Path) -> list[str]:
    return [a.replace("{in}", str(inputs)).replace("{material}", str(material)) for a in argv]



@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, material: Path, tmp_path: Path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    if case.setup is not None:
        case.setup(inputs, material)
    before = _tree(inputs)
    material_before = _tree(material)
    o = run_in_child(_fill(case.argv, inputs, material), inputs, logs)
    new = (_tree(inputs) - before) | {f"material/{p}" for p in _tree(material) - material_before}
    problems = judge(case, o, new - set(case.files_ok))
    assert not problems, f"{case.id}: {'; '.join(problems)}\nstderr: {o.err[-2000:]}"


def test_the_harness_counts(request):
    """The suite's size, so a report can quote it (and a lost case is noticed)."""
    assert len(CASES) >= 238
    assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"
