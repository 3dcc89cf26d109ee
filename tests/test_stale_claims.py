"""A killed run never blocks the next one: claims and staged files name their owner, and a
later run removes what a dead owner left (emu.outputs.reclaim_stale), with one line saying so.
The capture's format follows its extension wherever it is written."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from emu import outputs
from emu.outputs import OutputFolder
from waits import HANG_S

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PCAP_NS, PCAPNG = bytes.fromhex("4d3cb2a1"), bytes.fromhex("0a0d0d0a")


def _emu(*args, cwd):
    return subprocess.run([sys.executable, "-m", "emu", *map(str, args)], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=HANG_S)


def _killed_while_capturing(args, cwd) -> int:
    """Start ``emu ARGS`` with stderr on a terminal, SIGKILL it at its first progress report (the
    capture is open and being written by then); its pid."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "emu", *map(str, args)], cwd=cwd, env=ENV, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        while b"replay [" not in seen:
            ready, _, _ = select.select([master], [], [], HANG_S)
            assert ready, f"hang: no progress report: {seen[-500:]!r}"
            try:
                chunk = os.read(master, 4096)
            except OSError:
                chunk = b""
            assert chunk, f"ended before its first progress report: {seen[-500:]!r}"
            seen += chunk
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=HANG_S) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return proc.pid


BOOT = "/proc/sys/kernel/random/boot_id"


def _hash(text: str) -> str:
    import hashlib

    return hashlib.sha1(text.encode()).hexdigest()[:8]


def _start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])


def _dead_owner() -> str:
    """The owner token of a process that has ended."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    token = outputs.owner_token(p.pid)
    p.stdin.close()
    p.wait()
    return token


# ---------------------------------------------------------------- owners
def test_an_owner_is_dead_when_its_process_is_gone_or_another_started_under_its_id():
    alive = outputs.owner_token()
    pid, start, host, boot = re.fullmatch(r"o(\d+)-(\d+)-(\w+)-(\w+)", alive).groups()

    def gone(token):
        return outputs.owner_gone(outputs.STAGED.fullmatch(f".res.{token}.abc123.part"))

    assert not gone(alive)
    assert gone(_dead_owner())
    assert gone(f"o{pid}-{int(start) + 1}-{host}-{boot}")     # this pid, started at another time
    assert gone(f"o{pid}-{start}-{host}-{'0' * 8 if boot != '0' * 8 else '1' * 8}")  # an earlier boot
    assert not gone(f"o999999999-{start}-{'f' * 8 if host != 'f' * 8 else 'e' * 8}-{boot}")  # another host


def test_a_claim_left_by_a_killed_process_is_reclaimed(tmp_path, capsys):
    code = ("import sys; from emu.outputs import OutputFolder; f = OutputFolder(sys.argv[1]); f.claim(); "
            "(f.staging / 'summary.json').write_text('{}'); print(f.staging, flush=True); sys.stdin.read()")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "res")], env=ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    staging = Path(p.stdout.readline().strip())  # the claim is made
    p.kill()
    p.wait()
    assert sorted(os.listdir(tmp_path)) == sorted(["res", staging.name]) and os.listdir(tmp_path / "res") == []
    with OutputFolder(tmp_path / "res") as f:
        (f.staging / "summary.json").write_text("[]")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(staging) in err[0] and f"process {p.pid}" in err[0] and "its empty claim" in err[0]
    assert os.listdir(tmp_path) == ["res"] and (tmp_path / "res" / "summary.json").read_text() == "[]"


def test_of_runs_reclaiming_one_folder_at_once_exactly_one_claims_it(tmp_path):
    holder = ("import sys; from emu.outputs import OutputFolder; f = OutputFolder(sys.argv[1]); f.claim(); "
              "print(f.staging, flush=True); sys.stdin.read()")
    p = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path / "res")], env=ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    p.kill()
    p.wait()
    racer = ("import sys; from emu.outputs import OutputFolder; from emu.errors import ConfigError; "
             "f = OutputFolder(sys.argv[1]); print('ready', flush=True); sys.stdin.readline()\n"
             "try:\n    f.claim(); print('won', flush=True); sys.stdin.read()\n"
             "except ConfigError as e:\n    print('refused', e, flush=True)")
    runs = [subprocess.Popen([sys.executable, "-c", racer, str(tmp_path / "res")], env=ENV, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(4)]
    for r in runs:
        assert r.stdout.readline() == "ready\n"
    for r in runs:  # all at once
        r.stdin.write("go\n")
        r.stdin.flush()
    said = [r.stdout.readline() for r in runs]
    for r in runs:
        r.stdin.close()
        r.wait()
    assert sum(x == "won\n" for x in said) == 1, said
    assert all(x == "won\n" or "already exists" in x for x in said), said


def test_a_live_claim_and_foreign_files_are_left_alone(tmp_path, capsys):
    live = OutputFolder(tmp_path / "res")
    live.claim()
    (tmp_path / ".notes.part").write_text("mine")  # not a staged name: never touched
    assert outputs.reclaim_stale(tmp_path) == []
    with pytest.raises(Exception, match="already exists"):
        OutputFolder(tmp_path / "res").claim()
    assert capsys.readouterr().err == ""
    live.abort()
    assert os.listdir(tmp_path) == [".notes.part"]


# ---------------------------------------------------------------- through the CLI, killed by SIGKILL
def test_a_replay_killed_while_capturing_does_not_block_the_retry(tmp_path, small_trace):
    args = ("replay", small_trace, "--out", "res", "--capture", "cap.pcap")
    pid = _killed_while_capturing(args, tmp_path)
    left = sorted(os.listdir(tmp_path))
    assert len(left) == 2 and left[1] == "res" and os.listdir(tmp_path / "res") == []
    assert left[0].startswith(f".res.o{pid}-") and any("cap.pcap" in f for f in os.listdir(tmp_path / left[0]))
    again = _emu(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    lines = [x for x in again.stderr.strip().splitlines() if not x.startswith("emu replay: warning: flow_control=ideal")]
    assert len(lines) == 1 and f"process {pid}" in lines[0] and left[0] in lines[0], again.stderr
    assert os.listdir(tmp_path) == ["res"] and (tmp_path / "res" / "summary.json").is_file()


def test_a_replay_killed_while_capturing_to_an_absolute_path_leaves_nothing_for_long(tmp_path, small_trace):
    caps = tmp_path / "caps"
    caps.mkdir()
    args = ("replay", small_trace, "--no-results", "--capture", caps / "cap.pcapng")
    pid = _killed_while_capturing(args, tmp_path)
    left = os.listdir(caps)
    assert len(left) == 1 and left[0].startswith(f"..cap.pcapng.{pid}.part.o{pid}-"), left
    again = _emu(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    lines = [x for x in again.stderr.strip().splitlines() if not x.startswith("emu replay: warning: flow_control=ideal")]
    assert len(lines) == 1 and f"process {pid}" in lines[0] and left[0] in lines[0], again.stderr
    assert os.listdir(caps) == ["cap.pcapng"] and (caps / "cap.pcapng").read_bytes()[:4] == PCAPNG


def test_an_export_removes_what_a_killed_export_left(tmp_path):
    import emu

    emu.replay(emu.trace("mars", nodes=4, seq=512, chunk=128), out=tmp_path / "run")
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    token = f"o{p.pid}-{_start_ticks(p.pid)}-{_hash(os.uname().nodename)}-{_hash(Path(BOOT).read_text().strip())}"
    p.stdin.close()
    p.wait()
    stale = out / f".t.json.{token}.k2j3h4ab.part"  # as emu.atomic names what it writes
    stale.write_bytes(b"{" * 1000)
    p = _emu("export", "perfetto", tmp_path / "run", "-o", out / "t.json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("\n") == 1 and str(stale) in p.stderr
    assert os.listdir(out) == ["t.json"]


# ---------------------------------------------------------------- the capture's format
@pytest.mark.parametrize("name,magic", [("c.pcapng", PCAPNG), ("c.pcap", PCAP_NS)])
def test_the_extension_decides_the_capture_format_wherever_it_is(tmp_path, name, magic):
    import emu

    t = emu.trace("ring", nodes=4, seq=512, chunk=128)
    emu.replay(t, capture=str(tmp_path / name))
    emu.replay(t, out=tmp_path / "res", capture=name)
    assert (tmp_path / name).read_bytes()[:4] == magic            # an absolute path
    assert (tmp_path / "res" / name).read_bytes()[:4] == magic    # a name inside the results folder
