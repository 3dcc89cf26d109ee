"""`emu profiles list | show NAME`: the packaged model and hardware profiles, with units."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("profiles", help="list or show model and hardware profiles",
                                   description="The packaged model and hardware profiles (docs/workloads.md).",
                                   epilog="examples: emu profiles list; emu profiles show kr260")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    ls = sub.add_parser("list", help="names of the packaged profiles", description="Names of the packaged profiles.",
                        epilog="example: emu profiles list")
    ls.add_argument("--json", action="store_true", help="print the names as JSON")
    ls.set_defaults(func=_list)
    show = sub.add_parser("show", help="one profile's fields, after --set overrides",
                          description="Print every field of one profile in its unit (sizes, rates, times), after "
                                      "--set overrides, as `emu trace` and `emu replay` would use it.",
                          epilog="example: emu profiles show kr260 --set hw.link_rate=10Gbps")
    show.add_argument("name", help="profile name (see emu profiles list) or a .toml/.json file")
    show.add_argument("--kind", choices=("model", "hw"), default=None, help="model or hw (default: whichever has the name)")
    show.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                      help="override a field, e.g. hw.link_rate=10Gbps (repeatable)")
    show.add_argument("--json", action="store_true", help="print the fields in canonical units (bytes, bits/s, ps, ...) as JSON")
    show.set_defaults(func=_show)
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])


def _list(args) -> int:
    from ..workload.profiles import available

    if args.json:
        print(json.dumps({"model": available("model"), "hw": available("hw")}, indent=2))
        return 0
    for section, label in (("model", "models"), ("hw", "hardware")):
        print(f"{label}: {', '.join(available(section))}")
    return 0


def _show(args) -> int:
    from ..errors import ConfigError
    from ..names import did_you_mean
    from ..units import format_value
    from ..workload.profiles import SCHEMA, _validate_only_schema, apply_overrides, available, load

    apply_overrides({}, args.overrides, _validate_only_schema())  # every key, this section's or not
    section = args.kind or ("hw" if args.name in available("hw") else "model")
    if args.kind is None and args.name not in available("hw") + available("model") and not args.name.endswith((".toml", ".json")):
        raise ConfigError(f"profile {args.name!r}: unknown; {did_you_mean(args.name, available('model') + available('hw'))}"
                          f"models: {', '.join(available('model'))}; hardware: {', '.join(available('hw'))}")
    prof = load(section, args.name, args.overrides)
    if args.json:
        print(json.dumps({"kind": section, **prof}, indent=2))
        return 0
    for field, value in prof.items():
        print(f"{section}.{field} = {format_value(SCHEMA[section][field], value)}")
    return 0
