"""Which options a scheme ran with, in one line: as a trace's meta records them (``emu trace
show``, the replay summary) and as the generator's parameters name them (``emu tune``'s
candidates). Each option is (key, say): ``say(value, options)`` is its text, or None when the
value goes without saying; a key the options do not hold says nothing."""

from __future__ import annotations

# a trace's meta["scheme"] (emu.workload.generate)
META_WORDS = (
    ("ring_forward", lambda v, o: f"ring forward {v}, lookahead {'on' if o['ring_lookahead'] else 'off'}"),
    ("all_to_all", lambda v, o: f"all-to-all {v}" + (", uneven heads" if o.get("uneven_heads") else "")),
    ("first_token", lambda v, o: f"first token on the {v} side"),
    ("alpha", lambda v, o: f"alpha {v:g}"),
    ("lookahead", lambda v, o: "lookahead off" if v is False else None),
)
# the generator's parameters (emu.workload.generate.Params), as emu tune varies them
PARAM_WORDS = (
    ("ring_lookahead", lambda v, o: "lookahead" if v else None),
    ("ring_forward", lambda v, o: "forward on arrival" if v == "on-arrival" else None),
    ("alpha", lambda v, o: f"alpha {v:g}"),
    ("ulysses_degree", lambda v, o: f"u {v}"),
    ("mars_lookahead", lambda v, o: "no lookahead" if v is False else None),
)


def _said(options: dict, words) -> list[str]:
    return [text for key, say in words if key in options and (text := say(options[key], options)) is not None]


def scheme_options(scheme: dict) -> str:
    """The scheme's options from a trace's meta: ``chunk fixed; ring forward on-arrival, lookahead on``."""
    return "; ".join([f"chunk {scheme.get('chunk_mode', 'fixed')}", *_said(scheme, META_WORDS)])


def param_options(params: dict) -> str:
    """A candidate's generator parameters: ``chunk 2048, lookahead, forward on arrival``."""
    return ", ".join([f"chunk {params.get('chunk', 1024)}", *_said(params, PARAM_WORDS)])
