"""Quantities with units: parse what a user or a profile writes, format what we print.

Printed (every command's human output): sizes and memory with binary prefixes (KiB, MiB,
GiB), rates with decimal ones (Gbps, GB/s, GOPS), as network and memory datasheets do.

Canonical units (what every parser returns, always an int except plain floats):
sizes in bytes, link rates in bits/s, memory bandwidth in bytes/s, compute in ops/s,
times in picoseconds. Arithmetic is done in Decimal so "19.2GB/s" is exactly
19_200_000_000 and never 19_199_999_999.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, ROUND_HALF_EVEN

from .errors import ConfigError

_SI = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_PREFIX = {**_SI, **_BIN}
_TIME = {"ps": 1, "ns": 10**3, "us": 10**6, "µs": 10**6, "ms": 10**9, "s": 10**12}

_NUM = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_RE_SIZE = re.compile(_NUM + r"\s*(?P<prefix>Ki|Mi|Gi|Ti|Pi|[kKMGTP])?(?P<unit>B|bytes?)?$")
# A rate's prefix and its "ps" or "/s" are read in any case ("10gbps", "10GBIT/S"); only the
# unit letter keeps its case, b for bits and B for bytes ("10Gb/s" is 10^10 bits/s, "10GB/s"
# 8x that). "BPS" in capitals is refused: "10GBPS" is as often meant for bits as for bytes.
# The words bit(s) and byte(s) say which in any case.
_RE_RATE = re.compile(
    _NUM + r"\s*(?P<prefix>[kKmMgGtTpP](?:[iI](?![tT]))?)?"
    r"(?:(?P<unit>b|(?i:bits?)|B|(?i:bytes?))(?P<per>(?i:ps|/s))|(?P<bare>bps|Bps))?$"
)
_RE_OPS = re.compile(_NUM + r"\s*(?P<prefix>[kKMGTP])?(?P<unit>(?:FL)?OPS|(?:fl)?ops(?:/s)?)?$")
_RE_TIME = re.compile(_NUM + r"\s*(?P<unit>ps|ns|us|µs|ms|s)?$")
_RE_MULT = re.compile(_NUM + r"\s*[xX]$")


def _fail(value, what: str, expect: str) -> ConfigError:
    return ConfigError(f"{what}: cannot read {value!r} as {expect}")


def _decimal(num: str) -> Decimal:
    try:
        return Decimal(num)
    except InvalidOperation:  # pragma: no cover - the regex admits only valid numbers
        raise ValueError(num)


# Beyond this many digits a value is refused before it is scaled or turned into an int:
# "1e999999999" is a short string but a billion-digit integer (minutes of CPU), and scaling
# it overflows Decimal. Canonical values live in int64, 19 digits.
_MAX_EXP = 40


def _bounded(d: Decimal, value, what: str) -> Decimal:
    if d.is_finite() and d and d.adjusted() > _MAX_EXP:
        raise ConfigError(f"{what}: {value!r} is too large")
    if d.is_finite() and d and d.adjusted() < -_MAX_EXP:
        return Decimal(0)  # far below any unit's resolution: zero
    return d


def _as_int(d: Decimal, value, what: str, exact: bool) -> int:
    d = _bounded(d, value, what)
    if exact and d != d.to_integral_value():
        raise ConfigError(f"{what}: {value!r} is not a whole number")
    n = int(d.to_integral_value(rounding=ROUND_HALF_EVEN))
    if abs(n) >= 2**63:  # canonical values live in int64 columns and numpy arrays
        raise ConfigError(f"{what}: {value!r} is too large")
    return n


def _nonneg(n, value, what: str):
    if n < 0:
        raise ConfigError(f"{what}: {value!r} is negative")
    return n


def _plain(value, what: str):
    """bool is not a number here; ints and floats pass through as Decimal."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a number, got {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"{what}: {value!r} is not a finite number")
        return Decimal(repr(value))
    return None


def _quantity(value, what: str, pattern, expect: str, scale) -> Decimal:
    """A plain number as it is, or ``pattern``'s number times ``scale(match)``."""
    d = _plain(value, what)
    if d is None:
        m = pattern.match(str(value).strip())
        if not m:
            raise _fail(value, what, expect)
        d = _bounded(_decimal(m["num"]), value, what) * scale(m)
    return d


def parse_size(value, what: str = "size") -> int:
    """"4GiB", "256KB" (SI, 256000), "16MiB", "1.5e6", 512 -> bytes. Bytes are whole ("0.5B"
    is refused); a prefixed size rounds to the byte, so a printed "13.51KiB" reads back."""
    prefixed = []

    def scale(m):
        prefixed.append(bool(m["prefix"]))
        return _PREFIX[m["prefix"] or ""]

    d = _quantity(value, what, _RE_SIZE, "a size such as 4GiB, 256KB or 1.5e6 (bytes)", scale)
    return _nonneg(_as_int(d, value, what, exact=not any(prefixed)), value, what)


def _prefix(text: str | None) -> int:
    """A prefix's factor, in any case: "k", "K", "M", "m" (no milli-rate), "Gi", "gi"."""
    if not text:
        return 1
    return _BIN[text[0].upper() + "i"] if len(text) == 2 else _SI[text.upper()]


def _rate(value, what: str, to_bits: bool) -> int:
    def scale(m):
        k = Decimal(_prefix(m["prefix"]))
        unit = m["unit"] or (m["bare"][0] if m["bare"] else None)
        if unit == "B" and m["per"] not in ("ps", "/s", "/S"):  # "BPS", "BpS": ambiguous
            raise ConfigError(f"{what}: {value!r} is ambiguous; write bps or b/s for bits/s, "
                              "B/s for bytes/s (10Gbps, 10GB/s)")
        if unit is not None and (unit == "b" or unit.lower().startswith("bit")) != to_bits:
            k = k * 8 if to_bits else k / 8
        return k

    d = _quantity(value, what, _RE_RATE, "a rate such as 1Gbps, 10Gb/s or 125MB/s", scale)
    return _nonneg(_as_int(d, value, what, exact=False), value, what)


def parse_rate(value, what: str = "rate") -> int:
    """Link rate -> bits/s. "1Gbps", "10Gb/s", "125MB/s" (= 1e9); a plain number is bits/s."""
    return _rate(value, what, to_bits=True)


def parse_byte_rate(value, what: str = "bandwidth") -> int:
    """Memory bandwidth -> bytes/s. "19.2GB/s", "153.6Gbps"; a plain number is bytes/s."""
    return _rate(value, what, to_bits=False)


def parse_ops(value, what: str = "compute rate") -> int:
    """Compute throughput -> ops/s. "409.6GOPS", "1.2TFLOPS", "400Gops/s", "4e11"."""
    d = _quantity(value, what, _RE_OPS, "a compute rate such as 409.6GOPS or 4e11 (ops/s)",
                  lambda m: _SI[m["prefix"] or ""])
    return _nonneg(_as_int(d, value, what, exact=False), value, what)


def parse_time(value, what: str = "time") -> int:
    """Duration -> integer picoseconds. "1us", "0.5s", "250ns"; a plain number is picoseconds."""
    d = _quantity(value, what, _RE_TIME, "a time such as 1us, 250ns or 0.5s", lambda m: _TIME[m["unit"] or "ps"])
    return _nonneg(_as_int(d, value, what, exact=False), value, what)


def parse_decimal(value, what: str = "value", expect: str = "a number") -> Decimal:
    """A plain number, exactly: "0.1" is 1/10, not the nearest float (an int, float or text)."""
    d = _plain(value, what)
    if d is None:
        try:
            d = Decimal(str(value).strip())
        except InvalidOperation:
            raise _fail(value, what, expect) from None
        if not d.is_finite():
            raise _fail(value, what, expect)
    return d


def parse_int(value, what: str = "value") -> int:
    """A plain whole number ("28", 28, "1e3")."""
    return _as_int(parse_decimal(value, what, "a whole number"), value, what, exact=True)


def parse_float(value, what: str = "value") -> float:
    return float(_bounded(parse_decimal(value, what), value, what))


def parse_bool(value, what: str = "value") -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "yes", "1", "on"):
        return True
    if s in ("false", "no", "0", "off"):
        return False
    raise _fail(value, what, "true or false")


def parse_budget(value, what: str = "kv budget"):
    """A KV budget: bytes (int) or a multiple of the owner-only share ("2x" -> "2x").

    The multiple stays a string in canonical form because its byte value depends on the
    run (sequence length, nodes, model); ``resolve_budget`` turns it into bytes.
    """
    if isinstance(value, str):
        m = _RE_MULT.match(value.strip())
        if m:
            k = _decimal(m["num"])
            if k <= 0:
                raise ConfigError(f"{what}: multiple {value!r} must be positive")
            return f"{k.normalize():f}x"
    n = parse_size(value, what)
    if n == 0:
        raise ConfigError(f"{what}: {value!r} must be positive")
    return n


def resolve_budget(budget, owner_share_bytes: int, what: str = "kv budget") -> int:
    """Bytes of a budget given in bytes or as a multiple of ``owner_share_bytes``."""
    if isinstance(budget, str):
        m = _RE_MULT.match(budget)
        if not m:
            raise _fail(budget, what, "bytes or a multiple such as 2x")
        return int((_decimal(m["num"]) * owner_share_bytes).to_integral_value(rounding=ROUND_HALF_EVEN))
    return int(budget)


def parse_str(value, what: str = "value") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{what}: expected a non-empty string, got {value!r}")
    return value.strip()


PARSERS = {
    "size": parse_size,
    "rate": parse_rate,
    "byte_rate": parse_byte_rate,
    "ops": parse_ops,
    "time": parse_time,
    "int": parse_int,
    "float": parse_float,
    "bool": parse_bool,
    "budget": parse_budget,
    "str": lambda v, what: parse_str(v, what),
}


def parse(kind: str, value, what: str):
    """Parse ``value`` as a quantity of ``kind`` (a key of PARSERS or "enum:a|b|c")."""
    if kind.startswith("enum:"):
        choices = kind[5:].split("|")
        if value not in choices:
            raise ConfigError(f"{what}: {value!r} is not one of {', '.join(choices)}")
        return value
    return PARSERS[kind](value, what)


# ------------------------------------------------------------------ formatting
def _fmt_num(x: Decimal) -> str:
    """Exact when that takes at most 6 significant digits, else 4 significant digits."""
    exact = x.normalize()
    if len(exact.as_tuple().digits) <= 6:
        return f"{exact:f}"
    return f"{float(x):.4g}"


def _fmt_scaled(n: int, table: list[tuple[str, int]], unit: str) -> str:
    for name, factor in table:
        if n and abs(n) >= factor:
            return f"{_fmt_num(Decimal(n) / factor)}{name}{unit}"
    return f"{n}{unit}"


_SI_DESC = [("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)]
_BIN_DESC = [("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)]


def format_size(n: int) -> str:
    """Bytes with a binary prefix, sizes and memory alike ("16MiB", "250KiB" for 256000,
    "75.6875MiB"): exact up to 6 significant digits, else 4 ("11.13GiB"). Rates print decimal."""
    if abs(n) < 10_000:
        return f"{n}B"
    for name, factor in _BIN_DESC:  # the largest prefix that shows it exactly ("1025KiB", not "1.001MiB")
        x = (Decimal(n) / factor).normalize()
        if abs(n) >= factor and len(x.as_tuple().digits) <= 6:
            return f"{x:f}{name}B"
    return _fmt_scaled(n, _BIN_DESC, "B")


def format_rate(bits_per_s: int) -> str:
    return _fmt_scaled(bits_per_s, _SI_DESC, "bps")


def format_byte_rate(bytes_per_s: int) -> str:
    return _fmt_scaled(bytes_per_s, _SI_DESC, "B/s")


def format_ops(ops_per_s: int) -> str:
    return _fmt_scaled(ops_per_s, _SI_DESC, "OPS")


def format_time(ps: int) -> str:
    for name, factor in (("s", 10**12), ("ms", 10**9), ("us", 10**6), ("ns", 10**3)):
        if ps and abs(ps) >= factor:
            return f"{_fmt_num(Decimal(ps) / factor)}{name}"
    return f"{ps}ps"


FORMATTERS = {
    "size": format_size,
    "rate": format_rate,
    "byte_rate": format_byte_rate,
    "ops": format_ops,
    "time": format_time,
}


def format_value(kind: str, value) -> str:
    """Human form of a canonical value; kinds without a unit print as they are."""
    if kind in FORMATTERS and isinstance(value, int) and not isinstance(value, bool):
        return FORMATTERS[kind](value)
    if kind == "budget" and isinstance(value, int):
        return format_size(value)
    return str(value).lower() if isinstance(value, bool) else str(value)
