"""A tiny discrete-event core: integer time, a heap, deterministic order. Knows nothing of networks.

Time is an integer number of picoseconds. Events at the same time run in the
order they were scheduled, so a run is a pure function of its inputs.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable

PS = 1
NS = 1_000
US = 1_000_000
MS = 1_000_000_000
S = 1_000_000_000_000


class Event:
    """A scheduled call; ``cancel()`` keeps it in the heap but makes it a no-op."""

    __slots__ = ("time", "fn", "args", "cancelled")

    def __init__(self, time: int, fn: Callable[..., Any], args: tuple):
        self.time = time
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Simulator:
    def __init__(self) -> None:
        self.now = 0
        self._heap: list[tuple[int, int, Event]] = []
        self._seq = 0
        self._stopped = False

    def at(self, time: int, fn: Callable[..., Any], *args: Any) -> Event:
        """Run ``fn(*args)`` at absolute ``time`` (not before now)."""
        if time < self.now:
            raise ValueError(f"cannot schedule at {time} ps, before now ({self.now} ps)")
        ev = Event(int(time), fn, args)
        heapq.heappush(self._heap, (ev.time, self._seq, ev))
        self._seq += 1
        return ev

    def after(self, delay: int, fn: Callable[..., Any], *args: Any) -> Event:
        return self.at(self.now + int(delay), fn, *args)

    def peek(self) -> int | None:
        """Time of the next live event, or None when nothing is pending."""
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def stop(self) -> None:
        """Make ``run`` return after the current event."""
        self._stopped = True

    def run(self, until: int | None = None) -> int:
        """Process events in time order until none remain, ``stop()`` or ``until``; return now."""
        heap = self._heap
        self._stopped = False
        while heap and not self._stopped:
            time, _, ev = heap[0]
            if until is not None and time > until:
                self.now = until
                break
            heapq.heappop(heap)
            if ev.cancelled:
                continue
            self.now = time
            ev.fn(*ev.args)
        else:
            if until is not None and not self._stopped and self.now < until:
                self.now = until
        return self.now

    def __len__(self) -> int:
        return sum(1 for _, _, ev in self._heap if not ev.cancelled)
