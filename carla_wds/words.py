"""Counts as a user reads them: "1 shard", "2 shards" (one rule for every printed count)."""
from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """'1 shard', '0 shards', '12 routes', '1 boxes entry', '2 boxes entries'."""
    return f"{n} {noun if n == 1 else plural(noun)}"


def plural(noun: str) -> str:
    """The plural of a count's noun (its last word): entry -> entries, shard -> shards."""
    if noun.endswith("y") and noun[-2:-1] not in tuple("aeiou"):
        return noun[:-1] + "ies"
    return noun + "s"


__all__ = ["counted", "plural"]
