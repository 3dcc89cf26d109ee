"""Close matches for a mistyped name: "did you mean ...?" in the one-line errors."""

from __future__ import annotations

import difflib


def did_you_mean(word: str, names) -> str:
    """"did you mean hw.link_rate? " for a close match of ``word`` among ``names``, else ""."""
    close = difflib.get_close_matches(str(word), [str(n) for n in names], n=3, cutoff=0.6)
    if not close:
        return ""
    return f"did you mean {', '.join(close[:-1]) + ' or ' if len(close) > 1 else ''}{close[-1]}? "
