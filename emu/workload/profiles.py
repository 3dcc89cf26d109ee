"""Model and hardware profiles: packaged TOML/JSON data files with units.

A profile is a flat table. ``SCHEMA`` gives every field's unit kind (see ``emu.units``);
loading parses each value into its canonical unit (bytes, bits/s, bytes/s, ops/s, ps), so
what a generator or the replay sees is plain numbers. The same schema drives
``emu.units.apply_overrides`` (``--set hw.link_rate=10Gbps``).
"""

from __future__ import annotations

import json
import tomllib
from importlib import resources
from pathlib import Path

from ..errors import ConfigError
from ..units import apply_overrides, parse

DTYPES = "int4|int8|fp16|fp32"
# Bits per element; INT4 packs two elements per byte.
DTYPE_BITS = {"int4": 4, "int8": 8, "fp16": 16, "fp32": 32}

SCHEMA: dict[str, dict[str, str]] = {
    "model": {
        "name": "str",
        "description": "str",
        "layers": "int",
        "hidden": "int",
        "heads": "int",
        "kv_heads": "int",
        "head_dim": "int",
        "intermediate": "int",
        "vocab": "int",
        "tied_embeddings": "bool",
        "weight_dtype": f"enum:{DTYPES}",
        "kv_dtype": f"enum:{DTYPES}",
        "act_dtype": f"enum:{DTYPES}",
    },
    "hw": {
        "name": "str",
        "description": "str",
        "compute_flops": "ops",
        "mem_bw": "byte_rate",
        "op_overhead_ps": "time",
        "dram_bytes": "size",
        "kv_budget": "budget",
        "comm_buffer": "size",
        "link_rate": "rate",
        "link_latency_ps": "time",
        "mtu": "size",
        "nic_latency_ps": "time",
        "nic_rate": "rate",
        "switch_latency_ps": "time",
        "switch_rate": "rate",
        "port_arbiter": "enum:rr|transit-first|local-first",
        "ports": "int",
        "gamma": "float",
    },
}
# Fields a profile may leave out; the replay then uses DEFAULTS (docs/workloads.md gives
# the reasoning): a store-and-forward Ethernet switch forwards at line rate on every port
# (non-blocking fabric, 0 = unlimited) after about 1 us of lookup and fabric; a NIC port
# arbitrates its own and forwarded frames round robin.
DEFAULTS = {"hw": {"switch_latency_ps": 1_000_000, "switch_rate": 0, "port_arbiter": "rr"}}
OPTIONAL = {"description", *DEFAULTS["hw"]}
# Fields that must be >= 1 (counts, rates, sizes that divide something).
_POSITIVE = {
    "model": ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"),
    "hw": ("compute_flops", "mem_bw", "dram_bytes", "comm_buffer", "link_rate", "ports"),
}
_PACKAGE = {"model": "emu.workload.models", "hw": "emu.workload.hardware"}
_LABEL = {"model": "model profile", "hw": "hardware profile"}


def available(section: str) -> list[str]:
    """Names of the packaged profiles of ``section`` ("model" or "hw")."""
    root = resources.files(_PACKAGE[section])
    return sorted(p.name.rsplit(".", 1)[0] for p in root.iterdir() if p.name.endswith((".toml", ".json")))


def _read(section: str, ref: str) -> tuple[dict, str]:
    """Raw table and a label for messages, from a packaged name or a file path."""
    path = Path(ref)
    if path.suffix.lower() in (".toml", ".json") or "/" in ref:
        if not path.is_file():
            raise ConfigError(f"{_LABEL[section]} {ref}: no such file")
        text, where = path.read_bytes(), str(path)
    else:
        root = resources.files(_PACKAGE[section])
        hits = [root / f"{ref}{ext}" for ext in (".toml", ".json") if (root / f"{ref}{ext}").is_file()]
        if not hits:
            raise ConfigError(f"{_LABEL[section]} {ref!r}: unknown; available: {', '.join(available(section))}")
        path, where = hits[0], f"{_LABEL[section]} {ref}"
        text = hits[0].read_bytes()
    try:
        raw = json.loads(text) if str(path).lower().endswith(".json") else tomllib.loads(text.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not valid {'JSON' if str(path).endswith('.json') else 'TOML'}: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table of fields")
    return raw, where


def check(section: str, values: dict, where: str) -> dict:
    """Parse and check a whole profile table; returns the canonical dict (schema order)."""
    fields = SCHEMA[section]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}; fields are {', '.join(fields)}")
    out = {}
    for name, kind in fields.items():
        if name not in values:
            if name in OPTIONAL:
                continue
            raise ConfigError(f"{where}: missing field {name!r}")
        out[name] = parse(kind, values[name], f"{where}: {section}.{name}")
    for name in _POSITIVE[section]:
        if out[name] < 1:
            raise ConfigError(f"{where}: {section}.{name} must be positive, got {out[name]}")
    if section == "model" and out["heads"] % out["kv_heads"]:
        raise ConfigError(f"{where}: model.heads ({out['heads']}) must be a multiple of model.kv_heads ({out['kv_heads']})")
    if section == "hw":
        if out["mtu"] < 64:
            raise ConfigError(f"{where}: hw.mtu must be at least 64 bytes, got {out['mtu']}")
        if not out["gamma"] > 0:
            raise ConfigError(f"{where}: hw.gamma must be positive, got {out['gamma']}")
    return out


def load(section: str, ref: str, overrides=()) -> dict:
    """A checked canonical profile: packaged name or file, then ``--set`` overrides of the
    same section (others are ignored here: the caller applies each to its own section)."""
    raw, where = _read(section, ref)
    prof = check(section, raw, where)
    mine = [o for o in overrides or () if o.split("=", 1)[0].strip().startswith(section + ".")]
    if mine:
        prof = apply_overrides({section: prof}, mine)[section]
        prof = check(section, prof, f"{where} with {', '.join(mine)}")
    return prof


def load_pair(model: str, hw: str, overrides=()) -> tuple[dict, dict]:
    """Model and hardware profiles with ``--set`` overrides; an override naming another
    section or an unknown field is an error."""
    apply_overrides({"model": {}, "hw": {}}, [o for o in overrides or ()], _validate_only_schema())
    return load("model", model, overrides), load("hw", hw, overrides)


def _validate_only_schema() -> dict:
    # Same keys, values accepted as strings: only the key is checked in this pass.
    return {sec: {f: "str" for f in fields} for sec, fields in SCHEMA.items()}


def dtype_bytes(count: int, dtype: str) -> int:
    """Bytes of ``count`` elements of ``dtype``, rounded up to whole bytes."""
    return (count * DTYPE_BITS[dtype] + 7) // 8
