"""Results folders (emu.outputs): claimed once, staged privately, published whole; signals,
full disks and a second run on the same folder leave nothing partial and nothing mixed."""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from emu.errors import ConfigError
from emu.outputs import OutputFolder, Terminated, check_writable, file_name
from waits import HANG_S, wait_until

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _emu(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "emu", *map(str, args)], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


def _session_alive(sid: int) -> list[int]:
    """Processes of session ``sid`` still running (zombies excluded)."""
    alive = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            alive.append(int(d.name))
    return alive


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# ---------------------------------------------------------------- the module itself
def test_second_claim_of_an_explicit_folder_fails_and_leaves_the_first(tmp_path):
    a = OutputFolder(tmp_path / "r")
    a.claim()
    with pytest.raises(ConfigError, match=r"--out .*/r: already exists"):
        OutputFolder(tmp_path / "r").claim()
    assert (tmp_path / "r").is_dir() and a.staging.is_dir()
    a.abort()
    assert _tree(tmp_path) == []


def test_default_names_take_the_next_free_suffix_and_staging_is_unique(tmp_path):
    folders = [OutputFolder(default=tmp_path / "x") for _ in range(3)]
    for f in folders:
        f.claim()
    assert [f.path.name for f in folders] == ["x", "x-2", "x-3"]
    assert len({f.staging for f in folders}) == 3
    for i, f in enumerate(folders):
        (f.staging / "summary.json").write_text(str(i))
        f.publish()
    assert [(tmp_path / n / "summary.json").read_text() for n in ("x", "x-2", "x-3")] == ["0", "1", "2"]
    assert _tree(tmp_path) == ["x", "x-2", "x-2/summary.json", "x-3", "x-3/summary.json", "x/summary.json"]


def test_an_error_inside_the_block_removes_staging_and_claim(tmp_path):
    with pytest.raises(RuntimeError):
        with OutputFolder(tmp_path / "r") as f:
            (f.staging / "big.pcap").write_bytes(b"x" * 1000)
            raise RuntimeError("boom")
    assert _tree(tmp_path) == []


def test_a_write_error_names_the_folder(tmp_path):
    with pytest.raises(OSError) as info:
        with OutputFolder(tmp_path / "r"):
            raise OSError(28, "No space left on device")
    assert info.value.filename == str(tmp_path / "r")
    assert _tree(tmp_path) == []


def test_unwritable_locations_are_refused_before_anything_runs(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot create"):
        OutputFolder(tmp_path / "file" / "r").claim()
    with pytest.raises(ConfigError, match="exists and is not a folder"):
        OutputFolder(tmp_path / "file").claim()
    with pytest.raises(ConfigError, match="is a folder"):
        check_writable(tmp_path, "-o")
    with pytest.raises(ConfigError, match="cannot create"):
        check_writable(tmp_path / "file" / "x.html", "-o")
    assert _tree(tmp_path) == ["file"]


@pytest.mark.parametrize("bad", ["", "/tmp/", "sub/dir/c.pcap", "..", "c.txt"])
def test_capture_names_are_plain_file_names(bad):
    with pytest.raises(ConfigError, match="--capture"):
        file_name(bad, "--capture", (".pcap", ".pcapng"))


# ---------------------------------------------------------------- through the CLI
def test_two_replays_on_one_folder_never_mix(tmp_path, small_trace):
    other = tmp_path / "ring2k.json"
    subprocess.run([sys.executable, "-m", "emu", "trace", "ring", "--seq", "2048", "-o", str(other)], env=ENV,
                   check=True, capture_output=True)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "res"
    runs = {t.name: _emu("replay", t, "--out", out, "--capture", "cap.pcap", cwd=work) for t in (small_trace, other)}
    result = {name: (p.wait(timeout=HANG_S), p.stderr.read()) for name, p in runs.items()}
    winners = [name for name, (rc, _) in result.items() if rc == 0]
    losers = [(name, err) for name, (rc, err) in result.items() if rc == 2]
    assert len(winners) == 1 and len(losers) == 1, result
    err = losers[0][1]
    assert err.strip().count("\n") == 0 and "already exists" in err and str(out) in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trace"] == winners[0]
    assert sorted(os.listdir(work)) == ["res"]  # no staging left by either run
    from emu.codec.pcap import read_capture

    # the capture is the winner's: every frame it delivered, once per hop
    frames = sum(len(b) for b in read_capture(out / "cap.pcap"))
    assert frames == summary["frames"] - summary["dropped_frames"]


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_captured_replay_leaves_nothing(tmp_path, small_trace, sig, status):
    out = tmp_path / "res"
    proc = _emu("replay", small_trace, "--out", out, "--capture", "cap.pcap", cwd=tmp_path)
    # wait until the capture is being written into the staging folder
    wait_until(lambda: [p for p in tmp_path.glob(".res.*.part/*") if p.stat().st_size > 1 << 20],
               "a capture over 1 MiB in the staging folder", proc=proc)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == status, err
    assert err.strip().count("\n") == 0 and signal.Signals(sig).name in err and "Traceback" not in err
    assert os.listdir(tmp_path) == []
    assert _session_alive(proc.pid) == []


def _limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, resource.RLIM_INFINITY))


def test_a_full_disk_during_a_capture_is_one_line_and_leaves_nothing(tmp_path, small_trace):
    # RLIMIT_FSIZE makes a write past 8 MB fail with EFBIG, like a disk filling up (Python
    # ignores SIGXFSZ); works without root or a spare filesystem.
    proc = _emu("replay", small_trace, "--out", tmp_path / "res", "--capture", "cap.pcap", cwd=tmp_path,
                preexec_fn=_limit_file_size)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 2
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert "write failed" in err and str(tmp_path / "res") in err
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_really_full_disk(tmp_path, small_trace):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        proc = _emu("replay", small_trace, "--out", mnt / "res", "--capture", "cap.pcap", cwd=tmp_path)
        _, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 2
        assert err.strip().count("\n") == 0 and "No space left on device" in err
        assert os.listdir(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_sigterm_to_a_sweep_stops_its_workers_and_keeps_what_finished(tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "sw"
    proc = _emu("sweep", "quick", "--out", out, "--workers", "2", cwd=tmp_path)
    wait_until(lambda: list(out.glob("parts/*.parquet")), "a finished point", proc=proc)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 143, err
    assert err.strip().count("\n") == 0 and "SIGTERM" in err
    parts = sorted(p.stem for p in (out / "parts").glob("*.parquet"))
    # its workers end (they were told to; how soon is the machine's), and none wrote a part since
    wait_until(lambda: _session_alive(proc.pid) == [], "the sweep's workers ending")
    assert sorted(p.stem for p in (out / "parts").glob("*.parquet")) == parts, "a sweep worker outlived the sweep"
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert parts and sorted(r["point"] for r in rows) == parts
    assert not [p for p in out.rglob("*") if p.name.endswith(".part")]


def test_a_refused_scheduler_leaves_no_sweep_folder(tmp_path):
    proc = _emu("sweep", "quick", "--out", tmp_path / "sw", "--scheduler", "tcp://127.0.0.1:9", cwd=tmp_path)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 2 and err.strip().count("\n") == 0 and "--scheduler" in err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("raised,status,said", [(KeyboardInterrupt(), 130, "interrupted (SIGINT)"),
                                                 (Terminated(signal.SIGTERM), 143, "terminated (SIGTERM)")])
def test_a_signal_inside_compiled_codes_python_callback_exits_as_that_signal(monkeypatch, capsys, raised, status, said):
    # numba boxes a returned array through a Python callback: a signal landing there reaches
    # the caller as a SystemError raised from the KeyboardInterrupt (or Terminated)
    from emu import cli

    def run(args):
        try:
            raise raised
        except BaseException as inner:
            raise SystemError("<function _numba_unpickle> returned a result with an exception set") from inner

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv: argparse.Namespace(func=run, command="replay"))
    assert cli.main([]) == status
    err = capsys.readouterr().err
    assert err == f"emu replay: {said}; unfinished output removed\n"


def test_a_system_error_with_no_signal_behind_it_is_not_taken_for_one(monkeypatch):
    from emu import cli

    def run(args):
        raise SystemError("a bug")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv: argparse.Namespace(func=run, command="replay"))
    with pytest.raises(SystemError, match="a bug"):
        cli.main([])


def test_an_atomic_file_gets_the_usual_permissions_and_a_failed_one_leaves_nothing(tmp_path):
    # mkstemp makes its file 0600; what emu.atomic publishes is readable as any file the user
    # writes (0666 less the umask), and a write that fails leaves neither file nor temporary.
    from emu.atomic import atomic_file

    old = os.umask(0o022)
    try:
        with atomic_file(tmp_path / "out.bin") as fh:
            fh.write(b"x")
        with pytest.raises(RuntimeError), atomic_file(tmp_path / "bad.bin") as fh:
            fh.write(b"y")
            raise RuntimeError("the writer failed")
    finally:
        os.umask(old)
    assert (tmp_path / "out.bin").read_bytes() == b"x"
    assert (tmp_path / "out.bin").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
