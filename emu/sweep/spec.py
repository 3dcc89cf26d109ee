"""Sweep files: a TOML grid of replay parameters, checked and expanded into points.

::

    [sweep]
    name = "quick"                  # the default output folder is results/sweeps/<name>
    description = "..."

    [fixed]                         # one value per parameter (optional)
    nodes = 4

    [grid]                          # lists; the sweep is their cartesian product
    scheme = ["mars", "ring"]
    seq = [1024, 2048]

    [[exclude]]                     # drop grid points matching every key (optional)
    scheme = "ring"
    seq = 2048

    [[include]]                     # extra points, over [fixed], not crossed (optional)
    scheme = "pd"
    seq = 4096

A point is a plain dict of every parameter (``PARAMS``), JSON-able, small enough to send to
a worker; its id is a hash of that dict, so a point keeps its id (and its finished result)
when the grid around it changes. Everything that can be checked without running a point is
checked here, and a problem raises ``ConfigError`` naming the file, the key and the problem.
What only a run can tell (a topology that does not fit the node count, a KV budget below the
owner share) fails that point alone.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError

# name -> default. The generator's defaults (emu trace), then the replay's.
PARAMS: dict[str, object] = {
    "scheme": None,
    "seq": 16384,
    "nodes": 16,
    "chunk": 1024,
    "model": "qwen2.5-1.5b",
    "hw": "kr260",
    "decode_tokens": 0,
    "kv_budget": None,       # the hardware profile's (kr260: 2x)
    "alpha": 1.0,
    "pd_mode": "bulk",
    "prefill_nodes": None,   # PD: nodes // 2
    "topology": "auto",
    "link_rate": None,       # the hardware profile's; shorthand for set hw.link_rate=...
    "loss": 0.0,
    "seed": 0,
    "set": (),               # profile overrides "SECTION.FIELD=VALUE"
}
PD_ONLY = ("pd_mode", "prefill_nodes")
TABLES = ("sweep", "grid", "fixed", "include", "exclude")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SpecError(ConfigError):
    pass


@dataclass
class Sweep:
    name: str
    description: str
    path: str
    axes: list[str]                     # grid and include keys, in file order (the columns that vary)
    fixed: dict
    points: list[dict] = field(default_factory=list)
    duplicates: int = 0                 # grid points that collapsed into another (e.g. pd_mode for ring)

    def ids(self) -> list[str]:
        return [point_id(p) for p in self.points]

    def to_json(self) -> dict:
        return {"name": self.name, "description": self.description, "file": self.path, "axes": self.axes,
                "fixed": self.fixed, "points": [{"index": i, "point": point_id(p), **p} for i, p in enumerate(self.points)]}


def point_id(point: dict) -> str:
    """12 hex digits naming a point by its parameters only."""
    text = json.dumps(point, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def overrides(point: dict) -> list[str]:
    """Every profile override of a point: ``set``, then dotted keys, then ``link_rate``."""
    out = list(point.get("set") or ())
    out += [f"{k}={v}" for k, v in point.items() if "." in k]
    if point.get("link_rate") is not None:
        out.append(f"hw.link_rate={point['link_rate']}")
    return out


# ---------------------------------------------------------------------------- values

def _int(lo: int):
    def check(v, where):
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"{where}: expected an integer >= {lo}, got {v!r}")
        if v < lo:
            raise SpecError(f"{where}: must be >= {lo}, got {v}")
        return v
    return check


def _str(v, where):
    if not isinstance(v, str) or not v.strip():
        raise SpecError(f"{where}: expected a non-empty string, got {v!r}")
    return v.strip()


def _scheme(v, where):
    from ..workload.schemes import SCHEMES

    v = _str(v, where)
    if v not in SCHEMES:
        raise SpecError(f"{where}: unknown scheme {v!r}; expected one of {', '.join(SCHEMES)}")
    return v


def _chunk(v, where):
    if v == "auto":
        return v
    if isinstance(v, str):
        raise SpecError(f"{where}: expected an integer >= 1 or \"auto\", got {v!r}")
    return _int(1)(v, where)


def _number(lo: float, hi: float | None = None):
    def check(v, where):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SpecError(f"{where}: expected a number, got {v!r}")
        if v < lo or (hi is not None and v > hi):
            raise SpecError(f"{where}: must be in [{lo}, {hi}], got {v}" if hi is not None else f"{where}: must be >= {lo}, got {v}")
        return float(v)
    return check


def _unit(parser):
    def check(v, where):
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise SpecError(f"{where}: expected a number or a string with a unit, got {v!r}")
        try:
            parser(v, where)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None
        return v.strip() if isinstance(v, str) else v
    return check


def _profile(section: str):
    def check(v, where):
        from ..workload import profiles

        v = _str(v, where)
        try:
            profiles.load(section, v)
        except ConfigError as exc:
            raise SpecError(f"{where}: {exc}") from None
        return v
    return check


def _pd_mode(v, where):
    v = _str(v, where)
    if v not in ("bulk", "stream"):
        raise SpecError(f"{where}: expected \"bulk\" or \"stream\", got {v!r}")
    return v


def _override(item, where):
    from ..workload.profiles import SCHEMA, apply_overrides

    if not isinstance(item, str):
        raise SpecError(f"{where}: expected \"SECTION.FIELD=VALUE\", got {item!r}")
    try:
        apply_overrides({"model": {}, "hw": {}}, [item], SCHEMA)
    except ConfigError as exc:
        raise SpecError(f"{where}: {exc}") from None
    return item.strip()


def _set(v, where):
    """One override or a list of them -> a tuple of strings."""
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list):
        raise SpecError(f"{where}: expected a string or a list of \"SECTION.FIELD=VALUE\" strings, got {v!r}")
    return tuple(_override(x, f"{where}[{i}]" if not isinstance(v, str) else where) for i, x in enumerate(items))


def _budget(v, where):
    from ..units import parse_budget
    return _unit(parse_budget)(v, where)


def _rate(v, where):
    from ..units import parse_rate
    return _unit(parse_rate)(v, where)


CHECKS = {
    "scheme": _scheme,
    "seq": _int(1),
    "nodes": _int(2),
    "chunk": _chunk,
    "model": _profile("model"),
    "hw": _profile("hw"),
    "decode_tokens": _int(0),
    "kv_budget": _budget,
    "alpha": _number(0.0),
    "pd_mode": _pd_mode,
    "prefill_nodes": _int(1),
    "topology": _str,
    "link_rate": _rate,
    "loss": _number(0.0, 1.0),
    "seed": _int(0),
    "set": _set,
}
assert set(CHECKS) == set(PARAMS)


def _dotted(key: str, where: str):
    """A profile field as a parameter: "hw.mem_bw" = ["19.2GB/s", "38.4GB/s"]."""
    from ..units import parse
    from ..workload.profiles import SCHEMA

    section, _, name = key.partition(".")
    if section not in SCHEMA or name not in SCHEMA[section]:
        fields = SCHEMA.get(section)
        hint = f"{section} fields are {', '.join(sorted(fields))}" if fields else "sections are hw and model"
        raise SpecError(f"{where}: unknown profile field {key!r}; {hint}")

    def check(v, w):
        if isinstance(v, (dict, list)):
            raise SpecError(f"{w}: expected one value, got {v!r}")
        try:
            parse(SCHEMA[section][name], v, key)
        except ConfigError as exc:
            raise SpecError(f"{w}: {exc}") from None
        return v.strip() if isinstance(v, str) else v
    return check


def _checker(key: str, where: str):
    if key in CHECKS:
        return CHECKS[key]
    if "." in key:
        return _dotted(key, where)
    close = difflib.get_close_matches(key, list(PARAMS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise SpecError(f"{where}: unknown parameter{hint} (parameters: {', '.join(PARAMS)}, or a profile field "
                    f"such as \"hw.link_rate\")")


def _table(doc: dict, name: str, kind: type):
    v = doc.get(name)
    if v is None:
        return kind()
    if not isinstance(v, kind):
        raise SpecError(f"{name}: expected {'a table [' + name + ']' if kind is dict else 'an array of tables [[' + name + ']]'}")
    if kind is list:
        if not all(isinstance(x, dict) for x in v):
            raise SpecError(f"{name}: expected an array of tables [[{name}]]")
        return [_flat(x) for x in v]
    return v if name == "sweep" else _flat(v)


def _flat(table: dict) -> dict:
    """``hw.link_rate = [...]`` written without quotes is a nested table in TOML: flatten it."""
    out = {}
    for k, v in table.items():
        if isinstance(v, dict) and k in ("hw", "model"):
            out.update({f"{k}.{f}": x for f, x in v.items()})
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------------------- loading

MAX_POINTS = 100_000  # a grid beyond this is a typo (each point is a whole replay)


def _check_profiles(points: list[dict]) -> None:
    """Every point's profiles with its overrides, as its worker will load them: a value the
    profile refuses (hw.compute_flops=0) is the sweep file's error, found before any run."""
    from ..errors import ConfigError
    from ..workload import profiles

    seen = set()
    for i, pt in enumerate(points):
        key = (pt["model"], pt["hw"], tuple(overrides(pt)))
        if key in seen:
            continue
        seen.add(key)
        try:
            profiles.load_pair(*key)
        except ConfigError as exc:
            raise SpecError(f"point {i} ({pt['scheme']}, model {pt['model']}, hw {pt['hw']}): {exc}") from None


def load(path: str | Path) -> Sweep:
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such sweep file") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, not a sweep file") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise SpecError(f"{path}: invalid TOML: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise SpecError(f"{path}: invalid TOML: {exc}") from None
    return parse(doc, str(path))


def parse(doc: dict, path: str = "<sweep>") -> Sweep:
    """Check a parsed sweep document and expand its points; errors start with ``path``."""
    try:
        return _parse(doc, path)
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None


def _parse(doc: dict, path: str) -> Sweep:
    for key in doc:
        if key not in TABLES:
            close = difflib.get_close_matches(key, TABLES, n=1)
            raise SpecError(f"{key}: unknown table" + (f"; did you mean [{close[0]}]?" if close else "")
                            + f" (tables: {', '.join(TABLES)})")
    head = _table(doc, "sweep", dict)
    if "sweep" not in doc:
        raise SpecError("sweep: missing the [sweep] table (name = \"...\")")
    for key in head:
        if key not in ("name", "description"):
            raise SpecError(f"sweep.{key}: unknown key (keys: name, description)")
    if "name" not in head:
        raise SpecError("sweep.name: missing")
    name = head["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise SpecError(f"sweep.name: expected a folder-safe name (letters, digits, . _ -), got {name!r}")
    desc = head.get("description", "")
    if not isinstance(desc, str):
        raise SpecError(f"sweep.description: expected a string, got {desc!r}")

    grid_raw = _table(doc, "grid", dict)
    fixed_raw = _table(doc, "fixed", dict)
    include_raw = _table(doc, "include", list)
    exclude_raw = _table(doc, "exclude", list)

    fixed = {}
    for key, v in fixed_raw.items():
        where = f"fixed.{key}"
        check = _checker(key, where)
        if isinstance(v, list) and key != "set":
            raise SpecError(f"{where}: expected one value, got a list (lists go in [grid])")
        fixed[key] = check(v, where)

    grid: dict[str, list] = {}
    for key, vs in grid_raw.items():
        where = f"grid.{key}"
        check = _checker(key, where)
        if key in fixed:
            raise SpecError(f"{where}: also given in [fixed]; keep one")
        if not isinstance(vs, list):
            raise SpecError(f"{where}: expected a list of values, e.g. {key} = [{json.dumps(vs)}]")
        if not vs:
            raise SpecError(f"{where}: empty list")
        vals = [check(v, f"{where}[{i}]") for i, v in enumerate(vs)]
        for i, v in enumerate(vals):
            if v in vals[:i]:
                raise SpecError(f"{where}[{i}]: {vs[i]!r} appears twice")
        grid[key] = vals

    excludes = []
    for n, ex in enumerate(exclude_raw):
        if not ex:
            raise SpecError(f"exclude[{n}]: empty (it would drop every point)")
        rule = {}
        for key, v in ex.items():
            where = f"exclude[{n}].{key}"
            if key not in grid:
                raise SpecError(f"{where}: not a [grid] parameter ({', '.join(grid) or 'the grid is empty'})")
            check = _checker(key, where)
            vs = v if isinstance(v, list) and key != "set" else [v]
            rule[key] = [check(x, where) for x in vs]
        excludes.append(rule)

    base = {k: v for k, v in PARAMS.items()}
    base.update(fixed)
    points: list[dict] = []
    if grid or not include_raw:
        keys = list(grid)
        size = math.prod(len(grid[k]) for k in keys)
        if size > MAX_POINTS:
            raise SpecError(f"[grid]: {size:,} combinations ({' x '.join(str(len(grid[k])) for k in keys)}); "
                            f"at most {MAX_POINTS:,} points")
        for combo in itertools.product(*(grid[k] for k in keys)):
            pt = dict(base)
            pt.update(zip(keys, combo))
            if any(all(pt[k] in vs for k, vs in rule.items()) for rule in excludes):
                continue
            points.append(pt)
    for n, inc in enumerate(include_raw):
        pt = dict(base)
        for key, v in inc.items():
            where = f"include[{n}].{key}"
            check = _checker(key, where)
            if isinstance(v, list) and key != "set":
                raise SpecError(f"{where}: expected one value, got a list")
            pt[key] = check(v, where)
        points.append(pt)

    where_scheme = "scheme" if not include_raw else "scheme (in [grid], [fixed] or every [[include]])"
    if not points:
        raise SpecError("grid: no points left after [[exclude]]")
    for pt in points:
        if pt["scheme"] is None:
            raise SpecError(f"{where_scheme}: missing; e.g. scheme = [\"mars\", \"ring\"] in [grid]")

    out, seen = [], set()
    dups = 0
    for pt in points:
        pt = normalize(pt)
        pid = point_id(pt)
        if pid in seen:
            dups += 1
            continue
        seen.add(pid)
        out.append(pt)
    _check_profiles(out)
    axes = []
    for k in [*grid, *(k for inc in include_raw for k in inc)]:
        k = "overrides" if k == "set" else k
        if k not in axes:
            axes.append(k)
    fixed_json = {("overrides" if k == "set" else k): (list(v) if k == "set" else v) for k, v in fixed.items()}
    return Sweep(name=name, description=desc, path=path, axes=axes, fixed=fixed_json, points=out, duplicates=dups)


def normalize(pt: dict) -> dict:
    """Canonical form: every parameter present, tuples as lists, parameters a scheme does not
    read set to None (so ring with pd_mode bulk and stream is one point)."""
    pt = dict(pt)
    pt["set"] = list(pt.get("set") or ())
    if pt["scheme"] != "pd":
        for k in PD_ONLY:
            pt[k] = None
    if pt["scheme"] != "mars" and pt["chunk"] != "auto":  # alpha: eq. 15 and eq. 8 only
        pt["alpha"] = None
    order = list(PARAMS) + sorted(k for k in pt if k not in PARAMS)
    return {k: pt[k] for k in order}


def resolve(ref: str) -> Path:
    """A sweep file path, or the name of a shipped sweep (``quick``: package data, see emu.shipped)."""
    from ..shipped import sweep_path

    return sweep_path(ref)


