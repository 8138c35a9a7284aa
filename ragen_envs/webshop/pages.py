"""WebShop's pages in its ``text`` observation mode, and their clickables.

Upstream renders Jinja templates to HTML, then joins the visible text nodes with
``" [SEP] "`` and reads the clickables (buttons, product links, option radios) back out of
the HTML. The mini engine builds the same strings and clickable lists directly:

| page | text | clickables, in order |
|---|---|---|
| search | ``WebShop [SEP] Instruction: [SEP] <instr> [SEP] Search`` | ``search`` |
| results | ``Instruction: [SEP] <instr> [SEP] Back to Search [SEP] Page p (Total results: n) [SEP] [< Prev [SEP]] Next > [SEP] <ASIN> [SEP] <Title> [SEP] <Price> ...`` | ``back to search``, ``< prev`` (page > 1), ``next >`` (always), the ASINs lower-cased |
| item | ``Instruction: [SEP] <instr> [SEP] Back to Search [SEP] < Prev [SEP] <option name> [SEP] <value> ... [SEP] <Title> [SEP] Price: <Price> [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now`` | ``back to search``, ``< prev``, ``description``, ``features``, ``reviews``, (``attributes``), ``buy now``, the option values (a value in two groups appears once and selects the later group) |
| item_sub | ``Instruction: [SEP] <instr> [SEP] Back to Search [SEP] < Prev [SEP] <description, one segment per feature bullet, or nothing for reviews>`` | ``back to search``, ``< prev`` |
| done | ``Thank you for shopping with us! [SEP] Your code: [SEP] ... [SEP] Your score (min 0.0, max 1.0) [SEP] <score> ...`` | none |

The done page follows upstream's template including its ``display:none`` block (upstream's
visibility filter only looks at tag names), with the values the text env passes to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = [
    "PAGE_TYPES",
    "PRODUCT_WINDOW",
    "PageView",
    "Clickable",
    "search_page",
    "results_page",
    "item_page",
    "sub_page",
    "done_page",
    "available_actions",
    "infer_page_type",
    "SUB_PAGES",
]

SEP = " [SEP] "
PAGE_TYPES = ("search", "results", "item", "item_sub", "done")
PRODUCT_WINDOW = 10
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")


@dataclass(frozen=True)
class PageView:
    """What a backend shows: the page text, its type and clickables, and the instruction."""

    text: str
    page_type: str
    has_search_bar: bool
    clickables: tuple[str, ...]
    instruction: str

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "page_type": self.page_type,
            "has_search_bar": self.has_search_bar,
            "clickables": list(self.clickables),
            "instruction": self.instruction,
        }


# A clickable's target: ("button", label) | ("product", ASIN) | ("option", option name)
Clickable = tuple[str, str]


def _join(parts: Sequence[str]) -> str:
    return SEP.join(s for s in (p.strip() for p in parts) if s)


def search_page(instruction: str) -> tuple[str, dict[str, Clickable]]:
    return _join(["WebShop", "Instruction:", instruction, "Search"]), {"search": ("button", "Search")}


def results_page(
    instruction: str, page: int, total: int, products: Sequence[Mapping[str, Any]]
) -> tuple[str, dict[str, Clickable]]:
    parts = ["Instruction:", instruction, "Back to Search", f"Page {page} (Total results: {total})"]
    clickables: dict[str, Clickable] = {"back to search": ("button", "Back to Search")}
    if page > 1:
        parts.append("< Prev")
        clickables["< prev"] = ("button", "< Prev")
    parts.append("Next >")
    clickables["next >"] = ("button", "Next >")
    for p in products:
        parts += [p["asin"], p["Title"], p["Price"]]
        clickables[p["asin"].lower()] = ("product", p["asin"])
    return _join(parts), clickables


def item_page(instruction: str, product: Mapping[str, Any], show_attrs: bool = False) -> tuple[str, dict[str, Clickable]]:
    parts = ["Instruction:", instruction, "Back to Search", "< Prev"]
    option_clicks: dict[str, Clickable] = {}
    for name, values in product["options"].items():
        parts.append(name)
        for value in values:
            parts.append(value)
            option_clicks[value] = ("option", name)
    parts += [product["Title"], f"Price: {product['Price']}", f"Rating: {product.get('Rating', 'N.A.')}"]
    buttons = ["Back to Search", "< Prev", "Description", "Features", "Reviews"] + (["Attributes"] if show_attrs else []) + ["Buy Now"]
    parts += buttons[2:]
    clickables: dict[str, Clickable] = {b.lower(): ("button", b) for b in buttons}
    clickables.update(option_clicks)  # a value equal to a button label takes the button's place
    return _join(parts), clickables


def sub_page(instruction: str, product: Mapping[str, Any], which: str) -> tuple[str, dict[str, Clickable]]:
    parts = ["Instruction:", instruction, "Back to Search", "< Prev"]
    if which == "Description":
        parts.append(product.get("Description") or "")
    elif which == "Features":
        parts += list(product.get("BulletPoints") or [])
    elif which == "Reviews":
        for review in product.get("Reviews") or []:
            parts += [str(review.get("title", "")), str(review.get("score", "")), str(review.get("body", ""))]
    elif which == "Attributes":
        parts += list(product.get("Attributes") or [])
    else:
        raise ValueError(f"unknown item sub-page {which!r}; known: {SUB_PAGES}")
    return _join(parts), {"back to search": ("button", "Back to Search"), "< prev": ("button", "< Prev")}


def done_page(asin: str, options: Mapping[str, str], reward: float) -> tuple[str, dict[str, Clickable]]:
    parts = [
        "Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
        "Purchased", "asin", asin, "options", json.dumps(dict(options)),
        "attrs", "None", "category", "None", "query", "None", "product category", "None",
        "Target", "asin", "options", "attrs", "price upper", "instuction text", "category",
        "product category", "query", "Goal", "None", "Reward",
        "Your score (min 0.0, max 1.0)", str(reward), "Reward Details", "None",
    ]
    return _join(parts), {}


def available_actions(has_search_bar: bool, clickables: Sequence[str]) -> list[str]:
    """RAGEN's action list: ``search[<content>]`` with a search bar, ``click[x]`` for every
    clickable but ``search``; ``click[next >]`` is dropped on a results page past the end
    (when the list is exactly back / prev / next)."""
    actions = ["search[<content>]"] if has_search_bar else []
    actions += [f"click[{c}]" for c in clickables if c != "search"]
    if tuple(actions) == ("click[back to search]", "click[< prev]", "click[next >]"):
        actions.remove("click[next >]")
    return actions


def infer_page_type(text: str) -> str:
    """The page type of an observation text (for servers that only send text)."""
    if text.startswith("WebShop [SEP] Instruction:"):
        return "search"
    if text.startswith("Thank you for shopping"):
        return "done"
    if "[SEP] Page " in text and "(Total results: " in text:
        return "results"
    if text.endswith("Buy Now"):
        return "item"
    return "item_sub"
