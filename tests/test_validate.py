"""Option checks shared by the CLI and the Python API (emu.validate), and the bounds they keep."""

import pytest

from emu.errors import ConfigError
from emu.net.timeline import parse


@pytest.mark.parametrize("clause", ["link 0-1 down at 1ms up at 1ms", "node 2 down at 1ms up at 1000us",
                                    "link 0-1 degrade 0.5 at 1s until 1s", "link * loss 0.1 at 2ms until 2ms"])
def test_a_change_that_lasts_no_time_is_refused(clause):
    with pytest.raises(ConfigError, match="ends when it starts"):
        parse(clause)


def test_a_change_that_lasts_a_picosecond_is_kept():
    down, up = parse("link 0-1 down at 1000000ps up at 1000001ps")
    assert (down.kind, down.time_ps, up.kind, up.time_ps) == ("down", 10**6, "up", 10**6 + 1)


def test_one_snap_length_bound_for_every_capture():
    from emu.codec import FRAME_HEADER_LEN
    from emu.codec.pcap import HEADERS_ONLY
    from emu.replay.session import DEFAULT_SNAPLEN
    from emu.validate import SNAPLEN_MAX, SNAPLEN_MIN, snaplen

    assert SNAPLEN_MIN == FRAME_HEADER_LEN == HEADERS_ONLY == DEFAULT_SNAPLEN
    for bad in (SNAPLEN_MIN - 1, SNAPLEN_MAX + 1, 10, 262144):
        with pytest.raises(ConfigError, match=f"--snaplen {bad}: must be in 62..65535"):
            snaplen(bad, "--snaplen")
    assert snaplen(SNAPLEN_MIN, "x") == 62 and snaplen(SNAPLEN_MAX, "x") == 65535


@pytest.mark.parametrize("head_dim, heads, needle", [(0, 8, "--head-dim 0: must be at least 1"),
                                                     (100_000_000, 8, "--head-dim 100000000: must be at most 16384"),
                                                     (16384, 100, "values per merged state")])
def test_hw_check_bounds_the_merged_state_before_building_it(head_dim, heads, needle):
    from emu.hw import check as C
    from emu.hw.model import Board

    with pytest.raises(ConfigError, match=needle):
        C.build("reduce-merge", Board(node=1, heads=heads), head_dim=head_dim)
