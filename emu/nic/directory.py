"""The replica directory: per node and KV block, its state and bytes; per node, KV memory over time.

Owner copies are permanent (the paper's 3.1). Replicas go VALID -> DRAINING ->
INVALID as drain and invalidate control frames arrive: a DRAINING replica is
still readable by attention already in flight but is never chosen for a new
read; an INVALID one has freed its memory. Transient copies (prefetched blocks,
ring passes) live until their last reader finishes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from .. import compiled_cache  # noqa: F401  (before any cached function: their cache stamp)
from ..codec import Op

if TYPE_CHECKING:
    import pandas as pd


class State(enum.IntEnum):
    INVALID = 0
    VALID = 1
    DRAINING = 2


# The ops a replica moves on (emu.codec.Op values, as frames and traces carry them).
OP_KV_REPLICA = int(Op.kv_replica)
OP_DRAIN = int(Op.drain)
OP_INVALIDATE = int(Op.invalidate)
_INVALID, _VALID, _DRAINING = int(State.INVALID), int(State.VALID), int(State.DRAINING)  # as numba constants


@njit(cache=True)
def replica_transition(state, op):
    """The state (a ``State`` value; INVALID also for a block the node never held) a replica
    moves to when a message with ``op`` (OP_KV_REPLICA, OP_DRAIN, OP_INVALIDATE) arrives,
    and whether that is legal. A second copy of a live replica changes nothing; draining or
    invalidating a block a node does not hold is an error and changes nothing; other ops
    leave the state alone. One compiled function: ``Directory`` (the Python path, ``emu hw
    serve``) and the compiled replay (emu.engine.directory) both call it. (emu.nic.protocol
    re-exports it: it is part of the board's protocol.)"""
    live = state != _INVALID
    if op == OP_KV_REPLICA:
        return (state if live else _VALID), True
    if op == OP_DRAIN:
        return (_DRAINING if live else state), live
    if op == OP_INVALIDATE:
        return (_INVALID if live else state), live
    return state, False


def _transition(state: State | None, op: int) -> tuple[State, bool]:
    new, ok = replica_transition(int(State.INVALID if state is None else state), op)
    return State(new), ok


@dataclass
class NodeMemory:
    owner: int = 0
    replica: int = 0
    transient: int = 0

    @property
    def total(self) -> int:
        return self.owner + self.replica + self.transient


@dataclass
class Directory:
    nodes: int
    memory: list[NodeMemory] = field(default_factory=list)
    # (node, kv_id) -> [state, bytes]
    replicas: dict[tuple[int, int], list] = field(default_factory=dict)
    owners: dict[int, tuple[int, int]] = field(default_factory=dict)  # kv_id -> (node, bytes)
    transients: dict[tuple[int, object], int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _history: list[tuple] = field(default_factory=list)
    _live_replicas: int = 0

    def __post_init__(self):
        self.memory = [NodeMemory() for _ in range(self.nodes)]

    def _record(self, t: int, node: int) -> None:
        m = self.memory[node]
        self._history.append((t, node, m.owner, m.replica, m.transient, len(self.owners), self._live_replicas))

    # ---- owners ----------------------------------------------------------------------

    def add_owner(self, node: int, kv_id: int, nbytes: int, t: int) -> None:
        """``node`` owns the block from now on; a previous owner (a PD handoff) frees its copy."""
        prev = self.owners.get(kv_id)
        if prev is not None:
            if prev[0] == node:
                return
            self.memory[prev[0]].owner -= prev[1]
            self._record(t, prev[0])
        self.owners[kv_id] = (node, nbytes)
        self.memory[node].owner += nbytes
        self._record(t, node)

    # ---- replicas ----------------------------------------------------------------------

    def state(self, node: int, kv_id: int) -> State:
        entry = self.replicas.get((node, kv_id))
        return State(entry[0]) if entry else State.INVALID

    def _state_of(self, node: int, kv_id: int):
        entry = self.replicas.get((node, kv_id))
        return (State(entry[0]) if entry else None), entry

    def add_replica(self, node: int, kv_id: int, nbytes: int, t: int) -> None:
        state, _ = self._state_of(node, kv_id)
        new, _ = _transition(state, OP_KV_REPLICA)
        if new == (State.INVALID if state is None else state):
            return  # a duplicate copy changes nothing
        self.replicas[(node, kv_id)] = [new, nbytes]
        self.memory[node].replica += nbytes
        self._live_replicas += 1
        self._record(t, node)

    def drain(self, node: int, kv_id: int, t: int) -> None:
        state, entry = self._state_of(node, kv_id)
        new, ok = _transition(state, OP_DRAIN)
        if not ok:
            self.errors.append(f"t={t}ps: drain of block {kv_id} at node {node}, which holds no valid replica")
            return
        entry[0] = new

    def invalidate(self, node: int, kv_id: int, t: int) -> None:
        state, entry = self._state_of(node, kv_id)
        new, ok = _transition(state, OP_INVALIDATE)
        if not ok:
            self.errors.append(f"t={t}ps: invalidate of block {kv_id} at node {node}, which holds no replica")
            return
        entry[0] = new
        self.memory[node].replica -= entry[1]
        self._live_replicas -= 1
        self._record(t, node)

    def readable(self, node: int, kv_id: int, *, new_read: bool = True) -> bool:
        """An owner copy, a VALID replica, or (for reads already in flight) a DRAINING one."""
        owner = self.owners.get(kv_id)
        if owner is not None and owner[0] == node:
            return True
        s = self.state(node, kv_id)
        return s == State.VALID or (s == State.DRAINING and not new_read)

    def read(self, node: int, kv_id: int, t: int, *, new_read: bool = True) -> bool:
        """A read by attention; reading a block the node cannot read is an error the run reports."""
        if self.readable(node, kv_id, new_read=new_read):
            return True
        self.errors.append(f"t={t}ps: node {node} read block {kv_id} in state {self.state(node, kv_id).name}")
        return False

    # ---- transient copies ---------------------------------------------------------------

    def add_transient(self, node: int, key, nbytes: int, t: int) -> None:
        self.transients[(node, key)] = self.transients.get((node, key), 0) + nbytes
        self.memory[node].transient += nbytes
        self._record(t, node)

    def free_transient(self, node: int, key, t: int) -> None:
        nbytes = self.transients.pop((node, key), 0)
        self.memory[node].transient -= nbytes
        self._record(t, node)

    # ---- summaries ------------------------------------------------------------------------

    def owner_only(self) -> bool:
        return all(m.replica == 0 and m.transient == 0 for m in self.memory)

    def replica_factor(self) -> float:
        """Copies per owned block right now (1.0 is owner-only)."""
        return (len(self.owners) + self._live_replicas) / len(self.owners) if self.owners else 1.0

    def history(self) -> pd.DataFrame:
        """Per node, each change: owner, replica and transient bytes; and the replica factor then."""
        return history_frame(self.history_columns())

    def history_peaks(self) -> tuple[int, int, int]:
        """``history_peaks`` of this directory's history."""
        return history_peaks(self.history_columns())

    def history_columns(self) -> dict[str, np.ndarray]:
        """The history by column (emu.engine.layout.HISTORY_COLUMNS, in that order), one entry
        per change at a node."""
        from ..engine.layout import HISTORY_COLUMNS

        rows = np.asarray(self._history, np.int64).reshape(-1, len(HISTORY_COLUMNS))
        return {name: rows[:, i] for i, name in enumerate(HISTORY_COLUMNS)}


def history_peaks(h: dict) -> tuple[int, int, int]:
    """The most KV bytes one node held at once in history ``h`` (a directory's
    ``history_columns()``): all of them (owner, replica and transient), owner and replica, and
    transient (0s: no change). The summary's figures, read from the columns without a table of
    them: at 128 boards the history has 13M rows, and a DataFrame of it was the replay's peak
    memory."""
    owner, replica, trans = h["owner_bytes"], h["replica_bytes"], h["transient_bytes"]
    if not len(owner):
        return 0, 0, 0
    peaks = np.zeros(3, np.int64)
    for r0 in range(0, len(owner), _PEAK_ROWS):  # a block at a time: no column of all 13M rows
        r1 = r0 + _PEAK_ROWS
        kept = owner[r0:r1] + replica[r0:r1]
        transient = trans[r0:r1]
        peaks = np.maximum(peaks, ((kept + transient).max(), kept.max(), transient.max()))
    return int(peaks[0]), int(peaks[1]), int(peaks[2])


_PEAK_ROWS = 1 << 20  # history rows per block of history_peaks


def history_frame(h: dict) -> pd.DataFrame:
    """A directory's history columns (``history_columns()``: one entry per change at a node) as
    a table of int64 columns, with the replica factor then: copies per owned block, 1.0
    owner-only (or no block yet)."""
    import pandas as pd  # only results read it: a replay's import need not load pandas

    from ..engine.layout import HISTORY_COLUMNS  # the one declaration of the history's columns

    df = pd.DataFrame({name: np.asarray(h[name], np.int64) for name in HISTORY_COLUMNS})
    df["replica_factor"] = replica_factor(df.blocks.to_numpy(), df.replicas.to_numpy())
    return df


def replica_factor(blocks: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    """Copies per owned block, from the history's block and live replica counts: 1.0 where
    the layout is owner-only or no block has an owner yet."""
    return np.where(blocks > 0, (blocks + replicas) / np.maximum(blocks, 1), 1.0)
