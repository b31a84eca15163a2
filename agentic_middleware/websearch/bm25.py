"""BM25 (Okapi), small and dependency-free, so the offline search ranks like a real engine."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercased words: runs of letters and digits."""
    return _WORD.findall(text.lower())


class BM25:
    """Scores documents against a query.

    score(D, Q) = sum over query terms q of idf(q) * f(q, D) * (k1 + 1) / (f(q, D) + k1 * (1 - b + b * |D| / avgdl)),
    with idf(q) = ln((N - n(q) + 0.5) / (n(q) + 0.5) + 1): the +1 keeps idf positive for terms in most documents.
    """

    def __init__(self, documents: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self.frequencies = [Counter(tokenize(document)) for document in documents]
        self.lengths = [sum(counts.values()) for counts in self.frequencies]
        self.average_length = sum(self.lengths) / len(self.lengths) if self.lengths else 0.0
        containing = Counter(term for counts in self.frequencies for term in counts)
        total = len(self.frequencies)
        self.idf = {term: math.log((total - n + 0.5) / (n + 0.5) + 1) for term, n in containing.items()}

    def score(self, query: str, index: int) -> float:
        """The score of document `index`; a term repeated in the query counts each time."""
        counts = self.frequencies[index]
        norm = self.k1 * (1 - self.b + self.b * self.lengths[index] / (self.average_length or 1.0))
        total = 0.0
        for term in tokenize(query):
            frequency = counts.get(term, 0)
            if frequency:
                total += self.idf[term] * frequency * (self.k1 + 1) / (frequency + norm)
        return total

    def rank(self, query: str, limit: int) -> list[tuple[int, float]]:
        """The best `limit` documents as (index, score), best first; documents sharing no term are left out."""
        scored = [(index, self.score(query, index)) for index in range(len(self.frequencies))]
        matching = [pair for pair in scored if pair[1] > 0]
        return sorted(matching, key=lambda pair: (-pair[1], pair[0]))[:limit]
