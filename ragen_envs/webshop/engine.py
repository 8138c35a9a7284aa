"""The mini WebShop engine: catalog + goals + search + pages + reward, and one session per
episode.

:class:`WebShopData` is immutable after construction and shared by every session of a
process (one copy per catalog, cached), so many envs or server sessions cost only their
small per-session state. :class:`Session` follows upstream's ``WebAgentTextEnv.step`` /
``SimServer.receive`` semantics:

- ``parse_action``: ``re.match(r'(.+)\\[(.+)\\]', action)`` (greedy, anchored at the start
  only, case-sensitive name), computed by a linear scan (the regex is quadratic on ``[``);
  the argument is lower-cased.
- ``search[q]`` with a non-empty ``q`` runs on any page (the query is split on single
  spaces); ``click[x]`` runs when ``x`` is a clickable of the current page other than
  ``search``; anything else is a no-op: same page, reward ``0``, not done.
- ``back to search`` clears keywords, product and options (the goal stays); ``next >`` /
  ``< prev`` page through results; ``< prev`` on an item returns to the results (options
  cleared), on a sub-page to the item (options kept); an option click records
  ``options[name] = value``; ``buy now`` scores the purchase and shows the done page.
- Like upstream, the session does not stop after a purchase (the env does).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted
from .catalog import DEFAULT_CATALOG_PATH, process_raw_products, read_catalog_file
from .goals import goal_index_for_seed, human_goals as build_human_goals, product_prices, shuffle_goals, split_ranges, synthetic_goals
from .pages import (
    SUB_PAGES,
    Clickable,
    PageView,
    PRODUCT_WINDOW,
    done_page,
    item_page,
    results_page,
    search_page,
    sub_page,
)
from .reward import fallback_nouns, get_reward
from .search import SEARCH_IMPL, BM25Index, document_text

__all__ = ["WebShopData", "Session", "parse_action", "load_mini", "noun_extractor"]

_END_BUTTON, _NEXT, _PREV, _BACK = "buy now", "next >", "< prev", "back to search"


def parse_action(action: str) -> tuple[str, str | None]:
    r"""Upstream ``parse_action``: ``(name, argument)``, or ``(action, None)`` without a match.

    Equals ``re.match(r"(.+)\[(.+)\]", action)``'s groups in linear time. ``.`` stops at the
    first newline, so everything happens on the first line: both greedy groups give back the
    fewest characters, so the argument ends at the line's last ``]`` (index ``c``) and the
    name at the last ``[`` with index ``b`` in ``1 .. c - 2`` (a non-empty name and argument).
    """
    line_end = action.find("\n")
    close = action.rfind("]", 0, len(action) if line_end < 0 else line_end)
    if close < 3:  # needs a name, "[", an argument
        return action, None
    open_ = action.rfind("[", 1, close - 1)
    if open_ < 0:
        return action, None
    return action[:open_], action[open_ + 1:close]


def noun_extractor(kind: str = "auto") -> tuple[Callable[[str], Sequence[str]], str]:
    """``(nouns, label)`` for real data: spaCy's NOUN/PROPN tokens when spaCy and a model
    (``en_core_web_sm``, else ``en_core_web_lg``) load, else :func:`fallback_nouns`.
    ``kind`` = ``"auto"``, ``"spacy"`` (required) or ``"fallback"``."""
    if kind not in ("auto", "spacy", "fallback"):
        raise ValueError(f"nouns must be 'auto', 'spacy' or 'fallback', got {kind!r}")
    if kind != "fallback":
        try:
            import spacy  # optional: only for real WebShop data

            for model in ("en_core_web_sm", "en_core_web_lg"):
                try:
                    nlp = spacy.load(model)
                except OSError:
                    continue

                def spacy_nouns(text: str, _nlp=nlp) -> list[str]:
                    return [t.text.lower() for t in _nlp(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]

                return spacy_nouns, f"port+spacy:{model}"
        except ImportError:
            pass
        if kind == "spacy":
            raise ValueError("nouns='spacy' needs spaCy with en_core_web_sm or en_core_web_lg installed")
    return fallback_nouns, "port+noun-fallback"


class TitleNouns:
    """The noun list of each catalog title (stored in the catalog), :func:`fallback_nouns`
    for any other text. A class rather than a closure so the data pickles."""

    def __init__(self, table: Mapping[str, Sequence[str]]) -> None:
        self.table = dict(table)

    def __call__(self, text: str) -> Sequence[str]:
        found = self.table.get(text)
        return found if found is not None else fallback_nouns(text)


class WebShopData:
    """A catalog ready to serve: products, prices, shuffled goals, splits, the search index.

    Build with :func:`load_mini` (the shipped synthetic catalog, cached per process) or
    :meth:`from_webshop_files` (real upstream data files you have locally).
    """

    def __init__(
        self,
        products: Sequence[Mapping[str, Any]],
        goals: Sequence[Mapping[str, Any]],
        prices: Mapping[str, float],
        catalog_id: str,
        nouns: Callable[[str], Sequence[str]],
        reward_impl: str,
        show_attrs: bool = False,
        sha256: str | None = None,
    ) -> None:
        if not products:
            raise ValueError("the catalog has no products")
        self.products = list(products)
        self.by_asin = {p["asin"]: p for p in self.products}
        self.goals = list(goals)
        self.prices = dict(prices)
        self.catalog_id = catalog_id
        self.nouns = nouns
        self.reward_impl = reward_impl
        self.search_impl = SEARCH_IMPL
        self.show_attrs = bool(show_attrs)
        self.sha256 = sha256
        self.ranges = split_ranges(len(self.goals))
        self.index = BM25Index(document_text(p) for p in self.products)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_catalog_doc(cls, doc: Mapping[str, Any], sha256: str | None = None) -> "WebShopData":
        seed = int(doc.get("seed", 0))
        products = []
        for p in doc["products"]:
            p = dict(p)
            p.setdefault("Rating", "N.A.")
            p.setdefault("Reviews", [])
            products.append(p)
        nouns = TitleNouns({p["Title"]: list(p["title_nouns"]) for p in products if p.get("title_nouns") is not None})
        prices = product_prices(products, seed)
        goals = synthetic_goals(products, prices, seed)
        shuffle_goals(goals, seed)
        return cls(products, goals, prices, str(doc["catalog_id"]), nouns, "port", sha256=sha256)

    @classmethod
    def from_webshop_files(
        cls,
        items_path: str | Path,
        attributes_path: str | Path,
        human_path: str | Path | None = None,
        human_goals: bool = False,
        seed: int = 0,
        nouns: str = "auto",
        show_attrs: bool = False,
    ) -> "WebShopData":
        """Real WebShop data from local files (never downloaded): ``items_shuffle_1000.json``
        (or the full file), ``items_ins_v2_1000.json``, optionally ``items_human_ins.json``.
        Goal order is upstream's (``random.Random(233).shuffle``); prices and ``price_upper``
        come from ``seed`` (upstream leaves them to the unseeded global ``random``)."""
        def _read(path: str | Path, what: str) -> Any:
            try:
                with open(path, "rb") as f:
                    return loads_untrusted(f.read())
            except OSError as exc:
                raise ValueError(f"cannot read the WebShop {what} file {str(path)!r}: {exc.strerror or exc}") from None
            except UntrustedJSONError as exc:
                raise ValueError(f"the WebShop {what} file {str(path)!r}: {exc}") from None

        items = _read(items_path, "products")
        attrs = _read(attributes_path, "attributes")
        human = _read(human_path, "human instructions") if human_path else None
        if human_goals and human is None:
            raise ValueError("human_goals=True needs human_path (items_human_ins.json)")
        if not isinstance(items, list) or not isinstance(attrs, dict):
            raise ValueError("expected a JSON list of products and a JSON object of attributes keyed by ASIN")
        products = process_raw_products(items, attrs, human, human_goals)
        for p in products:
            p.setdefault("Rating", "N.A.")
            p.setdefault("Reviews", [])
        prices = product_prices(products, seed)
        goals = build_human_goals(products, prices, seed) if human_goals else synthetic_goals(products, prices, seed)
        shuffle_goals(goals, None)
        extractor, label = noun_extractor(nouns)
        name = "webshop-1k" if len(products) <= 1000 else "webshop-full"
        catalog_id = f"{name}-{'human' if human_goals else 'synthetic'}-n{len(products)}-seed{seed}"
        return cls(products, goals, prices, catalog_id, extractor, label, show_attrs=show_attrs)

    def __deepcopy__(self, memo: dict) -> "WebShopData":
        return self  # immutable and shared: gym.make deep-copies its kwargs

    # ------------------------------------------------------------------ queries
    @property
    def num_goals(self) -> int:
        return len(self.goals)

    def goal_index(self, seed: int, split: str) -> int:
        return goal_index_for_seed(seed, split, self.ranges)

    def split_of(self, goal_index: int) -> str:
        for name, (start, stop) in self.ranges.items():
            if start <= goal_index < stop:
                return name
        raise ValueError(f"goal index {goal_index} is outside 0..{self.num_goals - 1}")

    def search(self, keywords: Sequence[str]) -> list[Mapping[str, Any]]:
        return [self.products[i] for i in self.index.search(" ".join(keywords))]

    def score(self, asin: str, goal: Mapping[str, Any], options: Mapping[str, str]) -> tuple[float, dict[str, Any]]:
        """Upstream ``get_reward(..., verbose=True)`` of buying ``asin`` with ``options``."""
        return get_reward(self.by_asin[asin], goal, self.prices[asin], options, verbose=True, nouns=self.nouns)

    def describe(self) -> dict[str, Any]:
        return {
            "catalog_id": self.catalog_id,
            "num_products": len(self.products),
            "num_goals": self.num_goals,
            "splits": {k: list(v) for k, v in self.ranges.items()},
            "search_impl": self.search_impl,
            "reward_impl": self.reward_impl,
            "catalog_sha256": self.sha256,
        }


_CACHE: dict[str, WebShopData] = {}
_CACHE_LOCK = threading.Lock()


def load_mini(path: str | Path | None = None) -> WebShopData:
    """The mini catalog (the shipped one by default), loaded once per process and path."""
    key = str(Path(path).resolve()) if path is not None else str(DEFAULT_CATALOG_PATH)
    with _CACHE_LOCK:
        data = _CACHE.get(key)
        if data is None:
            doc, sha = read_catalog_file(key)
            try:
                data = WebShopData.from_catalog_doc(doc, sha)
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
                # a file with the format tag whose products lack fields or hold the wrong types
                raise ValueError(f"the WebShop catalog {key!r} does not hold valid products "
                                 f"({type(exc).__name__}: {str(exc)[:120]})") from None
            _CACHE[key] = data
        return data


class Session:
    """One shopper on a :class:`WebShopData`: the page state of one episode."""

    def __init__(self, data: WebShopData, goal_index: int) -> None:
        if not isinstance(goal_index, int) or isinstance(goal_index, bool) or not 0 <= goal_index < data.num_goals:
            raise ValueError(f"goal index must be an integer in 0..{data.num_goals - 1}, got {goal_index!r}")
        self.data = data
        self.goal_index = goal_index
        self.goal = data.goals[goal_index]
        self.instruction = self.goal["instruction_text"]
        self.done = False
        self.reward: float | None = None
        self.breakdown: dict[str, Any] | None = None
        self.searches: list[str] = []  # every query run this episode (the oracle reads it)
        self._to_search_page()

    # ------------------------------------------------------------------ state
    def _to_search_page(self) -> None:
        self.keywords: list[str] | None = None
        self.page: int | None = None
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.page_type = "search"
        self.sub_page: str | None = None
        self._render()

    def _render(self) -> None:
        instr = self.instruction
        if self.page_type == "search":
            self.text, self.clickables = search_page(instr)
        elif self.page_type == "results":
            hits = self.data.search(self.keywords or [])
            shown = hits[(self.page - 1) * PRODUCT_WINDOW : self.page * PRODUCT_WINDOW]
            self.text, self.clickables = results_page(instr, self.page, len(hits), shown)
        elif self.page_type == "item":
            self.text, self.clickables = item_page(instr, self.data.by_asin[self.asin], self.data.show_attrs)
        elif self.page_type == "item_sub":
            self.text, self.clickables = sub_page(instr, self.data.by_asin[self.asin], self.sub_page)
        else:
            self.text, self.clickables = done_page(self.asin, self.options, self.reward)

    def view(self) -> PageView:
        return PageView(self.text, self.page_type, self.page_type == "search", tuple(self.clickables), self.instruction)

    @property
    def instruction_text(self) -> str:
        """Upstream ``get_instruction_text()``."""
        return f"Instruction: {self.instruction}"

    # ------------------------------------------------------------------ actions
    def act(self, action: str) -> tuple[PageView, float | int, bool, dict[str, Any] | None]:
        """Run one action string; ``(page, reward, done, reward_breakdown)``.

        The reward is the int ``0`` for a no-op (as upstream's ``dict(reward=0)``), ``0.0``
        for a page change and the score on ``buy now``.
        """
        if not isinstance(action, str):
            raise TypeError(f"action must be a string, got {type(action).__name__}")
        name, arg = parse_action(action)
        if arg is not None:
            arg = arg.lower()
        if name == "search" and arg:
            self._search(arg.split(" "), 1)
        elif name == "click" and arg in self.clickables and arg != "search":
            if self._click(arg):
                return self.view(), self.reward, True, self.breakdown
        else:
            return self.view(), 0, False, None
        return self.view(), 0.0, False, None

    def _search(self, keywords: list[str], page: int) -> None:
        if page == 1:
            self.searches.append(" ".join(keywords))
        self.keywords, self.page = keywords, page
        self.asin, self.options, self.sub_page = None, {}, None
        self.page_type = "results"
        self._render()

    def _click(self, arg: str) -> bool:
        target: Clickable = self.clickables[arg]
        if arg == _END_BUTTON:
            self.reward, self.breakdown = self.data.score(self.asin, self.goal, self.options)
            self.done = True
            self.page_type = "done"
            self._render()
            return True
        if arg == _BACK:
            self._to_search_page()
        elif arg == _NEXT and self.page_type == "results":
            self._search(self.keywords, self.page + 1)
        elif arg == _PREV and self.page_type == "results":
            self._search(self.keywords, self.page - 1)
        elif arg == _PREV and self.page_type == "item_sub":
            self.page_type, self.sub_page = "item", None
            self._render()
        elif arg == _PREV and self.page_type == "item":
            self._search(self.keywords, self.page)
        elif arg in {s.lower() for s in SUB_PAGES}:
            self.page_type, self.sub_page = "item_sub", next(s for s in SUB_PAGES if s.lower() == arg)
            self._render()
        else:
            kind, value = target
            if kind == "product":
                self.asin = value
            elif kind == "option":
                self.options[value] = arg
            self.page_type = "item"
            self._render()
        return False
