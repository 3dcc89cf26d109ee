"""JSON text read from a file the user gave: every way it can be broken becomes one line.

``json.loads`` raises several exceptions for bad input (bad syntax, bad UTF-8, nesting deep
enough to exhaust the recursion limit, integers past Python's 4300-digit limit); callers want
one error of their own type naming the file, so they all come here.
"""

from __future__ import annotations

import json


def parse_json(raw: str | bytes, where: str, error: type[Exception]):
    """The document in ``raw``; ``error(f"{where}: not valid JSON: ...")`` when it is not one."""
    try:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8")
        return json.loads(raw)
    except UnicodeDecodeError:
        raise error(f"{where}: not valid JSON: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise error(f"{where}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise error(f"{where}: not valid JSON: {exc}") from None
