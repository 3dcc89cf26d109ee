"""Model and hardware profiles: packaged TOML/JSON data files with units.

A profile is a flat table. ``SCHEMA`` gives every field's unit kind (see ``emu.units``);
loading parses each value into its canonical unit (bytes, bits/s, bytes/s, ops/s, ps), so
what a generator or the replay sees is plain numbers. The same schema drives
``apply_overrides`` (``--set hw.link_rate=10Gbps``).
"""

from __future__ import annotations

import copy
import json
import tomllib
from importlib import resources
from pathlib import Path

from ..codec.mac import ETH_LEN
from ..errors import ConfigError
from ..names import did_you_mean
from ..units import format_value, parse

DTYPES = "int4|int8|fp16|fp32"
# What a port does when its transit buffer (hw.port_buffer) fills (docs/engine.md, "Port buffers
# and flow control"): ideal = unbounded and lossless (an idealisation), drop = drop-tail,
# pause = IEEE 802.3x PAUSE per link (the default), credit = hop-by-hop credits.
FLOW_CONTROLS = ("ideal", "drop", "pause", "credit")

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
        "port_buffer": "size",
        "flow_control": f"enum:{'|'.join(FLOW_CONTROLS)}",
        "signals": "enum:frames|free",
        "ports": "int",
        "gamma": "float",
        "rto_min_ps": "time",
        "rto_initial_ps": "time",
    },
}
# Fields a profile may leave out; the replay then uses DEFAULTS (``hw_defaults``): the NIC's
# initial retransmission timeout, 1 ms, and its floor, which depends on the flow control
# (RTO_MIN_PS; docs/nic.md, "Adaptive timeout"); a store-and-forward Ethernet switch forwards
# at line rate on every port (non-blocking fabric, 0 = unlimited) after about 1 us of lookup
# and fabric (docs/workloads.md); a NIC port arbitrates its own and forwarded frames round
# robin (docs/engine.md); a port holds 128 KiB of transit frames, four of the K26's UltraRAM
# blocks, and pauses its upstream neighbour with IEEE 802.3x PAUSE frames before they
# overflow, as the KR260's Ethernet MACs do (docs/engine.md, "Port buffers and flow control":
# why pause is the default). A dependency released across boards is a signal frame
# ("frames"; docs/nic.md, "Signals"); "free" releases it at once with no frame, the
# idealisation replays made before signals, kept for comparison.
DEFAULTS = {"hw": {"rto_initial_ps": 1_000_000_000,
                   "switch_latency_ps": 1_000_000, "switch_rate": 0, "port_arbiter": "rr",
                   "port_buffer": 128 * 1024, "flow_control": "pause", "signals": "frames"}}
# The retransmission timer's floor by flow control. A lossless fabric (pause, credit, ideal)
# loses a frame only to corruption, so its timer is a RoCE NIC's conservative local ACK
# timeout, above the fabric's worst queueing round trip: InfiniBand's encoding 4.096 us x 2^11
# (8.39 ms). Drop-tail loses frames to every burst, so its timer is IRN's fast one, 100 us.
RTO_MIN_PS = {mode: 100_000_000 if mode == "drop" else 4_096_000 << 11 for mode in FLOW_CONTROLS}


def hw_defaults(hw: dict) -> dict:
    """A hardware profile with the fields it leaves out filled in (DEFAULTS, RTO_MIN_PS)."""
    out = {**DEFAULTS["hw"], **hw}
    out.setdefault("rto_min_ps", RTO_MIN_PS[out["flow_control"]])
    return out


OPTIONAL = {"description", "rto_min_ps", *DEFAULTS["hw"]}
# Fields that must be >= 1 (counts, rates, sizes that divide something).
_POSITIVE = {
    "model": ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"),
    "hw": ("compute_flops", "mem_bw", "dram_bytes", "comm_buffer", "link_rate", "ports"),
}
# Plausible ranges, checked so that a typo cannot make a run allocate or compute without
# bound (``hw.link_rate=1bps`` stretches a replay a billion times; ``model.layers=10**9``
# builds a billion-layer DAG). Far wider than any real board or model.
RANGES = {
    "model": {"layers": (1, 4096), "hidden": (1, 1 << 20), "heads": (1, 1 << 14), "kv_heads": (1, 1 << 14),
              "head_dim": (1, 1 << 14), "intermediate": (1, 1 << 24), "vocab": (1, 1 << 24)},
    "hw": {"compute_flops": (10**6, 10**19), "mem_bw": (10**6, 10**16), "op_overhead_ps": (0, 10**12),
           "dram_bytes": (1, 1 << 50), "comm_buffer": (1, 1 << 40), "link_rate": (10**6, 10**15),
           "link_latency_ps": (0, 10**12), "nic_latency_ps": (0, 10**12), "nic_rate": (0, 10**15),
           "ports": (1, 64), "gamma": (0, 1000)},
}
MAX_MTU = 48 + 0xFFFF  # the wire format's limit: header + the largest pay_len
_PACKAGE = {"model": "emu.workload.models", "hw": "emu.workload.hardware"}
_LABEL = {"model": "model profile", "hw": "hardware profile"}


def apply_overrides(profile: dict, overrides, schema: dict | None = None) -> dict:
    """Return a copy of ``profile`` ({"model": {...}, "hw": {...}}) with "section.field=value"
    overrides applied, each value parsed with the unit the profile schema gives that field.

    An unknown section or field, or a value that does not parse, raises ConfigError naming it.
    """
    schema = SCHEMA if schema is None else schema
    out = copy.deepcopy(profile)
    for item in overrides or ():
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"override {item!r}: expected SECTION.FIELD=VALUE, e.g. hw.link_rate=10Gbps")
        key, value = item.split("=", 1)
        key = key.strip()
        section, _, field = key.partition(".")
        keys = [f"{sec}.{f}" for sec in sorted(schema) for f in schema[sec]]
        if section not in schema or not field:
            raise ConfigError(f"override {item!r}: unknown key {key!r}; {did_you_mean(key, keys)}"
                              f"keys start with one of {', '.join(sorted(schema))}")
        fields = schema[section]
        if field not in fields:
            raise ConfigError(f"override {item!r}: unknown field {key!r}; {did_you_mean(key, keys)}"
                              f"{section} fields are {', '.join(sorted(fields))}")
        out.setdefault(section, {})[field] = parse(fields[field], value.strip(), key)
    return out


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
            raise ConfigError(f"{_LABEL[section]} {ref!r}: unknown; {did_you_mean(ref, available(section))}"
                              f"available: {', '.join(available(section))}")
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
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}; {did_you_mean(unknown[0], fields)}"
                          f"fields are {', '.join(fields)}")
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
    for name, (lo, hi) in RANGES[section].items():
        v = out[name]
        if name == "nic_rate" and v == 0:  # 0: no NIC datapath limit
            continue
        if not lo <= v <= hi:
            shown = {k: format_value(fields[name], x) for k, x in (("lo", lo), ("hi", hi), ("v", v))}
            raise ConfigError(f"{where}: {section}.{name} = {shown['v']} is outside {shown['lo']}..{shown['hi']}")
    if section == "model" and out["heads"] % out["kv_heads"]:
        raise ConfigError(f"{where}: model.heads ({out['heads']}) must be a multiple of model.kv_heads ({out['kv_heads']})")
    if section == "hw":
        if out["mtu"] < 64:
            raise ConfigError(f"{where}: hw.mtu must be at least 64 bytes, got {out['mtu']}")
        if out["mtu"] > MAX_MTU:
            raise ConfigError(f"{where}: hw.mtu must be at most {MAX_MTU} bytes (48-byte header + a 16-bit "
                              f"pay_len), got {out['mtu']}")
        if not out["gamma"] > 0:
            raise ConfigError(f"{where}: hw.gamma must be positive, got {out['gamma']}")
        for name in ("rto_min_ps", "rto_initial_ps"):
            if name in out and out[name] < 1:
                raise ConfigError(f"{where}: hw.{name} must be positive, got {out[name]}")
        if "port_buffer" in out:
            _check_port_buffer(out["port_buffer"], out["mtu"], where)
    return out


def _check_port_buffer(nbytes: int, mtu: int, where: str) -> None:
    """A port buffer holds at least one largest frame, the Ethernet header plus hw.mtu (else
    every full frame is lost or never sent), and at most 1 TiB (a typo's bound, like the other sizes)."""
    lo, hi = mtu + ETH_LEN, 1 << 40
    if not lo <= nbytes <= hi:
        shown = [format_value("size", x) for x in (nbytes, lo, hi)]
        raise ConfigError(f"{where}: hw.port_buffer = {shown[0]} is outside {shown[1]}..{shown[2]} "
                          f"(at least one frame of hw.mtu + the {ETH_LEN}-byte Ethernet header)")


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
