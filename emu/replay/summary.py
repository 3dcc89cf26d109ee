"""What a finished replay measured: its summary, its tables, and the results folder they are
written to (the dashboard, ``emu compare`` and ``emu.load`` read it). The object the API hands
back over these is ``emu.replay.result.Result``.

Folder layout (docs/results.md):
  summary.json    the summary (the same object ``emu replay --json`` prints)
  ops.parquet     one row per op: op, kind, stage, node, chunk, layer, bytes, start_s, end_s, deps
  links.parquet   per link direction and time bin: frames, wire bytes, utilization, peak queue
  nodes.parquet   per node, at each change: owner, replica and transient KV bytes; replica factor
  deliveries.parquet  per communication op and destination: when it was delivered there
  topology.json   the topology the run used
  schedule.json   the scheduler's decisions recorded in the trace (r per chunk, drains, ...)
  capture.pcap    the frames, when a capture was asked for
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .. import __version__
from ..outputs import OutputFolder
from ..net.kernel import LINKS
from ..nic.directory import replica_factor
from ..net.deadlock import describe
from ..topology import dependencies, multicast_tree, to_json
from ..workload.enums import Kind
from ..workload.enums import Stage as TStage
from ..workload.options import scheme_options

SUMMARY_KEYS = ("ttft_s", "prefill_s", "decode_tokens_per_s", "wire_bytes", "kv_bytes", "frames",
                "dropped_frames", "retransmitted_frames", "final_layout_owner_only", "peak_node_kv_bytes", "wall_s")


def summarize(rp) -> dict:
    tr, ops = rp.trace, rp.trace.ops
    end = rp.end
    stage, kind = ops["stage"], ops["kind"]
    pre = (stage == TStage.prefill) & (end >= 0)
    ttft = int(end[pre].max()) if pre.any() else 0
    body = pre & (kind != Kind.lm_head)
    prefill = int(end[body].max()) if body.any() else ttft
    dec = (stage == TStage.decode) & (end >= 0)
    tokens = int(tr.meta.get("decode_tokens", 0))
    decode_end = int(end[dec].max()) if dec.any() else ttft
    decode_s = (decode_end - ttft) / 1e12
    c = rp.net.counters()
    d = rp.cluster.directory
    peak, peak_kept, peak_transient = d.history_peaks()
    final_owner = [m.owner for m in d.memory]
    run_end = max(int(rp.sim.now), 1)
    util = c.busy_ps / run_end
    busiest = int(util.idxmax()) if len(c) else 0
    incomplete = rp.incomplete()
    # Every drop, on links and datapaths and at nodes (no route, duplicates, at the source).
    drops = rp.net.drops_by_cause()
    return {
        "version": __version__,
        "trace": os.path.basename(tr.path) if tr.path else None,
        "scheme": tr.meta.get("scheme", {}).get("name") if isinstance(tr.meta.get("scheme"), dict) else tr.meta.get("scheme"),
        "nodes": rp.nodes,
        "seq": tr.meta.get("seq"),
        "chunk": tr.meta.get("chunk"),
        "model": rp.model.get("name"),
        "hw": rp.hw.get("name"),
        "topology": rp.G.graph.get("name"),
        "seed": rp.opt.seed,
        # What the run was told besides the trace, so runs can be compared on it.
        "loss": rp.opt.loss,
        "scenario": list(rp.opt.scenario),
        # The scheme's generation options (chunk mode, baseline options), from the trace's meta.
        "options": dict(tr.meta["scheme"]) if isinstance(tr.meta.get("scheme"), dict) else {},
        "overrides": list(rp.opt.overrides),
        "ttft_s": ttft / 1e12,
        "prefill_s": prefill / 1e12,
        "decode_tokens": tokens,
        "decode_s": decode_s,
        "decode_tokens_per_s": tokens / decode_s if tokens and decode_s > 0 else None,
        "wire_bytes": int(c.wire_bytes.sum()),
        "kv_bytes": int(rp.kv_bytes),
        "frames": int(c.sent_frames.sum()),
        "dropped_frames": sum(drops.values()),
        "dropped_by_cause": drops,
        "retransmitted_frames": int(rp.cluster.retransmitted_frames),
        "control_frames": int(rp.cluster.control_frames),
        "control_frames_by_op": dict(rp.cluster.control_frames_by_op),
        "final_layout_owner_only": bool(d.owner_only()) and not incomplete,
        "peak_node_kv_bytes": peak,
        # Per node: owner + replica KV (what S_node bounds) and transient copies, at their peaks.
        "peak_node_owner_replica_bytes": peak_kept,
        "peak_node_transient_bytes": peak_transient,
        "final_node_kv_bytes": [m.total for m in d.memory],
        "owner_only_node_kv_bytes": final_owner,
        "busiest_link": {"src": int(c.src[busiest]), "dst": int(c.dst[busiest]), "utilization": float(util[busiest])},
        **port_buffers(rp.hw, c),
        **routing(rp),
        # the transport the run had: acks and retransmission, and its timer's floor (by flow
        # control unless --set hw.rto_min_ps: docs/nic.md, Adaptive timeout)
        "reliable": bool(rp.cluster.config.reliable),
        "rto_min_s": int(rp.cluster.config.rto_min_ps) / 1e12,
        "directory_errors": d.errors[:20],
        "incomplete_ops": len(incomplete),
        "incomplete": rp.cluster.incomplete()[:20],
        # sends reliable delivery gave up on (or had no route for) that never arrived whole
        "failed_sends": rp.cluster.incomplete(failed=True)[:20],
        "sim_end_s": rp.sim.now / 1e12,
        "engine": rp.engine,  # which loop ran it (emu.engine.loop: compiled; run.Replay: python)
        "wall_s": rp.wall_s,
        **({"functional": rp.functional.summary()} if rp.functional else {}),
    }


def routing(rp) -> dict:
    """The routing discipline and a cycle of its buffer dependencies (emu.topology.dependencies:
    the unicast routes and the multicast trees the run built), "" when there is none: with
    pause a cycle is what can deadlock, whether this run did or not."""
    trees = [multicast_tree(rp.G, rp.routes, s, list(d)) for s, d in rp.cluster.multicasts]
    found = dependencies.cycle(rp.routes, trees)
    return {"routing": rp.routes.routing, "dependency_cycle": describe(found) if found else ""}


def port_buffers(hw: dict, c: pd.DataFrame) -> dict:
    """The summary's port-buffer figures from the link counters ``c``: the flow control and buffer
    the run assumed, the deepest transit backlog of any link direction and how many went past
    the buffer (a drop-tail port of that size would have dropped there), and under pause the
    most a node held for one link, the time ports were paused and how many were (under credit:
    the time ports waited for credit, and how many did)."""
    buf, peaks = int(hw["port_buffer"]), c.peak_queue_bytes.to_numpy()
    return {"flow_control": hw["flow_control"], "signals": hw["signals"], "port_buffer_bytes": buf,
            "peak_transit_backlog_bytes": int(peaks.max()) if len(peaks) else 0,
            "ports_over_buffer": int((peaks > buf).sum()), "ports": len(peaks),
            "peak_held_bytes": int(c.peak_held_bytes.max()) if len(c) else 0,
            "paused_s": int(c.paused_ps.sum()) / 1e12, "ports_paused": int((c.paused_ps > 0).sum())}


def buffer_warning(s: dict) -> str | None:
    """One line when an ``ideal`` run held more transit bytes at a port than the profile's buffer
    has (what a real port would have dropped or paused for), else None."""
    if s.get("flow_control") != "ideal" or not s.get("ports_over_buffer"):
        return None
    return (f"warning: flow_control=ideal held up to {s['peak_transit_backlog_bytes'] / 1024:,.1f} KiB of transit "
            f"frames at a port; {s['ports_over_buffer']} of {s['ports']} link directions exceeded hw.port_buffer "
            f"({s['port_buffer_bytes'] / 1024:,.0f} KiB): a real port drops or pauses there "
            f"(--set hw.flow_control=drop)")


def ops_table(rp):
    """ops.parquet's table (pyarrow): ``ops_frame``'s columns and each op's dependency list.
    The list column is made from the trace's CSR (offsets and values), not from an array
    object per op (2M at 64 boards, 7M at 128: 0.3 GB and more); the file is the one pandas
    writes for a column of such arrays, its pandas metadata included, so readers get the
    same frame."""
    import pyarrow as pa

    tr = rp.trace
    table = pa.Table.from_pandas(_op_columns(rp), preserve_index=False)
    deps = pa.ListArray.from_arrays(pa.array(tr.dep_ptr.astype(np.int32)), pa.array(tr.dep_idx.astype(np.int64)))
    table = table.append_column("deps", deps)
    # the column's entry in the pandas metadata, as pandas makes it for arrays of int64
    like = pa.Table.from_pandas(pd.DataFrame({"deps": [np.zeros(0, np.int64)]}), preserve_index=False)
    meta = json.loads(table.schema.metadata[b"pandas"])
    meta["columns"].append(json.loads(like.schema.metadata[b"pandas"])["columns"][0])
    return table.replace_schema_metadata({**table.schema.metadata, b"pandas": json.dumps(meta).encode()})


def ops_frame(rp) -> pd.DataFrame:
    """ops.parquet as a DataFrame (Result.ops of a replay kept in memory): the file's own table."""
    return ops_table(rp).to_pandas()


def _op_columns(rp) -> pd.DataFrame:
    """One row per op: what it is, where, and when it ran (``ops_table`` adds its dependencies)."""
    ops, tr = rp.trace.ops, rp.trace
    has_src = np.diff(tr.src_ptr) > 0
    first_src = np.full(tr.n_ops, -1, np.int64)
    first_src[has_src] = tr.src_idx[tr.src_ptr[:-1][has_src]]
    return pd.DataFrame({
        "op": np.arange(rp.trace.n_ops),
        "kind": pd.Categorical.from_codes(ops["kind"], [k.name for k in Kind]),
        "stage": np.where(ops["stage"] == TStage.decode, "decode", "prefill"),
        "node": ops["node"],
        "src": first_src,
        "dsts": np.diff(tr.dst_ptr).astype(np.int64),  # the file keeps int64 whatever width the trace holds
        "chunk": ops["chunk"],
        "layer": ops["layer"],
        "bytes": ops["bytes"],
        "start_s": np.where(rp.start >= 0, rp.start / 1e12, np.nan),
        "end_s": np.where(rp.end >= 0, rp.end / 1e12, np.nan),
    })


def nodes_frame(rp) -> pd.DataFrame:
    """nodes.parquet: one row per change of a node's KV memory, made from the history's rows
    (a DataFrame of the whole history first was a second copy: 0.7 GB at 128 boards)."""
    h = rp.cluster.directory.history_columns()
    # int64 columns whatever width the history holds them at (the node and counts: int32)
    return pd.DataFrame({
        "t_s": h["t_ps"] / 1e12, "node": h["node"].astype(np.int64), "owner_bytes": h["owner_bytes"],
        "replica_bytes": h["replica_bytes"], "transient_bytes": h["transient_bytes"],
        "replica_factor": replica_factor(h["blocks"].astype(np.int64), h["replicas"].astype(np.int64)),
    })


# Per link direction over the whole run, beside each of its bins in links.parquet: the port's
# time paused, the most its far node held for it (pause), and its drops by cause.
RUN_COLUMNS = {"run_paused_s": "paused_ps", "run_peak_held_bytes": "peak_held_bytes",
               **{f"run_dropped_{c}": f"dropped_{c}" for c in ("queue_full", "loss", "corrupt", "link_down", "mtu")}}


def links_frame(rp) -> pd.DataFrame:
    bins = rp.linkstats.frame(rp.net.links, rp.net.LK[:, LINKS.col("rate")], max(rp.sim.now, 1))
    c = rp.net.counters()
    for name, col in RUN_COLUMNS.items():
        per_link = c[col].to_numpy()
        bins[name] = per_link[bins["link"].to_numpy()] / (1e12 if name == "run_paused_s" else 1)
    return bins


def deliveries_frame(rp) -> pd.DataFrame:
    """One row per communication op and destination board: the time its payload was whole there."""
    a = rp.deliveries()
    return pd.DataFrame({"op": a[:, 0], "node": a[:, 1], "t_s": a[:, 2] / 1e12})


def replicas_frame(nodes: pd.DataFrame) -> pd.DataFrame:
    """The cluster's replica factor over time (from nodes.parquet): one row per moment it was recorded,
    the value after every change at that moment; it holds until the next row."""
    last = nodes.drop_duplicates("t_s", keep="last")
    return pd.DataFrame({"t_s": last["t_s"].to_numpy(), "replica_factor": last["replica_factor"].to_numpy()})


def write_files(rp, summary: dict, folder: str | os.PathLike) -> Path:
    """Write the results files into ``folder`` (a staging folder: see ``emu.outputs``)."""
    tmp = Path(folder)
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    import pyarrow.parquet as pq

    pq.write_table(ops_table(rp), tmp / "ops.parquet", compression="snappy")  # as DataFrame.to_parquet
    links_frame(rp).to_parquet(tmp / "links.parquet", index=False)
    nodes_frame(rp).to_parquet(tmp / "nodes.parquet", index=False)
    deliveries_frame(rp).to_parquet(tmp / "deliveries.parquet", index=False)
    (tmp / "topology.json").write_text(json.dumps(to_json(rp.G), indent=1) + "\n")
    (tmp / "schedule.json").write_text(json.dumps(rp.trace.schedule, indent=1, default=int) + "\n")
    return tmp


def write(rp, summary: dict, out: str | os.PathLike, capture_from: str | None = None) -> Path:
    """Write the results folder ``out`` (which must not exist): it appears complete or not at all."""
    with OutputFolder(out) as folder:
        write_files(rp, summary, folder.staging)
        if capture_from:
            os.replace(capture_from, folder.staging / os.path.basename(capture_from))
    return folder.path


def format_summary(s: dict) -> str:
    gib = 2**30
    lines = [
        f"trace     {s['trace']}  ({s['scheme']}, {s['nodes']} nodes, seq {s['seq']}, {s['model']} on {s['hw']}, topology {s['topology']})",
        *([f"options   {scheme_options(s['options'])}"] if s.get("options") else []),
        f"TTFT      {s['ttft_s']:.4f} s   (prefill {s['prefill_s']:.4f} s)",
        "decode    " + (f"{s['decode_tokens_per_s']:.2f} tokens/s over {s['decode_tokens']} tokens" if s["decode_tokens_per_s"] else "no decode tokens"),
        f"wire      {s['wire_bytes'] / gib:.3f} GiB in {s['frames']:,} frame-hops; KV payload {s['kv_bytes'] / gib:.3f} GiB",
        f"drops     {s['dropped_frames']:,} frames" + "".join(f", {k} {v:,}" for k, v in s["dropped_by_cause"].items() if v)
        + f"; retransmitted {s['retransmitted_frames']:,}",
        f"control   {s['control_frames']:,} frames"
        + "".join(f", {k} {v:,}" for k, v in s.get("control_frames_by_op", {}).items() if v)
        + ("; signals free (hw.signals=free, an idealisation: dependencies across boards released with no frame)"
           if s.get("signals") == "free" else ""),
        f"KV memory peak {s['peak_node_kv_bytes'] / 2**20:.1f} MiB per node; final "
        f"{max(s['final_node_kv_bytes']) / 2**20:.1f} MiB max vs owner-only {max(s['owner_only_node_kv_bytes']) / 2**20:.1f} MiB; "
        f"owner-only at the end: {'yes' if s['final_layout_owner_only'] else 'NO'}",
        f"busiest   link {s['busiest_link']['src']}->{s['busiest_link']['dst']} at {s['busiest_link']['utilization']:.1%}",
        *([f"buffers   {s['flow_control']}, {s['port_buffer_bytes'] / 1024:,.0f} KiB per port; peak transit backlog "
           f"{s['peak_transit_backlog_bytes'] / 1024:,.1f} KiB, {s['ports_over_buffer']} of {s['ports']} ports over"
           + (f"; {'paused' if s['flow_control'] == 'pause' else 'waited for credit'} {s['paused_s']:.4f} s over "
              f"{s['ports_paused']} ports, most held for a link {s['peak_held_bytes'] / 1024:,.1f} KiB"
              if s["flow_control"] in ("pause", "credit") else "")]
          if "flow_control" in s else []),
        *([f"transport reliable (acks, nacks on gaps, resends); timer floor {s['rto_min_s'] * 1e3:g} ms"]
          if s.get("reliable") else []),
        *([f"routing   {s['routing']}; buffer dependencies: "
           + (f"a cycle, {s['dependency_cycle']}: back-pressure can deadlock here" if s["dependency_cycle"]
              else "no cycle, back-pressure cannot deadlock")] if "routing" in s else []),
        f"wall      {s['wall_s']:.2f} s" + (f" ({s['engine']} engine)" if s.get("engine") else ""),
    ]
    f = s.get("functional")
    if f:
        lines.append(f"functional {f['deliveries_checked']:,} payloads ({f['bytes_checked'] / gib:.3f} GiB) checked, "
                     f"{f['payload_mismatches']} mismatched"
                     + (f", {f['layout_mismatches']} holders' KV not where schedule.decode says"
                        if f.get("layout_mismatches") else "")
                     + f"; {f['reductions']} reductions "
                     f"({'/'.join(f['state_dtypes']) or 'none'}): max abs error {f['max_abs_error']:.3g}, "
                     f"max rel error {f['max_rel_error']:.3g} vs numpy attention")
    if s["incomplete_ops"]:
        lines.append(f"INCOMPLETE {s['incomplete_ops']} ops never finished; first: " + "; ".join(s["incomplete"][:3]))
    if s.get("failed_sends"):
        lines.append(f"FAILED {len(s['failed_sends'])} sends never delivered; first: " + "; ".join(s["failed_sends"][:3]))
    if s["directory_errors"]:
        lines.append(f"DIRECTORY {len(s['directory_errors'])} errors; first: {s['directory_errors'][0]}")
    return "\n".join(lines)
