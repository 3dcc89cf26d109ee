"""The replay's port buffers and flow control (hw.port_buffer, hw.flow_control; docs/engine.md,
"Port buffers and flow control"): what each mode does to a run, the summary's figures and the
warning an ideal run gives when it held more than the buffer."""

import pytest

import emu
from emu.cli import main
from emu.errors import ConfigError
from emu.replay.summary import buffer_warning


@pytest.fixture(scope="module")
def mars():
    # MARS on 8 boards: its replica pushes cross several hops and queue up to ~70 KiB at a port.
    return emu.trace("mars", nodes=8, seq=4096, chunk=1024)


def test_drop_tail_bounds_every_backlog_and_reliable_delivery_recovers(mars):
    ideal = emu.replay(mars, set={"hw.flow_control": "ideal", "hw.port_buffer": "8KiB"})
    drop = emu.replay(mars, set={"hw.flow_control": "drop", "hw.port_buffer": "8KiB"})
    s = drop.summary
    assert s["incomplete_ops"] == 0 and s["final_layout_owner_only"]
    assert s["dropped_by_cause"]["queue_full"] > 0 and s["retransmitted_frames"] > 0  # reliable on by itself
    assert 0 < s["peak_transit_backlog_bytes"] <= 8192 and s["ports_over_buffer"] == 0
    assert ideal.summary["peak_transit_backlog_bytes"] > 8192 and ideal.summary["ports_over_buffer"] > 0
    assert s["ttft_s"] > ideal.ttft_s
    assert drop.links["queue_bytes_max"].max() <= 8192
    per_port = drop.links.groupby("link").first()  # run totals: the same on every bin of a link
    assert per_port["run_dropped_queue_full"].sum() == s["dropped_by_cause"]["queue_full"]


FLOOR = {"hw.rto_min_ps": "100us"}


def test_a_buffer_never_filled_changes_nothing(mars):
    """Drop-tail with a buffer above ideal's peak backlog is the ideal run, frame for frame (at
    one timer floor: the two modes' defaults differ, docs/nic.md "Adaptive timeout")."""
    ideal = emu.replay(mars, reliable=True, set={"hw.flow_control": "ideal", **FLOOR})
    peak = ideal.summary["peak_transit_backlog_bytes"]
    drop = emu.replay(mars, reliable=True, set={"hw.flow_control": "drop", "hw.port_buffer": str(peak), **FLOOR})
    assert drop.summary["dropped_frames"] == 0
    for key in ("ttft_s", "wire_bytes", "frames", "peak_transit_backlog_bytes", "control_frames"):
        assert drop.summary[key] == ideal.summary[key], key
    one_less = emu.replay(mars, reliable=True, set={"hw.flow_control": "drop", "hw.port_buffer": str(peak - 1), **FLOOR})
    assert one_less.summary["dropped_by_cause"]["queue_full"] > 0
    # The same bound decides the ideal run's warning: a byte short of its peak, one port is over.
    assert buffer_warning(ideal.summary) is None and ideal.summary["ports_over_buffer"] == 0
    short = emu.replay(mars, reliable=True, set={"hw.flow_control": "ideal", "hw.port_buffer": str(peak - 1), **FLOOR}).summary
    assert short["ports_over_buffer"] >= 1 and short["peak_transit_backlog_bytes"] == peak
    assert buffer_warning(short).startswith("warning: flow_control=ideal held up to")


def test_the_cli_warns_once_when_an_ideal_backlog_exceeds_the_buffer(mars, tmp_path, capsys):
    path = tmp_path / "mars.json"
    assert main(["trace", "mars", "--nodes", "8", "--seq", "4096", "--chunk", "1024", "-o", str(path)]) == 0
    capsys.readouterr()
    assert main(["replay", str(path), "--no-results", "--set", "hw.flow_control=ideal", "--set", "hw.port_buffer=8KiB"]) == 0
    out, err = capsys.readouterr()
    # (a first run after a change to the engine also says it compiles: not a warning)
    lines = [x for x in err.strip().splitlines() if not x.startswith("mcf-emu: ")]
    assert len(lines) == 1 and lines[0].startswith("emu replay: warning: flow_control=ideal held up to")
    assert "exceeded hw.port_buffer (8 KiB)" in lines[0]
    assert "buffers   ideal, 8 KiB per port" in out
    assert main(["replay", str(path), "--no-results", "--set", "hw.flow_control=ideal"]) == 0  # 128 KiB holds it
    assert "warning" not in capsys.readouterr().err


def test_pause_is_lossless_and_holds_no_more_than_the_buffer_for_a_link(mars):
    r = emu.replay(mars, set={"hw.flow_control": "pause", "hw.port_buffer": "28KiB"})
    s = r.summary
    per_port = r.links.groupby("link").first()
    assert per_port["run_paused_s"].sum() == pytest.approx(s["paused_s"])
    assert per_port["run_peak_held_bytes"].max() == s["peak_held_bytes"]
    assert s["incomplete_ops"] == 0 and s["dropped_frames"] == 0 and s["retransmitted_frames"] == 0
    assert s["control_frames_by_op"]["ack"] == 0  # lossless: reliable delivery stays off
    assert s["ports_paused"] > 0 and s["paused_s"] > 0
    assert 0 < s["peak_held_bytes"] <= 28 * 1024
    with pytest.raises(ConfigError, match=r"link 0-1: a 16384 B port buffer leaves no room for pause"):
        emu.replay(mars, set={"hw.flow_control": "pause", "hw.port_buffer": "16KiB"})


def test_credit_is_lossless_and_holds_no_more_than_the_buffer_for_a_link(mars):
    r = emu.replay(mars, set={"hw.flow_control": "credit", "hw.port_buffer": "8KiB"})
    s = r.summary
    assert s["flow_control"] == "credit"
    assert s["incomplete_ops"] == 0 and s["dropped_frames"] == 0 and s["retransmitted_frames"] == 0
    assert s["control_frames_by_op"]["ack"] == 0  # lossless: reliable delivery stays off
    assert s["ports_paused"] > 0 and s["paused_s"] > 0  # under credit: ports waiting for credit
    assert 0 < s["peak_held_bytes"] <= 8 * 1024
    assert s["ttft_s"] >= emu.replay(mars).ttft_s
    with pytest.raises(ConfigError, match=r"link \d+-\d+: a 4096 B port buffer is too small for credit"):
        emu.replay(mars, set={"hw.flow_control": "credit", "hw.port_buffer": "4KiB"})


def test_a_credit_deadlock_stops_the_replay_in_one_line_naming_the_cycle(mars):
    """MARS on a bidirectional ring of 8 with small buffers: replica pushes that cross several
    hops hold each port's credit at the next board, whose port waits for credit too, around the
    ring. The replay ends with ops unfinished and says which ports wait in a cycle; on dateline
    routes, whose buffer dependencies have no cycle, the same replay runs to the end."""
    with pytest.raises(ConfigError, match=r"^credit deadlock at [\d,.]+ us: ports (\d->\d -> ){8}\d->\d are "
                                          r"waiting for credit in a cycle, each holding the frames the next waits for; "
                                          r"--routing dateline \(a torus, mesh or ring\), hw.flow_control=drop or a larger "
                                          r"hw.port_buffer avoids it") as err:
        emu.replay(mars, topology="bring", set={"hw.flow_control": "credit", "hw.port_buffer": "6KiB"})
    assert "\n" not in str(err.value)
    s = emu.replay(mars, topology="bring", routing="dateline",
                   set={"hw.flow_control": "credit", "hw.port_buffer": "6KiB"}).summary
    assert s["incomplete_ops"] == 0 and s["dependency_cycle"] == "" and s["paused_s"] > 0
