"""JSON text read from a file the user gave: every way it can be broken becomes one line.

``json.loads`` raises several exceptions for bad input (bad syntax, bad UTF-8, nesting deep
enough to exhaust the recursion limit, integers past Python's 4300-digit limit); callers want
one error of their own type naming the file, so they all come here.
"""

from __future__ import annotations

import json
import warnings

import numpy as np


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


# A JSON array of integers at least this long (in text) is parsed by numpy, not json.loads.
ARRAY_MIN_BYTES = 4096
_INT_TEXT = b"0123456789-,"  # the bytes of an array of integers between its brackets
_INT64 = np.iinfo(np.int64)
_POW10 = np.array([10**k for k in range(1, 20)], np.uint64)
_STEP = 1 << 20
_PLACEHOLDER = b'"@int64-array:'  # a JSON string naming one extracted array; refused if the text has one


def _int64_array(body: bytes) -> np.ndarray | None:
    """The integers of ``body`` (an array's text between its brackets) as int64, if it is the
    canonical JSON text of int64 values (no spaces, no leading zeros, no "-0"); None otherwise,
    so that json.loads reads it and reports what is wrong exactly as for any other text."""
    if not body or body.translate(None, _INT_TEXT) or body[0] == 44 or body[-1] == 44:
        return None
    # a sign only where a value starts, and a digit after it: numpy would read a lone "-" as 0
    if body.count(b"-") != body.count(b",-") + (body[0] == 45) or b"-," in body or body[-1] == 45:
        return None
    # Where numpy stops early, older releases (the project allows numpy 1.26) warn and return
    # what they read, which the count below refuses; newer ones raise.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = np.fromstring(body, dtype=np.int64, sep=",")
    except ValueError:
        return None
    if values.size != body.count(b",") + 1:
        return None
    # Every value is now a sign and digits, which numpy read whole. Printed canonically it has
    # exactly its text's length: a leading zero or a "-0" makes the text longer than this sum. numpy clips what int64 cannot hold to
    # its ends, where the length may still agree: those two values go to json.loads.
    if values.size and (values.min() == _INT64.min or values.max() == _INT64.max):
        return None
    text = values.size - 1  # the commas
    for lo in range(0, values.size, _STEP):  # in steps: the temporaries of a whole column cost GBs
        part = values[lo:lo + _STEP]
        text += part.size + int(np.searchsorted(_POW10, np.abs(part).view(np.uint64), side="right").sum())
        text += int(np.count_nonzero(part < 0))
    return values if text == len(body) else None


def parse_json_arrays(raw: bytes, where: str, error: type[Exception], under: str, columns,
                      fields=("values", "runs")):
    """As parse_json, but a long array of integers that is one of ``columns`` of the top-level
    object's ``under`` member, or one of ``fields`` of such a column's object, comes back as
    an int64 numpy array instead of a list (the same values): a trace's op columns
    (``ops.kind``, or ``ops.kind.values`` and ``.runs`` of an encoded one) hold tens of
    millions of integers, which as Python ints would cost about 40 bytes each and most of the
    load time. Anywhere else a long integer array stays a list, so whatever a checker says of
    a value in an unexpected place is what it says of json's. Text that the fast path does not
    read exactly as json.loads would is left to json.loads."""
    if _PLACEHOLDER in raw:
        return parse_json(raw, where, error)
    pieces, arrays, pos, start = [], [], 0, raw.find(b"[")
    while start >= 0:
        end = raw.find(b"]", start)
        if end < 0:
            break
        inner = raw.rfind(b"[", start + 1, end)
        if inner >= 0:  # only the last "[" before a "]" can open an array of integers; jumping
            start = inner  # there keeps the scan linear in the text ("[[[[...]" is hostile input)
            continue
        if end - start > ARRAY_MIN_BYTES and (values := _int64_array(raw[start + 1:end])) is not None:
            pieces += (raw[pos:start], _PLACEHOLDER + b"%d\"" % len(arrays))
            arrays.append(values)
            pos = end + 1
        start = raw.find(b"[", end + 1)
    if not arrays:
        return parse_json(raw, where, error)
    pieces.append(raw[pos:])
    try:
        doc = json.loads(b"".join(pieces).decode("utf-8"))
    except (ValueError, RecursionError):  # broken text: read the original, for its own error
        return parse_json(raw, where, error)
    prefix = _PLACEHOLDER[1:].decode()

    def restore(x, as_array: bool = False):
        if isinstance(x, str) and x.startswith(prefix):
            values = arrays[int(x[len(prefix):])]
            return values if as_array else values.tolist()
        if isinstance(x, dict):
            return {k: restore(v) for k, v in x.items()}
        if isinstance(x, list):
            return [restore(v) for v in x]
        return x

    def column(x):
        if isinstance(x, dict):
            return {k: restore(v, k in fields) for k, v in x.items()}
        return restore(x, True)

    try:
        if not isinstance(doc, dict):
            return restore(doc)
        return {k: {c: column(x) if c in columns else restore(x) for c, x in v.items()}
                if k == under and isinstance(v, dict) else restore(v) for k, v in doc.items()}
    except RecursionError:  # nested deeper than this walk goes: json.loads says what it makes of it
        return parse_json(raw, where, error)
    finally:
        # restore refers to itself, a cycle only the garbage collector frees: the arrays the
        # document does not keep (the loader narrows them) go now, not at its next pass
        arrays.clear()
