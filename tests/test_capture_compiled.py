"""A capture written by the compiled loop is the Python path's, byte for byte.

The compiled loop rebuilds each frame's Meta from its own rows (emu.replay.wire_meta); the
Python path keeps the Meta the Cluster built. Every scheme's sends (parts, drains and
invalidates, reductions' partial results, all-to-all pairs), reliable delivery's acks,
probes, nacks and resends, and a re-route after a link failure, on both engines."""

import numpy as np
import pytest

import emu

CASES = {
    "mars": dict(trace=("mars", dict(nodes=4, seq=512, chunk=128, decode_tokens=2))),
    "ring": dict(trace=("ring", dict(nodes=4, seq=512, chunk=128, decode_tokens=2))),
    "zigzag": dict(trace=("zigzag", dict(nodes=4, seq=512, chunk=128, decode_tokens=1))),
    "pd": dict(trace=("pd", dict(nodes=4, seq=512, chunk=128, decode_tokens=2))),
    "ulysses": dict(trace=("ulysses", dict(nodes=4, seq=512, decode_tokens=1))),
    "usp": dict(trace=("usp", dict(nodes=4, seq=512, decode_tokens=1))),
    "mars-lossy": dict(trace=("mars", dict(nodes=4, seq=512, chunk=128, decode_tokens=2)), loss=0.02, seed=3),
    "ring-failure": dict(trace=("ring", dict(nodes=4, seq=512, chunk=128, decode_tokens=1)), topology="torus:2x2",
                         fail=("link 0-1 down at 2ms up at 40ms",)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_compiled_loops_capture_is_the_python_paths(case, tmp_path):
    spec = dict(CASES[case])
    scheme, params = spec.pop("trace")
    tr = emu.trace(scheme, **params)
    captures = {}
    for engine in ("python", "compiled"):
        path = tmp_path / f"{engine}.pcapng"
        r = emu.replay(tr, capture=str(path), engine=engine, **spec)
        assert r.engine.engine == engine  # the run was not moved to the other engine
        captures[engine] = path.read_bytes()
    assert len(captures["compiled"]) > 1000
    assert captures["compiled"] == captures["python"]


def test_a_capture_of_more_than_64_boards_names_every_destination(tmp_path):
    """Boards 0-63 are in dst_set; a frame to a board beyond them carries its route as route_id
    (docs/wire-format.md, Addressing), so every frame decodes with a destination."""
    from emu.codec import check_headers, decode_frames, read_capture

    tr = emu.trace("mars", nodes=72, seq=512, chunk=128, decode_tokens=1)
    path = tmp_path / "wide.pcapng"
    r = emu.replay(tr, capture=str(path), topology="torus:9x8", loss=0.01, seed=1)
    assert r.engine.engine == "compiled"
    heads = [decode_frames(b.buf, b.offsets, wirelen=b.wirelen).headers for b in read_capture(path)]
    h = np.concatenate(heads)
    check_headers(h)  # raises on a frame with no destination
    wide = h["route_id"] != 0
    assert wide.any() and (~wide).any()
    # a unicast beyond board 63 (acks, nacks and probes too) names the board's own route
    one = wide & (h["dst_set"] == 0) & (h["collective"] == 0)
    assert one.any() and (h["route_id"][one] >= 65).all() and (h["route_id"][one] <= 72).all()
    # a frame whose destinations are all below 64 keeps route_id 0
    assert (h["dst_set"][~wide] != 0).all()
