"""Who a question names (memory/recall.py, "Names out of the search text" and "Speaker"): the people
a query mentions, found by the words of their names, and the query without those names.

A name matches every turn that person said, for BM25 and for the embedding alike, and drowns the
words that say what is asked; recall boosts that person's words instead and searches without the
name. Apart from the ranking so that each module stays one job.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from collections.abc import Set as AbstractSet

WORD = re.compile(r"[^\W_]+")


def named_in(query: str, speaker: str | None) -> bool:
    """Whether every word of `speaker`'s name is a word of `query` (ignoring case)."""
    return named({w.lower() for w in WORD.findall(query)}, speaker)


_WORD_OR_POSSESSIVE = re.compile(r"([^\W_]+)(?:['\u2019]s\b)?")  # Melanie's, also with U+2019


class Names:
    """The people a query may name, indexed by the first word of each name, so that finding the
    ones a query names costs a lookup per query word, not a look at every name (a gateway knows
    every sender's display name: thousands, in a large group). Build it once, use it every turn."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._by_first: dict[str, list[frozenset[str]]] = {}
        for name in names:
            words = [w.lower() for w in WORD.findall(name)]
            if words:
                self._by_first.setdefault(words[0], []).append(frozenset(words))

    def words_named(self, query_words: AbstractSet[str]) -> set[str]:
        """The words of every name whose words are all among `query_words` (lowercase)."""
        out: set[str] = set()
        for word in query_words:
            for name in self._by_first.get(word, ()):
                if name <= query_words:
                    out |= name
        return out


def without_names(query: str, names: Names | Iterable[str]) -> str:
    """`query` without the names among `names` that it names (as named_in matches: every word of the
    name), possessives included ("Melanie's"); the query itself if nothing else would be left."""
    words = {w.lower() for w in WORD.findall(query)}
    drop = (names if isinstance(names, Names) else Names(names)).words_named(words)
    if not drop:
        return query
    left = _WORD_OR_POSSESSIVE.sub(lambda m: " " if m.group(1).lower() in drop else m.group(0), query)
    left = " ".join(left.split())
    return left if WORD.search(left) else query


def named(words: Collection[str], speaker: str | None) -> bool:
    """named_in for a query already split into lowercase words (recall splits it once per turn)."""
    if not speaker:
        return False
    name = [w.lower() for w in WORD.findall(speaker)]
    return bool(name) and all(w in words for w in name)
