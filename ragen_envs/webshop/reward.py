"""WebShop's purchase reward, ported (upstream ``web_agent_site/engine/goal.py``).

For the bought product ``p`` at price ``price`` with the selected option values, and the
goal ``g`` (``attributes``, ``goal_options``, ``price_upper``, ``query``, ``product_category``,
``name``)::

    R = r_type * (n_attr + n_option + r_price) / (|g.attributes| + |g.goal_options| + 1)

- ``n_attr``: goal attributes matched by a product attribute with ``token_set_ratio > 85``,
  else found as a plain substring of the lower-cased Title, the joined BulletPoints or the
  Description.
- ``n_option``: goal options matched (``> 85``) by some selected value, both sides passed
  through :func:`normalize_color` first.
- ``r_price``: ``price <= price_upper`` (a bool, counted as 0 or 1).
- ``r_type``: 1.0; 0.5 unless (same ``query`` or >= 2 shared ``product_category`` parts or
  ``title_score > 0.2``); 0.1 if ``title_score < 0.1``; 0.0 if ``title_score == 0``, where
  ``title_score`` = |nouns(p.name) ∩ nouns(g.name)| / len(nouns(g.name)) (0.2 when the goal
  name has no noun).

Quirks kept on purpose (they decide whether a run is comparable with published numbers):

1. Fuzzy scores are ``int(round(score))`` (Python's round-half-even) and the test is ``> 85``.
2. token-set subset => 100: "large" matches "x-large", "blue" matches "navy blue".
3. Synthetic goals pass ``goal_options.items()``: each goal option is a ``(name, value)``
   tuple; :func:`normalize_color` on a tuple is only a membership test, and the fuzzy matcher
   stringifies the tuple (``"('size', 'x-large')"`` -> ``"size    x large"``).
4. :func:`normalize_color` returns the first entry of :data:`COLOR_SET` (list order) that is a
   substring: "light blue" -> "blue", "dark grey" -> "dark".
5. ``title_score`` divides by the goal's noun *list* (repeated nouns count twice) and
   intersects *sets*.

Upstream tags nouns with spaCy (``NOUN``/``PROPN``). Here the noun extractor is a parameter:
the mini catalog stores each title's nouns (``title_nouns``), real data uses spaCy when it is
installed with a model, else :func:`fallback_nouns` (recorded as ``reward_impl``).

The fuzzy matcher is thefuzz 0.22's ``token_set_ratio`` (rapidfuzz underneath): process both
strings (``str()``, drop characters 128-255, lower-case, non-alphanumerics to spaces,
strip), split into token sets, and take the best Indel ratio ``100 - 100 * dist / lensum``
of the sorted intersection against intersection + each difference and of the two
differences.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "COLOR_SET",
    "normalize_color",
    "full_process",
    "token_set_ratio",
    "fallback_nouns",
    "get_type_reward",
    "get_attribute_reward",
    "get_option_reward",
    "get_reward",
]

# Upstream web_agent_site/engine/normalize.py, in its order (the order matters: quirk 4).
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure",
    "banana", "beige", "black", "blue", "blush", "bordeaux", "bronze",
    "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
    "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark",
    "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
    "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac",
    "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
    "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)

# thefuzz's force_ascii removes the Latin-1 range only (chars 128..255).
_LATIN1 = {i: None for i in range(128, 256)}
# Upstream splits product_category on this character (U+203A).
CATEGORY_SEP = "\u203a"

Nouns = Callable[[str], Sequence[str]]


def normalize_color(value: Any) -> Any:
    """The first :data:`COLOR_SET` entry found ``in`` ``value``, else ``value`` unchanged.

    For a string that is a substring test; for a tuple (a synthetic goal option) it is a
    membership test, exactly as upstream.
    """
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def full_process(value: Any) -> str:
    """thefuzz ``full_process(str(value), force_ascii=True)``."""
    text = str(value).translate(_LATIN1).lower()
    return "".join(c if c.isalnum() else " " for c in text).strip()


def _lcs_length(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _norm_distance(dist: int, lensum: int) -> float:
    return 100 - 100 * dist / lensum if lensum else 100.0


def token_set_ratio(a: Any, b: Any) -> int:
    """thefuzz 0.22 ``fuzz.token_set_ratio(a, b)``: an int in 0..100."""
    if a is None or b is None:
        return 0
    tokens_a = set(full_process(a).split())
    tokens_b = set(full_process(b).split())
    if not tokens_a or not tokens_b:
        return 0
    inter = tokens_a & tokens_b
    diff_ab = tokens_a - tokens_b
    diff_ba = tokens_b - tokens_a
    if inter and (not diff_ab or not diff_ba):
        return 100
    ab = " ".join(sorted(diff_ab))
    ba = " ".join(sorted(diff_ba))
    sect_len = len(" ".join(sorted(inter)))
    sep = 1 if sect_len else 0
    sect_ab_len = sect_len + sep + len(ab)
    sect_ba_len = sect_len + sep + len(ba)
    dist = len(ab) + len(ba) - 2 * _lcs_length(ab, ba)
    score = _norm_distance(dist, sect_ab_len + sect_ba_len)
    if sect_len:
        score = max(
            score,
            _norm_distance(sep + len(ab), sect_len + sect_ab_len),
            _norm_distance(sep + len(ba), sect_len + sect_ba_len),
        )
    return int(round(score))


# Words a title uses that are not nouns: the fallback tagger drops these and keeps the rest.
_NOT_NOUNS = frozenset(
    """a an the and or for with of in on to by from at as is are be this that these those it its
    your our my his her their new free easy long short high low extra super ultra soft hard
    small large big mini full light dark heavy natural organic fresh pure premium classic
    slim loose casual formal warm cool cold hot dry wet quick fast slow best great good
    non anti multi made waterproof portable wireless adjustable durable comfortable
    lightweight compact reusable washable breathable stretchy cute elegant modern vintage
    x xl xxl s m l men mens women womens womens' men's women's unisex kids girls boys""".split()
)


def fallback_nouns(text: str) -> list[str]:
    """A tagger-free stand-in for spaCy's NOUN/PROPN tokens: alphabetic words of 2+ letters
    that are not on a short list of adjectives, determiners and prepositions (lower-cased,
    in order, repeats kept)."""
    words = "".join(c.lower() if c.isalpha() or c == "'" else " " for c in str(text)).split()
    return [w for w in words if len(w) > 1 and w.isalpha() and w not in _NOT_NOUNS]


def get_type_reward(purchased: Mapping[str, Any], goal: Mapping[str, Any], nouns: Nouns = fallback_nouns) -> dict[str, Any]:
    """``r_type`` with its parts: ``query_match``, ``category_match``, ``title_score``."""
    query_match = purchased["query"] == goal["query"]
    p_cat = {x.strip() for x in purchased["product_category"].split(CATEGORY_SEP)}
    g_cat = {x.strip() for x in goal["product_category"].split(CATEGORY_SEP)}
    category_match = len(p_cat & g_cat) >= 2
    p_nouns = list(nouns(purchased["name"]))
    g_nouns = list(nouns(goal["name"]))
    if not g_nouns:
        title_score = 0.2
    else:
        title_score = len(set(p_nouns) & set(g_nouns)) / len(g_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def get_attribute_reward(purchased: Mapping[str, Any], goal: Mapping[str, Any]) -> tuple[float, int]:
    """``(r_attr, num_attr_matches)``: fuzzy against the product's attributes, then substring
    of Title / joined BulletPoints / Description."""
    goal_attrs = goal["attributes"]
    matches = 0
    for g_attr in goal_attrs:
        matched = any(token_set_ratio(p_attr, g_attr) > 85 for p_attr in purchased["Attributes"])
        if not matched and (
            g_attr in purchased["Title"].lower()
            or g_attr in " ".join(purchased["BulletPoints"]).lower()
            or g_attr in purchased["Description"].lower()
        ):
            matched = True
        matches += matched
    return matches / len(goal_attrs), matches


def get_option_reward(purchased_options: Iterable[Any], goal_options: Iterable[Any]) -> tuple[float | None, int]:
    """``(r_option, num_option_matches)``; ``r_option`` is None without goal options."""
    purchased = [normalize_color(o) for o in purchased_options]
    wanted = [normalize_color(o) for o in goal_options]
    matches = 0
    for g_option in wanted:
        for p_option in purchased:
            if token_set_ratio(p_option, g_option) > 85:
                matches += 1
                break
    return (matches / len(wanted) if wanted else None), matches


def get_reward(
    purchased: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
    verbose: bool = False,
    nouns: Nouns = fallback_nouns,
) -> float | tuple[float, dict[str, Any]]:
    """The score R in [0, 1] of buying ``purchased`` at ``price`` with ``options`` selected.

    ``goal["goal_options"]`` is a dict (synthetic goals: its ``.items()`` are matched, quirk
    3) or a list of strings (human goals). With ``verbose`` returns ``(R, breakdown)`` with
    upstream's keys: ``r_type, r_att, w_att, query_match, category_match, title_score`` and,
    when defined, ``r_option, w_option, r_price, w_price``.
    """
    type_info = get_type_reward(purchased, goal, nouns)
    r_price = (price <= goal["price_upper"]) if goal["price_upper"] > 0 else None
    r_att, n_attr = get_attribute_reward(purchased, goal)
    goal_options = goal["goal_options"]
    r_option, n_option = get_option_reward(
        list(options.values()), goal_options.items() if isinstance(goal_options, dict) else goal_options
    )
    denominator = len(goal["attributes"]) + len(goal_options) + 1
    total = (n_attr + n_option + (r_price or 0)) / denominator
    total *= type_info["r_type"]
    if not verbose:
        return total
    info: dict[str, Any] = {
        "r_type": type_info["r_type"],
        "r_att": r_att,
        "w_att": len(goal["attributes"]) / denominator,
        "query_match": type_info["query_match"],
        "category_match": type_info["category_match"],
        "title_score": type_info["title_score"],
    }
    if r_option is not None:
        info["r_option"] = r_option
        info["w_option"] = len(goal_options) / denominator
    if r_price is not None:
        info["r_price"] = bool(r_price)
        info["w_price"] = 1 / denominator
    return total, info
