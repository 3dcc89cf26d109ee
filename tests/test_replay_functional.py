"""`emu replay --functional`: real bytes through the NICs and real attention states through
the in-network merges, checked against an independent numpy attention; timing unchanged.
It runs on the compiled loop (emu.replay.functional_feed); the Python path is the reference
it must equal, merge for merge."""

import json
import zlib

import numpy as np
import pytest

from emu.cli import main
from emu.codec import Dtype
from emu.errors import ConfigError
from emu.nic import reduce as R
from emu.replay import functional as F
from emu.replay.summary import format_summary, summarize
from emu.replay.run import Options, Replay
from emu.workload.enums import Kind
from emu.workload.trace import load_trace

SMALL = ["--seq", "1024", "--nodes", "4", "--chunk", "256", "--decode-tokens", "3"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("ftraces")
    out = {}
    for scheme in ("mars", "pd"):
        out[scheme] = d / f"{scheme}.json"
        extra = ["--nodes", "8"] if scheme == "pd" else []
        assert main(["trace", scheme, *SMALL, *extra, "-o", str(out[scheme])]) == 0
    out["fp32q"] = d / "fp32q.json"
    assert main(["trace", "mars", *SMALL, "--set", "model.act_dtype=fp32", "-o", str(out["fp32q"])]) == 0
    return out


def fp16_states(trace):
    """The same trace with its decode partial states carried as fp16 (half the bytes)."""
    red = trace.ops["kind"] == Kind.reduce
    trace.ops["dtype"][red] = int(Dtype.fp16)
    trace.ops["bytes"][red] //= 2
    return trace


def reference_attention(q, K, V):
    """Plain multi-head softmax attention in float64, with each key/value head repeated for
    its group of query heads (written independently of emu.replay.functional)."""
    H, d = q.shape
    K = np.repeat(K.astype(np.float64), H // K.shape[1], axis=1)
    V = np.repeat(V.astype(np.float64), H // V.shape[1], axis=1)
    out = np.empty((H, d))
    for h in range(H):
        s = K[:, h, :] @ q[h].astype(np.float64) / np.sqrt(d)
        w = np.exp(s - s.max())
        out[h] = (w / w.sum()) @ V[:, h, :]
    return out


def run(trace, **kw):
    """The replay run, and the merged result of each reduction as the leader got it."""
    rp = Replay(trace, Options(**kw))
    merged = []
    if rp.functional:
        orig = rp.functional.reduced
        rp.functional.reduced = lambda op, result: (merged.append((op, result)), orig(op, result))
    rp.run()
    return rp, merged


@pytest.mark.parametrize("name,states,tol", [("mars", "fp32", 1e-5), ("fp32q", "fp32", 1e-5), ("pd", "fp32", 1e-5),
                                             ("mars", "fp16", 2e-3)])
def test_merged_attention_matches_numpy_over_the_whole_kv(traces, name, states, tol):
    trace = load_trace(str(traces[name]))
    if states == "fp16":
        trace = fp16_states(trace)
    rp, merged = run(trace, functional=True)
    fn, ops = rp.functional, trace.ops
    assert rp.engine == "compiled"
    reduces = np.flatnonzero(ops["kind"] == Kind.reduce)
    assert rp.incomplete() == [] and len(merged) == reduces.size == fn.reductions > 0
    worst = 0.0
    for op, result in merged:
        t, l = int(ops["chunk"][op]), int(ops["layer"][op])
        # The holders' shards at step t partition the whole KV of that step: prompt + tokens 0..t.
        rows = np.sort(np.concatenate([fn._rows(int(h), t) for h in trace.src(op)]))
        assert rows.tolist() == list(range(fn.prompt + t + 1))
        want = reference_attention(fn._query(t, l), fn.K[rows], fn.V[rows])
        got = R.finish(R.unpack_state(result, fn.H, fn.d, Dtype(int(ops["dtype"][op]))))
        worst = max(worst, float(np.max(np.abs(got - want))))
    assert worst < tol
    s = summarize(rp)["functional"]
    assert s["state_dtypes"] == [states] and s["payload_mismatches"] == 0
    assert s["max_abs_error"] == pytest.approx(worst, rel=1e-6, abs=1e-12) and s["max_rel_error"] > 0
    # Every delivery of every op was checked: one per (source, destination) of each send,
    # and the partial states between boards of each reduction tree.
    sends = ops["kind"] != Kind.reduce
    comm = rp.is_comm & sends & ~np.isin(ops["kind"], [Kind.drain, Kind.invalidate])
    per_op = np.diff(trace.src_ptr) * np.diff(trace.dst_ptr)
    a2a = ops["kind"] == Kind.all_to_all
    per_op[a2a] = np.diff(trace.src_ptr)[a2a] * (np.diff(trace.src_ptr)[a2a] - 1)
    assert s["deliveries_checked"] == int(per_op[comm].sum())


@pytest.mark.parametrize("loss", [0.0, 0.01])
def test_functional_and_timing_replays_give_identical_timing(traces, loss):
    timing, _ = run(load_trace(str(traces["mars"])), loss=loss)
    functional, _ = run(load_trace(str(traces["mars"])), loss=loss, functional=True)
    assert np.array_equal(timing.end, functional.end) and np.array_equal(timing.start, functional.start)
    a, b = summarize(timing), summarize(functional)
    for k in ("ttft_s", "decode_s", "wire_bytes", "frames", "sim_end_s", "peak_node_kv_bytes", "control_frames",
              "retransmitted_frames", "dropped_frames"):
        assert a[k] == b[k], k
    assert "functional" not in a and b["functional"]["reductions"] > 0
    assert b["functional"]["payload_mismatches"] == 0 and b["functional"]["max_abs_error"] < 1e-5
    assert (a["retransmitted_frames"] > 0) == (loss > 0)


def test_functional_queries_are_the_bytes_that_arrived(traces):
    """A holder's partial state uses the query bytes its NIC delivered: corrupt one query
    delivery and that token-layer's merged attention is wrong (the check is not circular)."""
    trace = load_trace(str(traces["mars"]))
    rp = Replay(trace, Options(functional=True))
    fn = rp.functional
    orig = fn.delivered
    hit = {}

    def tamper(op, src, block, node, data):
        if op in fn.is_query and not hit:
            hit["op"] = op
            data = bytes(len(data))  # zeros: a uniform softmax at that holder
        fn._expect[(op, src, block)] = zlib.crc32(data)  # keep the CRC check quiet
        orig(op, src, block, node, data)

    fn.delivered = tamper
    rp.run()
    assert hit and fn.max_abs > 1e-3 and fn.mismatches == []


def test_cli_functional_reports_errors_and_json(traces, capsys):
    assert main(["replay", str(traces["mars"]), "--no-results", "--functional"]) == 0
    out = capsys.readouterr().out
    assert "functional" in out and "0 mismatched" in out and "vs numpy attention" in out
    assert main(["replay", str(traces["mars"]), "--no-results", "--functional", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["functional"]["max_abs_error"] < 1e-5 and "control_frames_by_op" in s
    assert format_summary(s).count("\n") >= 8


def test_functional_mode_refuses_what_it_cannot_model_in_one_line(traces, tmp_path, capsys, monkeypatch):
    # Decode states as int8: no fp32/fp16 arithmetic to run.
    tr = load_trace(str(traces["mars"]))
    red = int(np.flatnonzero(tr.ops["kind"] == Kind.reduce)[0])
    tr.ops["dtype"][red] = int(Dtype.int8)
    with pytest.raises(ConfigError, match=f"op {red} \\(partial state\\) is int8"):
        Replay(tr, Options(functional=True))
    # Over the memory limit: one line, status 2, nothing written.
    monkeypatch.setattr(F, "LIMIT_BYTES", 1 << 20)
    out = tmp_path / "res"
    assert main(["replay", str(traces["mars"]), "--functional", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "functional-mode limit" in err and not out.exists()


@pytest.mark.parametrize("scheme,nodes,loss", [("mars", 4, 0.0), ("mars", 4, 0.02), ("ring", 4, 0.0),
                                               ("zigzag", 4, 0.0), ("pd", 8, 0.0), ("full", 4, 0.02)])
def test_compiled_functional_equals_the_python_path_merge_for_merge(scheme, nodes, loss):
    """The compiled loop's functional replay gives the Python path's summary and every
    reduction's merged bytes: the same payloads delivered, the same layout at decode's start,
    and the boards' merges in the same order (a merge in another order gives other bytes)."""
    import emu

    trace = emu.trace(scheme, seq=1024, nodes=nodes, chunk=256, decode_tokens=2)
    got = {}
    for engine in ("python", "compiled"):
        rp, merged = run(trace, functional=True, engine=engine, loss=loss, seed=3)
        assert rp.engine == engine and rp.incomplete() == []
        got[engine] = (rp.functional.summary(), dict(merged))
    (s_py, m_py), (s_c, m_c) = got["python"], got["compiled"]
    assert s_c == s_py and s_py["reductions"] == len(m_py) > 0 and s_py["deliveries_checked"] > 0
    assert m_c == m_py


def test_compiled_functional_merges_in_the_boards_fold_order(monkeypatch):
    """Each board folds contributions in the order they reached it; merging the root's in
    another order changes the bytes (fp32 arithmetic is not associative), so the order the
    loop records is the one that decides the result."""
    import emu
    from emu.replay import functional_feed as FF

    trace = emu.trace("mars", seq=1024, nodes=4, chunk=256, decode_tokens=2)
    _, right = run(trace, functional=True)
    real = FF._merge

    def own_last(fn, op, group, ops):
        g = group.copy()
        g[g[:, FF.L.GP_PARENT] < 0, FF.L.GP_FOLD_OWN] += 10**9  # the root's own state after its children's
        real(fn, op, g, ops)

    monkeypatch.setattr(FF, "_merge", own_last)
    _, wrong = run(trace, functional=True)
    right, wrong = dict(right), dict(wrong)
    assert right.keys() == wrong.keys() and all(right[op] != wrong[op] for op in right)


@pytest.mark.parametrize("scheme,extra", [("usp", []), ("ulysses", ["--uneven-heads"])])
def test_a_head_sharded_decode_is_refused_in_one_line_before_the_replay(tmp_path, capsys, scheme, extra):
    path = tmp_path / f"{scheme}.json"
    assert main(["trace", scheme, "--seq", "2048", "--nodes", "16", "--decode-tokens", "2", *extra, "-o", str(path)]) == 0
    capsys.readouterr()
    out = tmp_path / "run"
    assert main(["replay", str(path), "--functional", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"emu replay: error: --functional: {scheme}'s decode layout is head-sharded; functional mode "
                   "checks sequence-sharded decode (mars, ring, zigzag, pd, full)"]
    assert not out.exists()
