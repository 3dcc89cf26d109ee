"""The baselines' options, each defaulting to what its authors' code does (docs/workloads.md,
"Baseline options"): each changes what it should and nothing else. Small replays (4-8
boards, few layers); the directions they assert hold at any machine speed (simulated time)."""

from collections import Counter

import numpy as np
import pytest

from emu.cli import main
from emu.errors import ConfigError
from emu.replay.run import Options, Replay
from emu.replay.session import replay
from emu.workload.analysis import delivered_bytes
from emu.workload.enums import Kind, MsgOp, Residency, Stage
from emu.workload.generate import Params, generate

SMALL = dict(seq=2048, nodes=8, overrides=["model.layers=3"])


def gen(scheme, **kw):
    return generate(Params(scheme=scheme, **{**SMALL, **kw}))


def summary(trace):
    return replay(trace).summary


def ring_sends(t):
    o = t.ops
    return np.flatnonzero((o["kind"] == Kind.send) & (o["residency"] == Residency.transient))


# ---------------------------------------------------------------- ring: chunk, lookahead, forwarding

def test_whole_chunk_is_one_chunk():
    t = gen("zigzag", chunk="whole")
    assert (t.meta["chunk"], t.meta["n_chunks"], t.meta["scheme"]["chunk_mode"]) == (2048, 1, "whole")
    assert main(["trace", "ring", "--seq", "512", "--nodes", "4", "--chunk", "whole", "--set", "model.layers=1",
                 "-o", "/dev/null"]) == 0


@pytest.mark.parametrize("scheme", ["ring", "zigzag", "pd"])
def test_lookahead_moves_the_same_bytes_earlier(scheme):
    off, on = gen(scheme, chunk=256), gen(scheme, chunk=256, ring_lookahead=True)
    for msg in MsgOp:
        for stage in Stage:
            assert delivered_bytes(on, msg, stage) == delivered_bytes(off, msg, stage), (msg, stage)
    assert on.meta["scheme"]["ring_lookahead"] and not off.meta["scheme"]["ring_lookahead"]
    # the history ring's first sends wait for the previous layer's attention, not this layer's QKV
    o = on.ops
    first = [i for i in ring_sends(on) if o["step"][i] == 0 and o["chunk"][i] > 0]
    kinds = Counter(frozenset(int(o["kind"][d]) for d in on.deps(i)) for i in first)
    assert kinds[frozenset({int(Kind.attn)})] == kinds[frozenset({int(Kind.qkv)})] > 0
    s_off, s_on = summary(off), summary(on)
    assert s_on["kv_bytes"] == s_off["kv_bytes"]
    assert s_on["ttft_s"] < s_off["ttft_s"]  # the ring is behind its compute at 256 tokens on 8 boards


def test_after_compute_forwarding_holds_two_sets():
    """Unchunked Zigzag is compute-bound: forwarding on arrival piles up sets; ring-flash-
    attention's double buffer holds the one it computes on and the one arriving."""
    t_dbl = gen("zigzag", seq=4096, chunk="whole")
    t_arr = gen("zigzag", seq=4096, chunk="whole", ring_forward="on-arrival")
    o = t_dbl.ops
    for i in ring_sends(t_dbl):
        if o["step"][i] > 0:  # waits for its source's attention of the step before
            src = int(t_dbl.src(i)[0])
            att = [d for d in t_dbl.deps(i) if o["kind"][d] == Kind.attn]
            assert len(att) == 1 and o["node"][att[0]] == src and o["step"][att[0]] == o["step"][i] - 1
    assert not any(o2 == Kind.attn for i in ring_sends(t_arr) for o2 in t_arr.ops["kind"][t_arr.deps(i)])
    s_dbl, s_arr = summary(t_dbl), summary(t_arr)
    assert s_dbl["ttft_s"] == s_arr["ttft_s"] and s_dbl["kv_bytes"] == s_arr["kv_bytes"]
    set_bytes = 4096 // 8 * 256  # one board's share of one layer's KV
    assert s_dbl["peak_node_transient_bytes"] <= 2 * set_bytes < s_arr["peak_node_transient_bytes"]


# ---------------------------------------------------------------- Ulysses, USP: all-to-all, degrees

@pytest.mark.parametrize("scheme,kw", [("ulysses", {"nodes": 4}), ("usp", {"ulysses_degree": 4})])
def test_concurrent_all_to_all_delivers_every_block_once(scheme, kw):
    conc = gen(scheme, chunk=512, **kw)
    pair = gen(scheme, chunk=512, all_to_all="pairwise", **kw)
    o, p = conc.ops, pair.ops
    assert not (o["kind"] == Kind.all_to_all).any()
    # the same (source, destination, message, chunk, layer, bytes) blocks as the exchanges carry
    want = Counter()
    for i in np.flatnonzero(p["kind"] == Kind.all_to_all):
        for a in pair.src(i).tolist():
            for b in pair.dst(i).tolist():
                if a != b:
                    want[(a, b, int(p["msg_op"][i]), int(p["chunk"][i]), int(p["layer"][i]), int(p["bytes"][i]))] += 1
    sends = np.flatnonzero((o["kind"] == Kind.send) & (o["stage"] == Stage.prefill) & (o["residency"] == Residency.none))
    got = Counter((int(conc.src(i)[0]), int(conc.dst(i)[0]), int(o["msg_op"][i]), int(o["chunk"][i]),
                   int(o["layer"][i]), int(o["bytes"][i])) for i in sends)
    assert got == want and max(got.values()) == 1
    # every pair is posted at once: a block waits only for its source's own op
    for i in sends:
        assert all(o["node"][d] == conc.src(i)[0] for d in conc.deps(i))
    # the replay delivers each once, to its one destination, and owns the same KV as the engine's
    rp = Replay(conc, Options(engine="python")).run()
    assert rp.incomplete() == [] and not rp.cluster.directory.errors
    seen = Counter((tr.src, tuple(tr.dsts), tr.meta["layer"], tr.nbytes) for tr in rp.cluster.transfers
                   if tr.meta["op"] in (MsgOp.query, MsgOp.kv_transfer, MsgOp.partial_state)
                   and tr.meta["stage"] == 0)
    assert sum(seen.values()) >= len(sends)
    s_conc, s_pair = summary(conc), summary(pair)
    assert s_conc["kv_bytes"] == s_pair["kv_bytes"]
    assert s_conc["owner_only_node_kv_bytes"] == s_pair["owner_only_node_kv_bytes"]
    assert s_conc["ttft_s"] < s_pair["ttft_s"]


def test_degrees_no_reference_accepts_are_refused(capsys):
    with pytest.raises(ConfigError, match=r"degrees the model allows: 1, 2, 3, 4, 6, 12"):
        gen("ulysses", nodes=16, chunk=512)  # 12 query heads: 4 boards would idle
    with pytest.raises(ConfigError, match="heads would split unevenly"):
        gen("ulysses", chunk=512)  # 8 boards: 2 or 1 heads each
    with pytest.raises(ConfigError, match="--ulysses-degree 8"):
        gen("usp", nodes=16, chunk=512, ulysses_degree=8)
    assert gen("ulysses", chunk=512, uneven_heads=True).meta["scheme"]["uneven_heads"]
    assert gen("usp", nodes=12, seq=1536, chunk=768, ulysses_degree=6).meta["scheme"]["ulysses_degree"] == 6
    assert main(["trace", "ulysses", "--nodes", "16", "-o", "/tmp/never-written.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "degrees the model allows: 1, 2, 3, 4, 6, 12" in err and "Traceback" not in err


# ---------------------------------------------------------------- PD: where the first token comes from

@pytest.mark.parametrize("mode", ["bulk", "stream"])
def test_pd_first_token_on_the_prefill_side(mode):
    pre, dec = gen("pd", chunk=512, pd_mode=mode, decode_tokens=2), \
        gen("pd", chunk=512, pd_mode=mode, decode_tokens=2, first_token="decode")
    (lm,) = np.flatnonzero(pre.ops["kind"] == Kind.lm_head)
    assert pre.ops["node"][lm] < 4 and pre.schedule["pd"]["first_token"] == "prefill"
    assert pre.schedule["pd"]["first_token_board"] == pre.ops["node"][lm]
    # the handoff is decode's start: every handoff byte still moves, before decode's first step
    for t in (pre, dec):
        hand = (t.ops["msg_op"] == MsgOp.kv_transfer) & (t.ops["residency"] == Residency.owner) & \
            (t.ops["kv_id"] < t.meta["n_chunks"] * 8 * 3)  # prompt blocks, not the decode tokens' KV
        assert t.ops["bytes"][hand].sum() == 2048 * 256 * 3
    s_pre, s_dec = summary(pre), summary(dec)
    assert s_pre["ttft_s"] < s_dec["ttft_s"]
    assert s_pre["kv_bytes"] == s_dec["kv_bytes"]
    assert s_pre["final_node_kv_bytes"] == s_dec["final_node_kv_bytes"]
    assert s_pre["options"]["first_token"] == "prefill" and s_dec["options"]["first_token"] == "decode"


def test_summary_and_show_state_the_options(tmp_path, capsys):
    from emu.replay.summary import format_summary

    s = summary(gen("pd", chunk=512))
    assert "first token on the prefill side" in format_summary(s)
    assert "ring forward after-compute, lookahead off" in format_summary(s)
    out = tmp_path / "u.json"
    assert main(["trace", "usp", "--seq", "1024", "--nodes", "4", "--chunk", "256", "--all-to-all", "pairwise",
                 "--set", "model.layers=1", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["trace", "show", str(out)]) == 0
    assert "all-to-all pairwise" in capsys.readouterr().out


def test_option_values_are_checked():
    for kw, flag in (({"ring_forward": "eager"}, "--ring-forward"), ({"all_to_all": "ring"}, "--all-to-all"),
                     ({"first_token": "both"}, "--first-token"), ({"ring_lookahead": "yes"}, "--ring-lookahead")):
        with pytest.raises(ConfigError, match=flag):
            gen("ring", chunk=256, **kw)


# ---------------------------------------------------------------- --functional checks the layout

@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_functional_takes_the_layout_the_replay_produced(engine):
    t = generate(Params(scheme="mars", seq=1024, nodes=4, chunk=256, decode_tokens=2, overrides=["model.layers=2"]))
    good = Replay(t, Options(functional=True, engine=engine)).run().functional.summary()
    assert good["layout_mismatches"] == 0 and good["payload_mismatches"] == 0 and good["max_rel_error"] < 1e-3
    t.schedule["decode"]["start_shards"] = [1024, 0, 0, 0]  # what the replay did not produce
    bad = Replay(t, Options(functional=True, engine=engine)).run().functional.summary()
    assert bad["layout_mismatches"] == 4
    assert any("schedule.decode.start_shards says 1024" in m for m in bad["mismatches"])
    # the reductions still use where the KV really is, so the numbers stay right
    assert bad["max_rel_error"] < 1e-3
