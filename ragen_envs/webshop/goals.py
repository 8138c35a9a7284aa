"""Goals: WebShop's goal construction, goal order and the test / val / train splits.

Synthetic goals (upstream ``get_synthetic_goals``): every product with an instruction gives
one goal per combination of its option values. The text is the instruction, then
``" with " + ", and ".join("name: value")`` over the option names in sorted order, then
``", and price lower than {P:.2f} dollars"``, where P is the larger of two distinct draws
from the first four multiples of 10 strictly above the product's price (no clause and
``price_upper = 1000000`` with fewer than two such multiples). Weight = the mean over the
goal's attributes of 1 / (goals using that attribute).

Human goals (upstream ``get_human_goals``, real data only): ``instruction.strip('.')`` plus
the same price clause, options = the worker's option list, weight 1.

Upstream draws product prices (range prices) and ``price_upper`` from the unseeded global
``random``; here every draw comes from a generator seeded by the catalog, so goals are the
same in every process.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from typing import Any, Mapping, Sequence

from .rng import SplitMix64

__all__ = [
    "PRICE_RANGE",
    "SPLITS",
    "product_prices",
    "synthetic_goals",
    "human_goals",
    "shuffle_goals",
    "split_ranges",
    "goal_index_for_seed",
]

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
SPLITS = ("test", "val", "train")
# Upstream's conventional split (baseline_models/env.py): test 0..499, val 500..1499, train 1500+.
STANDARD_SPLITS = {"test": (0, 500), "val": (500, 1500)}
# Below this many goals the standard split would leave too few training goals: use 10/20/70 %.
MIN_GOALS_FOR_STANDARD_SPLITS = 2000


def product_prices(products: Sequence[Mapping[str, Any]], seed: int) -> dict[str, float]:
    """The price each product sells at: its single price, a uniform draw inside its range
    (seeded), or 100.0 without pricing (upstream ``generate_product_prices``)."""
    rng = SplitMix64(seed * 0x9E3779B1 + 0xA11CE)
    prices = {}
    for p in products:
        pricing = p.get("pricing") or []
        if not pricing:
            prices[p["asin"]] = 100.0
        elif len(pricing) == 1:
            prices[p["asin"]] = float(pricing[0])
        else:
            prices[p["asin"]] = rng.uniform(float(pricing[0]), float(pricing[1]))
    return prices


def _price_clause(price: float, rng: SplitMix64) -> tuple[float, str]:
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        price_upper = max(rng.sample(price_range, 2))
        return price_upper, f", and price lower than {price_upper:.2f} dollars"
    return 1000000, ""


def synthetic_goals(products: Sequence[Mapping[str, Any]], prices: Mapping[str, float], seed: int) -> list[dict[str, Any]]:
    """Upstream ``get_synthetic_goals`` (in product order, before shuffling)."""
    rng = SplitMix64(seed * 0x9E3779B1 + 0x6041)
    goals: list[dict[str, Any]] = []
    attr_counts: dict[str, int] = defaultdict(int)
    for p in products:
        if p.get("instruction_text") is None:
            continue
        attributes = list(p.get("instruction_attributes") or [])
        if not attributes:
            raise ValueError(f"product {p['asin']} has an instruction but no instruction_attributes")
        price_upper, price_text = _price_clause(prices[p["asin"]], rng)
        names = sorted(p["options"])
        for combination in itertools.product(*(p["options"][n] for n in names)):
            goal_options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append({
                "asin": p["asin"],
                "category": p["category"],
                "query": p["query"],
                "name": p["Title"],
                "product_category": p["product_category"],
                "instruction_text": f"{p['instruction_text']}{option_text}{price_text}",
                "attributes": attributes,
                "price_upper": price_upper,
                "goal_options": goal_options,
            })
            for att in attributes:
                attr_counts[att] += 1
    for g in goals:
        g["weight"] = sum(1.0 / attr_counts[a] for a in g["attributes"]) / len(g["attributes"])
    return goals


def human_goals(products: Sequence[Mapping[str, Any]], prices: Mapping[str, float], seed: int) -> list[dict[str, Any]]:
    """Upstream ``get_human_goals`` (products carry ``instructions`` from ``items_human_ins``)."""
    rng = SplitMix64(seed * 0x9E3779B1 + 0x4B4D)
    goals = []
    for p in products:
        for ins in p.get("instructions") or []:
            attributes = list(ins.get("instruction_attributes") or [])
            if not attributes:
                continue
            price_upper, price_text = _price_clause(prices[p["asin"]], rng)
            goals.append({
                "asin": p["asin"],
                "category": p["category"],
                "query": p["query"],
                "name": p["name"],
                "product_category": p["product_category"],
                "instruction_text": str(ins["instruction"]).strip(".") + price_text,
                "attributes": attributes,
                "price_upper": price_upper,
                "goal_options": list(ins.get("instruction_options") or []),
                "weight": 1,
            })
    return goals


def shuffle_goals(goals: list[dict[str, Any]], seed: int | None) -> None:
    """Fix the goal order in place.

    ``seed=None`` is upstream's order for real data: ``random.seed(233); random.shuffle``,
    i.e. ``random.Random(233).shuffle`` (same goal index -> same product and options as
    upstream, given the same product files). An int uses our own generator (the mini
    catalog: stable across Python versions).
    """
    if seed is None:
        random.Random(233).shuffle(goals)
    else:
        SplitMix64(seed * 0x9E3779B1 + 0x5A1F).shuffle(goals)


def split_ranges(n_goals: int) -> dict[str, tuple[int, int]]:
    """``{split: (start, stop)}`` goal-index ranges.

    Upstream's test 0..499 / val 500..1499 / train 1500.. when there are at least
    :data:`MIN_GOALS_FOR_STANDARD_SPLITS` goals, else the first 10 % / next 20 % / rest.
    """
    if n_goals < 3:
        raise ValueError(f"need at least 3 goals to form test/val/train splits, got {n_goals}")
    if n_goals >= MIN_GOALS_FOR_STANDARD_SPLITS:
        return {"test": (0, 500), "val": (500, 1500), "train": (1500, n_goals)}
    n_test = max(1, n_goals // 10)
    n_val = max(1, n_goals // 5)
    return {"test": (0, n_test), "val": (n_test, n_test + n_val), "train": (n_test + n_val, n_goals)}


def goal_index_for_seed(seed: int, split: str, ranges: Mapping[str, tuple[int, int]]) -> int:
    """RAGEN's seed -> goal rule: ``start + seed % size`` of the split's range (test:
    ``seed % 500``, val: ``seed % 1000 + 500``, train: ``seed % (n - 1500) + 1500``)."""
    if split not in ranges:
        raise ValueError(f"split must be one of {list(ranges)}, got {split!r}")
    start, stop = ranges[split]
    return start + seed % (stop - start)
