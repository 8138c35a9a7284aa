"""Lucene-like BM25 search over the catalog (no Java, no pyserini).

Upstream indexes, per product, the lower-cased ``Title + " " + Description + " " +
BulletPoints[0] + " " + option_text`` with pyserini (Lucene BM25, k1 = 0.9, b = 0.4,
English analyzer) and returns the top 50 hits, ties in index order. This module scores the
same document text with the same formula:

    score(d, q) = sum over query terms t (with their query counts):
                  idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))

Analysis: lower-case, tokens are runs of letters/digits (``3.4`` and ``women's`` stay one
token), English possessive ``'s`` removed, Lucene's English stop words dropped, then the
S-stemmer (plural "ies" -> "y", "es" -> "e", "s" -> ""; not after "us"/"ss"). Lucene
stems with Porter and compresses document lengths, so rankings over real data differ a
little from upstream's; results record ``search_impl`` for that reason. The hidden
upstream tokens ``<r> <a> <c> <q>`` are ordinary text here (they lose their brackets).
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["SEARCH_IMPL", "SEARCH_RETURN_N", "BM25Index", "analyze", "document_text", "stem"]

SEARCH_IMPL = "bm25-lucene-params+s-stemmer"
SEARCH_RETURN_N = 50
K1, B = 0.9, 0.4

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET.
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)
_TOKEN = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*")


def stem(word: str) -> str:
    """Harman's S-stemmer (Lucene's ``EnglishMinimalStemmer`` rules)."""
    if len(word) < 3 or word[-1] != "s" or word[-2] in "us":
        return word
    if word.endswith("ies") and len(word) > 3 and word[-4] not in "ae":
        return word[:-3] + "y"
    if word.endswith("es") and word[-3] in "aeo":
        return word
    return word[:-1]


def analyze(text: str) -> list[str]:
    """Text -> index terms (see the module docstring)."""
    out = []
    for token in _TOKEN.findall(text.lower()):
        if token.endswith("'s"):
            token = token[:-2]
        if not token or token in STOP_WORDS:
            continue
        out.append(stem(token))
    return out


def document_text(product: Mapping[str, Any]) -> str:
    """Upstream's indexed text of a product (``convert_product_file_format.py``)."""
    bullets = product.get("BulletPoints") or [""]
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in (product.get("options") or {}).items())
    return " ".join([product.get("Title", ""), product.get("Description", ""), bullets[0], option_text]).lower()


def cache_entry_bytes(query: str, ranked: tuple[int, ...]) -> int:
    """What one cached search is charged: the query's characters (4 bytes each, the most a
    ``str`` stores per character), 8 per result id, and 200 for the entry's objects."""
    return 4 * len(query) + 8 * len(ranked) + 200


class BM25Index:
    """An inverted index over documents given in order (the order breaks score ties)."""

    def __init__(self, texts: Iterable[str], k1: float = K1, b: float = B, cache_size: int = 4096,
                 cache_bytes: int = 8 << 20) -> None:
        self.k1, self.b = k1, b
        postings: dict[str, list[tuple[int, int]]] = {}
        lengths = []
        for doc_id, text in enumerate(texts):
            terms = analyze(text)
            lengths.append(len(terms))
            counts: dict[str, int] = {}
            for t in terms:
                counts[t] = counts.get(t, 0) + 1
            for t, tf in counts.items():
                postings.setdefault(t, []).append((doc_id, tf))
        self.n_docs = len(lengths)
        avgdl = (sum(lengths) / self.n_docs) if self.n_docs else 1.0
        self._norm = [k1 * (1 - b + b * n / avgdl) for n in lengths]
        self._postings = postings
        self._idf = {t: math.log(1 + (self.n_docs - len(p) + 0.5) / (len(p) + 0.5)) for t, p in postings.items()}
        self._cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._cache_size = cache_size
        self._cache_bytes = cache_bytes
        self.cache_used = 0  # bytes held by the cache, as counted by :func:`cache_entry_bytes`
        self._lock = threading.Lock()

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> tuple[int, ...]:
        """The ids of the top ``k`` documents with a positive score, best first."""
        with self._lock:
            hit = self._cache.get(query)
            if hit is not None:
                self._cache.move_to_end(query)
                return hit[:k]
        weights: dict[str, int] = {}
        for t in analyze(query):
            weights[t] = weights.get(t, 0) + 1
        scores: dict[int, float] = {}
        k1 = self.k1
        for t, qtf in weights.items():
            postings = self._postings.get(t)
            if not postings:
                continue
            w = qtf * self._idf[t] * (k1 + 1)
            norm = self._norm
            for doc_id, tf in postings:
                scores[doc_id] = scores.get(doc_id, 0.0) + w * tf / (tf + norm[doc_id])
        ranked = tuple(sorted(scores, key=lambda d: (-scores[d], d))[:SEARCH_RETURN_N])
        size = cache_entry_bytes(query, ranked)
        if size <= self._cache_bytes // 8:  # a huge query would push out many ordinary ones
            with self._lock:
                if query not in self._cache:
                    self._cache[query] = ranked
                    self.cache_used += size
                while self._cache and (len(self._cache) > self._cache_size or self.cache_used > self._cache_bytes):
                    old_query, old_ranked = self._cache.popitem(last=False)
                    self.cache_used -= cache_entry_bytes(old_query, old_ranked)
        return ranked[:k]

    def terms(self) -> Sequence[str]:
        return list(self._postings)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"], state["_cache"]  # a lock does not pickle; the cache refills
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = OrderedDict()
        self.cache_used = 0
        self._lock = threading.Lock()
