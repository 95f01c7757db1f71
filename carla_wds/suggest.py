"""'Did you mean' for names a user types: layouts, configs, fields (one rule for all)."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest of `choices` to `word`, else ''."""
    if not isinstance(word, str):
        return ""
    options = list(choices)
    by_lower = {c.lower(): c for c in options}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


__all__ = ["did_you_mean"]
