"""Replay a trace on the emulated cluster: compute engines, NICs, links; measure what it costs.

Compute ops run one at a time per node for max(flops / compute_flops,
mem_bytes / mem_bw) + op_overhead (the hardware profile, after ``--set``
overrides). Communication ops become real messages through the NICs: frames
on links, multicast trees, in-network reductions. The replica directory
changes only as frames arrive, so KV memory and replica counts are measured,
not copied from the trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..net import Loss, Network, deadlock
from ..net.flowcontrol import network_flags
from ..net.linkstats import LinkStats
from ..net.timeline import Timeline, parse as parse_scenario
from ..nic import NicConfig, Nics
from ..sim import MS, US, Simulator
from ..topology import LinkDefaults, Routes, build
from ..workload.enums import COMM_KINDS, CONTROL_KINDS
from ..workload.profiles import apply_overrides, hw_defaults
from .functional import Functional

BUILT_FLOW_CONTROLS = ("ideal", "drop", "pause", "credit")  # hw.flow_control values the engine runs
MAX_BINS = 4096  # link time-series bins at most (then wider bins): memory follows the links, not the run
MAX_OP_PS = 10**18  # one op of at most ~11.6 days: sums of many stay far inside int64 picoseconds


@dataclass
class Options:
    topology: str = "auto"
    overrides: tuple = ()
    scenario: tuple = ()            # timeline clauses (failures, degrades, loss changes)
    loss: float = 0.0               # Bernoulli loss on every link from the start
    seed: int = 0
    reliable: bool | None = None    # None: on when frames can be lost (loss or failures)
    detect_ps: int = 100 * US       # failure detection delay before re-routing
    bin_ps: int | None = None       # link time-series bin; default from the trace's size
    progress: str | None = None     # "bar" or "json" on stderr (emu.progress), None: none
    functional: bool = False        # real payload bytes and reductions (emu.replay.functional)
    engine: str = "auto"            # "auto" or "compiled": the compiled loop; "python": the tests' reference
    trains: bool = True             # a stream's uninterrupted frames on a link as one event (same results)
    routing: str = "shortest"       # emu.topology.ROUTINGS: "dateline" cannot deadlock under back-pressure

ENGINES = ("auto", "compiled", "python")


class Replay:
    """A replay on the compiled loop (emu.engine.runner): the cluster the trace and options
    describe, built before it runs. ``engine="python"`` makes the Python reference path's
    replay instead, when one is registered (``reference``: the test suite's, tests/pyreplay.py)."""

    reference = None  # the Python reference path's class; the product has none
    page_out_trace = False  # True where the replay loaded the trace itself: no caller holds it

    def __new__(cls, trace=None, options: Options = Options()):
        if cls is Replay and options.engine == "python":
            if Replay.reference is None:
                raise ConfigError("engine python: the Python reference path belongs to the test suite "
                                  "(tests/pyreplay.py); the product runs the compiled loop (engine auto or compiled)")
            cls = Replay.reference
        return super().__new__(cls)

    def __init__(self, trace, options: Options = Options()):
        self.trace, self.opt = trace, options
        meta = trace.meta
        prof = apply_overrides({"model": dict(meta["model"]), "hw": dict(meta["hw"])}, options.overrides)
        if options.overrides:  # what `emu trace` refuses, replay refuses too
            from ..workload.profiles import check

            where = f"--set {' '.join(options.overrides)}"
            prof = {sec: check(sec, prof[sec], where) for sec in ("model", "hw")}
        # A trace made before a hardware field existed gets that field's default.
        self.model, self.hw = prof["model"], hw_defaults(prof["hw"])
        hw = self.hw
        self.nodes = int(meta["nodes"])
        if hw["flow_control"] not in BUILT_FLOW_CONTROLS:
            raise ConfigError(f"hw.flow_control={hw['flow_control']}: not built yet; "
                              f"one of {', '.join(BUILT_FLOW_CONTROLS)}")
        # Every port buffers hw.port_buffer bytes of transit frames; "ideal" ignores the bound.
        link = LinkDefaults(rate_bps=int(hw["link_rate"]), latency_ps=int(hw["link_latency_ps"]), mtu=int(hw["mtu"]),
                            queue_bytes=int(hw["port_buffer"]))
        self.G = build(options.topology, self.nodes, link, ports=int(hw["ports"]))
        if self.G.graph["boards"] != self.nodes:
            raise ConfigError(f"topology {options.topology!r} has {self.G.graph['boards']} boards, the trace {self.nodes}")
        self.routes = Routes(self.G, routing=options.routing)
        self.sim = Simulator()
        # Boards forward through the compute-NIC datapath, switches through their own
        # (latency and rate from the hardware profile; docs/engine.md).
        board = [n for n, k in self.G.nodes(data="kind", default="board") if k != "switch"]
        latency = {n: int(hw["switch_latency_ps"]) for n in self.G.nodes}
        rate = {n: int(hw["switch_rate"]) for n in self.G.nodes}
        for n in board:
            latency[n], rate[n] = int(hw["nic_latency_ps"]), int(hw.get("nic_rate", 0))
        self.net = Network(self.sim, self.G, self.routes.next_hop, boards=self.nodes,
                           nic_latency_ps=latency, nic_rate_bps=rate, arbiter=hw["port_arbiter"],
                           seed=options.seed, trains=options.trains, **network_flags(hw["flow_control"]))
        # Reliable delivery is on wherever frames can be lost: loss, failures, drop-tail buffers.
        lossy = bool(options.loss or options.scenario) or hw["flow_control"] == "drop"
        reliable = options.reliable if options.reliable is not None else lossy
        self.cluster = self._nics(NicConfig(mtu=int(hw["mtu"]), reliable=reliable, fifo_bytes=int(hw["comm_buffer"]),
                                            rto_min_ps=int(hw["rto_min_ps"]), rto_initial_ps=int(hw["rto_initial_ps"])))
        if options.loss:
            for l in range(len(self.net.links)):
                self.net.set_loss(l, Loss(p=options.loss))
        self.timeline = None
        if options.scenario:
            self.timeline = Timeline(parse_scenario(list(options.scenario)), detect_ps=options.detect_ps,
                                     base_loss={l: Loss(p=options.loss) for l in range(len(self.net.links))})
            self.timeline.install(self.net, self.routes)
        self.functional = Functional(trace, self.model, options.seed) if options.functional else None
        if self.functional is not None:
            self.functional.progress = self._checking
        self.engine = self._engine(options.engine)
        self.is_comm = np.isin(trace.ops["kind"], [int(k) for k in COMM_KINDS | CONTROL_KINDS])
        self.durations = self._durations()
        est = max(1, int(np.bincount(np.maximum(trace.ops["node"], 0), weights=self.durations,
                                     minlength=self.nodes).max()))
        # About 500 bins over the compute estimate; a run that lasts far longer (loss and
        # back-off, slow links) widens them past MAX_BINS instead of growing the table. A
        # width the user gives is kept whatever the run's length.
        bin_ps = options.bin_ps or max(100 * US, (est // 500) // MS * MS or 100 * US)
        self.linkstats = LinkStats.of(self.net, bin_ps, 0 if options.bin_ps else MAX_BINS)  # binned in the frame loop

    def _engine(self, engine: str) -> str:
        """The engine this replay runs on: the compiled loop, which runs every replay (docs/engine.md)."""
        if engine not in ENGINES:
            raise ConfigError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
        return "compiled"

    def _nics(self, config: NicConfig):
        """The boards' NICs as installed before the run."""
        return Nics(self.net, self.routes, config)

    def _durations(self) -> np.ndarray:
        ops, hw = self.trace.ops, self.hw
        ps = 10**12
        t_flops = ops["flops"].astype(np.float64) * ps / float(hw["compute_flops"])
        t_mem = ops["mem_bytes"].astype(np.float64) * ps / float(hw["mem_bw"])
        worst = float(np.max(np.maximum(t_flops, t_mem), initial=0.0))
        if not worst <= MAX_OP_PS:  # also catches inf/nan; beyond int64 the event clock would wrap
            i = int(np.argmax(np.maximum(t_flops, t_mem)))
            raise ConfigError(f"{self.trace.path or 'trace'}: op {i} would take {worst / 1e12:.3g} s (flops {int(ops['flops'][i])}, mem_bytes "
                              f"{int(ops['mem_bytes'][i])} at hw.compute_flops {hw['compute_flops']}, hw.mem_bw "
                              f"{hw['mem_bw']}); at most {MAX_OP_PS / 1e12:.0f} s")
        dur = np.ceil(np.maximum(t_flops, t_mem)).astype(np.int64) + int(hw["op_overhead_ps"])
        dur[self.is_comm] = 0
        return dur

    # ---- running ---------------------------------------------------------------------

    def run(self) -> "Replay":
        from ..progress import Progress

        self._bar = Progress("replay", self.trace.n_ops, self.opt.progress) if self.opt.progress else None
        try:
            return self._run()
        except BaseException:
            if self._bar is not None:
                self._bar.stop()  # an error message starts on its own line
            raise

    def _run(self) -> "Replay":
        from ..engine import runner

        t0 = time.perf_counter()
        self.done_ops = 0
        runner.run(self)
        self.wall_s = time.perf_counter() - t0
        if (self.net.pause or self.net.credit) and self.incomplete():
            stuck = deadlock.cycle(self.net)
            if stuck:
                mode, state = ("pause", "paused") if self.net.pause else ("credit", "waiting for credit")
                raise ConfigError(f"{mode} deadlock at {self.net.clock_ps / 1e6:,.3f} us: {deadlock.describe(stuck)} are "
                                  f"{state} in a cycle, each holding the frames the next waits for; "
                                  f"--routing dateline (a torus, mesh or ring), hw.flow_control=drop or a larger "
                                  f"hw.port_buffer avoids it")
        return self

    def _progress(self, end: bool = False) -> None:
        """Ops done, simulated and wall time; ``end``: the last report (100 % when every op completed)."""
        if self._bar is not None:
            self._bar.update(self.done_ops, self.sim.now, end=end)

    def _checking(self, done: int, total: int) -> None:
        """The functional checks that follow a compiled loop (every op has finished): their own count."""
        if self._bar is not None:
            self._bar.update(self.done_ops, self.sim.now, phase="functional checks", step=(done, total))

    # ---- outcome ------------------------------------------------------------------------

    def incomplete(self) -> list[int]:
        return np.flatnonzero(self.end < 0).tolist()

    def deliveries(self) -> np.ndarray:
        """(op, node, time) of every delivery of a communication op, sorted."""
        return self._deliveries
