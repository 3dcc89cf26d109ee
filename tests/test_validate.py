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
