"""'did you mean' suggestions for misspelt names."""

from __future__ import annotations

__all__ = ["did_you_mean", "closest"]

import difflib
from collections.abc import Iterable


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice most like `word`, or None when nothing is close."""
    options = [c for c in choices if c]
    if not options:
        return None
    lowered = {c.lower(): c for c in options}
    if word.lower() in lowered and lowered[word.lower()] != word:
        return lowered[word.lower()]
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return match[0] if match else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`" (did you mean 'x'?)"` or `""`: ready to append to a message."""
    best = closest(str(word), choices)
    return f" (did you mean {best!r}?)" if best else ""
