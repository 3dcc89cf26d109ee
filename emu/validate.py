"""Checks of option values, shared by the command line and the Python API.

The CLI reads text (``--seed 7``), the API takes Python values (``seed=7``); both end in
these checks, so a value is refused with the same one-line ConfigError, naming the option
as the caller spells it (``--seed`` or ``seed``). The API takes the documented types
(docs/api.md): a count or a seed is an int, a probability an int or float, a switch a
bool; text is for quantities with a unit ("100us", "16MiB"), names and paths. The CLI
turns its text into those types first (``integer_text``, ``number_text``), with the same
messages for the same mistakes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from .errors import ConfigError

SNAPLEN_MIN = 62     # a capture keeps at least the Ethernet and MCF headers (FRAME_HEADER_LEN)
SNAPLEN_MAX = 65535  # a record at most this long: the largest frame the wire format allows fits
INT64_MAX = 2**63 - 1


def show(value) -> str:
    """A value as an error message quotes it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value) -> str:
    return type(value).__name__


def _range(n, what: str, lo, hi, expect: str | None):
    low, high = lo is not None and n < lo, hi is not None and n > hi
    if (low or high) and expect:
        raise ConfigError(f"{what} {n}: must be {expect}")
    if low:
        raise ConfigError(f"{what} {n}: must be at least {lo}")
    if high:
        raise ConfigError(f"{what} {n}: must be at most {hi}")
    return n


def integer(value, what: str, lo: int | None = None, hi: int | None = INT64_MAX, expect: str | None = None) -> int:
    """An int (not a bool, not text, not a float), in lo..hi."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{what} {show(value)}: expected an integer, got {_kind(value)}")
    return _range(int(value), what, lo, hi, expect)


def number(value, what: str, lo: float | None = None, hi: float | None = None, expect: str | None = None) -> float:
    """An int or float (not a bool, not text), finite, in lo..hi."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{what} {show(value)}: expected a number, got {_kind(value)}")
    x = float(value)
    if not math.isfinite(x):
        raise ConfigError(f"{what} {x}: must be a finite number")
    return _range(x, what, lo, hi, expect)


def boolean(value, what: str) -> bool:
    """True or False (numpy's too); 0, 1 and "true" are refused: a switch is a bool."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ConfigError(f"{what} {show(value)}: expected True or False, got {_kind(value)}")


def choice(value, what: str, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{what} {show(value)}: one of {', '.join(choices)}")
    return value


def printable(value: str, what: str) -> str:
    """Text that messages quote as it is must not break their one line (a newline, a CR)."""
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value):
        raise ConfigError(f"{what} {show(value)}: holds a control character")
    return value


def text(value, what: str) -> str:
    """A non-empty str (a name or a spec)."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} {show(value)}: expected text, got {_kind(value)}")
    if not value.strip():
        raise ConfigError(f"{what} {show(value)}: empty")
    return printable(value, what)


def path(value, what: str) -> Path:
    """A file system path: a non-empty str or os.PathLike (bytes are refused: names are text)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ConfigError(f"{what} {show(value)}: expected a path (str or os.PathLike), got {_kind(value)}")
    if not value.strip():
        raise ConfigError(f"{what} {show(value)}: an empty path")
    return Path(printable(value, what))


def spec_or_path(value, what: str) -> str:
    """A spec such as "torus:4x4", or a file (str or os.PathLike), as text."""
    return str(path(value, what)) if isinstance(value, os.PathLike) else text(value, what)


def texts(value, what: str, item: str = "text") -> list[str]:
    """None (none), one str, or a list or tuple of str -> [str, ...]."""
    if value is None:
        return []
    if isinstance(value, str):
        return [printable(value, what)]
    if isinstance(value, (list, tuple)):
        for v in value:
            if not isinstance(v, str):
                raise ConfigError(f"{what} {show(v)}: expected text in the list, got {_kind(v)}")
            printable(v, what)
        return list(value)
    raise ConfigError(f"{what} {show(value)}: expected {item} or a list of them, got {_kind(value)}")


def time_ps(value, what: str) -> int:
    """A duration: picoseconds as an int, or text with a unit ("100us", "0.5s")."""
    import numbers

    from .units import parse_time

    if isinstance(value, str):
        return parse_time(value, what)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{what} {show(value)}: expected picoseconds (an int) or a time such as '100us', "
                          f"got {_kind(value)}")
    return integer(value, what, lo=0)


def snaplen(value, what: str) -> int:
    """Bytes kept per captured frame: one bound for every capture the project writes."""
    return integer(value, what, SNAPLEN_MIN, SNAPLEN_MAX,
                   expect=f"in {SNAPLEN_MIN}..{SNAPLEN_MAX} ({SNAPLEN_MIN}: the headers only)")


# ---- the command line's text, read into the types above
def integer_text(value: str, what: str, lo: int | None = None, hi: int | None = INT64_MAX,
                 expect: str | None = None) -> int:
    """``--seed 7``: a whole number written as text ("7", "1e3"), then ``integer``'s checks."""
    from .units import parse_int

    return integer(parse_int(value, what), what, lo, hi, expect)


def number_text(value: str, what: str, lo: float | None = None, hi: float | None = None,
                expect: str | None = None) -> float:
    """``--loss 0.01``: a number written as text, then ``number``'s checks."""
    from .units import parse_float

    return number(parse_float(value, what), what, lo, hi, expect)
