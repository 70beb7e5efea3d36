"""AMQP topic-exchange matching: dot-separated words, `*` one word, `#` zero or more."""

from __future__ import annotations

__all__ = ["topic_matches", "valid_topic_pattern"]

from functools import lru_cache


@lru_cache(maxsize=4096)
def topic_matches(pattern: str, key: str) -> bool:
    """True when routing `key` matches binding `pattern` (RabbitMQ topic semantics)."""
    return _match(
        tuple(pattern.split(".")) if pattern else (), tuple(key.split(".")) if key else ()
    )


def _match(pat: tuple[str, ...], words: tuple[str, ...]) -> bool:
    if not pat:
        return not words
    head, rest = pat[0], pat[1:]
    if head == "#":
        return any(_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    if head == "*" or head == words[0]:
        return _match(rest, words[1:])
    return False


def valid_topic_pattern(pattern: str) -> str | None:
    """None if valid, else why not (empty words, wildcards glued to text)."""
    if pattern == "":
        return None
    for word in pattern.split("."):
        if word == "":
            return f"topic pattern {pattern!r} has an empty word (two dots or a leading dot)"
        if word not in ("*", "#") and ("*" in word or "#" in word):
            return f"topic pattern {pattern!r}: wildcard inside word {word!r}; use '*' or '#' alone"
    return None
