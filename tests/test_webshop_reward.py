"""The WebShop reward port: upstream's own test numbers (tests/web-agent-site/engine/test_goal.py)
and the documented quirks. spaCy's noun tags are replaced by hand-given noun lists."""

from __future__ import annotations

import random
from math import isclose

import pytest

from ragen_envs.webshop.reward import (
    COLOR_SET,
    fallback_nouns,
    full_process,
    get_attribute_reward,
    get_option_reward,
    get_reward,
    get_type_reward,
    normalize_color,
    token_set_ratio,
)

# Noun lists standing in for spaCy en_core_web_sm on upstream's test names.
NOUNS = {
    "Name 1": ["name"],
    "adidas Unisex-Adult D.o.n. Issue 2 Basketball Shoe": ["adidas", "unisex", "adult", "d.o.n.", "issue", "basketball", "shoe"],
    "adidas Unisex-Adult D.o.n. Issue 2 Indoor Court Shoe": ["adidas", "unisex", "adult", "d.o.n.", "issue", "court", "shoe"],
    # goal with 13 nouns (4 shared) -> 0.31; goal with 6 nouns (1 shared) -> 0.17
    "Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar Home Theater System Subwoofer":
        ["saireed", "ul", "prong", "power", "cord", "jbl", "bar", "bar", "channel", "hd", "theater", "system", "subwoofer"],
    "Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar": ["saireed", "prong", "cord", "bar", "bar", "channel"],
    "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater System":
        ["brst", "ac", "power", "cord", "outlet", "socket", "cable", "plug", "lead", "panasonic", "combo", "home", "theater", "system"],
    "Rusticware 921ORB Kitchen and Bath Cabinet Knob": ["rusticware", "kitchen", "bath", "cabinet", "knob"],
    "Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover Portable Makeup Tweezers (Silver)":
        ["minkissy", "steel", "eyebrow", "tweezers", "blackhead", "acne", "remover", "makeup", "tweezers", "silver"],
    "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White": ["mens", "d.o.n.", "issue", "gca", "basketball", "sneakers", "shoes"],
}
nouns = NOUNS.__getitem__


def test_type_reward_upstream_cases():
    goal = {"query": "Query 1", "product_category": "a › b › c", "name": "Name 1"}
    bought = {"query": "Query 1", "product_category": "a › b › c", "name": "Name 1"}
    r = get_type_reward(bought, goal, nouns)
    assert r == {"r_type": 1.0, "query_match": True, "category_match": True, "title_score": 1.0}
    bought["query"] = "Query 2"
    assert get_type_reward(bought, goal, nouns)["query_match"] is False
    for cat, match in [("b › c › a", True), ("d › e › f", False), ("a › d › b", True), ("a › a › b", True), ("a › a › d", False)]:
        bought["product_category"] = cat
        assert get_type_reward(bought, goal, nouns)["category_match"] is match, cat
    cases = [
        ("adidas Unisex-Adult D.o.n. Issue 2 Basketball Shoe", "adidas Unisex-Adult D.o.n. Issue 2 Indoor Court Shoe", 0.85),
        ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar Home Theater System Subwoofer",
         "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater System", 0.31),
        ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar",
         "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater System", 0.17),
    ]
    for goal_name, bought_name, expected in cases:
        goal["name"], bought["name"] = goal_name, bought_name
        assert isclose(get_type_reward(bought, goal, nouns)["title_score"], expected, abs_tol=1e-2)
    goal["name"] = "Rusticware 921ORB Kitchen and Bath Cabinet Knob"
    bought["name"] = "Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover Portable Makeup Tweezers (Silver)"
    assert get_type_reward(bought, goal, nouns)["title_score"] < 0.05


def test_type_reward_thresholds():
    goal = {"query": "q", "product_category": "a › b", "name": "g"}
    bought = {"query": "other", "product_category": "x › y", "name": "p"}
    def r_type(p_nouns, g_nouns):
        table = {"p": p_nouns, "g": g_nouns}
        return get_type_reward(bought, goal, table.__getitem__)["r_type"]
    assert r_type(["a"], []) == 0.5  # no goal noun -> title_score 0.2, no other match
    assert r_type(["a"], ["b"]) == 0.0
    assert r_type(["a"], ["a"] + ["z"] * 10) == 0.1  # 1/11 < 0.1
    assert r_type(["a"], ["a"] + ["z"] * 4) == 0.5  # 0.2: not > 0.2
    assert r_type(["a", "b"], ["a", "b", "z"]) == 1.0


def test_attribute_reward_upstream_cases():
    goal = {"attributes": ["tea tree", "essential oils", "natural ingredients"]}
    assert get_attribute_reward({"Attributes": ["tea tree", "essential oil", "natural ingredients"]}, goal) == (1, 3)
    bought = {"Attributes": ["essential oil", "natural ingredients"], "Title": "", "BulletPoints": [], "Description": ""}
    assert get_attribute_reward(bought, goal) == (2 / 3, 2)
    bought = {"Attributes": [], "Title": "", "BulletPoints": ["This shampoo has essential oils and smells like lemons"],
              "Description": "Best shampoo on the market, made with natural ingredients"}
    assert get_attribute_reward(bought, goal) == (2 / 3, 2)
    bought = {"Attributes": ["tea bag", "earl gray", "lipton"], "Title": "English tea for breakfast",
              "BulletPoints": ["Soothing aroma", "Calming, great feeling"],
              "Description": "Best tea made by Lipton, great to pair with breakfast"}
    assert get_attribute_reward(bought, goal) == (0, 0)


def test_option_reward_upstream_cases():
    assert get_option_reward(["pack of 12", "grey", "XL"], ["grey", "XL", "pack of 12"]) == (1, 3)
    assert get_option_reward(["pack of 12", "blue", "XL"], ["grey", "XL", "pack of 12"]) == (2 / 3, 2)
    assert get_option_reward(["pack of 12", "powder snow", "XL"], ["cool powder snow", "XL", "pack of 12"]) == (1, 3)
    assert get_option_reward(["goal 1", "goal 2"], []) == (None, 0)
    assert get_option_reward([], ["goal 1", "goal 2"]) == (0, 0)


def test_total_reward_upstream_cases():
    goal = {"query": "Query 1", "product_category": "a › b › c",
            "name": "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White",
            "attributes": ["tea tree", "essential oils", "natural ingredients"],
            "goal_options": {"color": "grey", "size": "XL"}, "price_upper": 40.00}
    bought = {"query": "Query 1", "product_category": "a › b › c", "name": goal["name"],
              "Attributes": ["tea tree", "essential oil", "natural ingredients"], "Title": "", "BulletPoints": [],
              "Description": ""}
    options = {"color": "grey", "size": "XL"}
    assert get_reward(bought, goal, 35, options, nouns=nouns) == 1
    bought.update(Attributes=[], Title="", BulletPoints="This shampoo has essential oils and smells like lemons",
                  Description="Best shampoo on the market, made with natural ingredients")
    assert isclose(get_reward(bought, goal, 35, options, nouns=nouns), 2 / 3, abs_tol=1e-2)
    goal["goal_options"] = {"color": "grey", "size": "XL", "amount": "pack of 12"}
    assert isclose(get_reward(bought, goal, 35, options, nouns=nouns), 0.5714, abs_tol=1e-2)
    goal["name"] = "Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar"
    bought.update(name="BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater System",
                  query="Query 2", product_category="a › d › e")
    total, info = get_reward(bought, goal, 35, options, verbose=True, nouns=nouns)
    assert isclose(total, 0.2857, abs_tol=1e-2)
    assert list(info) == ["r_type", "r_att", "w_att", "query_match", "category_match", "title_score",
                          "r_option", "w_option", "r_price", "w_price"]
    assert info["r_type"] == 0.5 and info["r_price"] is True and isclose(info["w_price"], 1 / 7)


def test_exact_success_is_exactly_one_and_price_counts():
    goal = {"query": "q", "product_category": "a › b", "name": "n", "attributes": ["x y"],
            "goal_options": {"size": "large"}, "price_upper": 20.0}
    bought = {"query": "q", "product_category": "a › b", "name": "n", "Attributes": ["x y"], "Title": "",
              "BulletPoints": [], "Description": ""}
    table = {"n": ["n"]}.__getitem__
    assert get_reward(bought, goal, 20.0, {"size": "large"}, nouns=table) == 1.0
    assert get_reward(bought, goal, 20.01, {"size": "large"}, nouns=table) == 2 / 3


# ------------------------------------------------------------------ quirks
def test_quirk_subset_tokens_score_100():
    assert token_set_ratio("large", "x-large") == 100
    assert token_set_ratio("x-large", "large") == 100
    assert token_set_ratio("blue", "navy blue") == 100
    assert token_set_ratio("powder snow", "cool powder snow") == 100


def test_quirk_tuple_goal_options_are_stringified():
    # a synthetic goal option is a (name, value) tuple: "('size', 'x-large')" -> "size    x large"
    assert full_process(("size", "x-large")) == "size    x large"
    assert normalize_color(("size", "x-large")) == ("size", "x-large")
    # so a bought "large" matches the goal "size: x-large" ...
    assert get_option_reward(["large"], {"size": "x-large"}.items()) == (1, 1)
    # ... but a bought "x-large" does not match "size: large" (83 < 86)
    assert token_set_ratio("x-large", ("size", "large")) == 83
    assert get_option_reward(["x-large"], {"size": "large"}.items()) == (0, 0)
    # a tuple whose value is a colour is only a membership test: it becomes that colour
    assert normalize_color(("color", "black")) == "black"
    assert normalize_color(("color", "light blue")) == ("color", "light blue")


def test_quirk_color_set_order():
    assert len(COLOR_SET) == 102
    assert normalize_color("light blue") == "blue"  # "blue" precedes "light"
    assert normalize_color("dark grey") == "dark"  # "dark" precedes "grey"
    assert normalize_color("dark wash") == "ash"  # a substring, not a word
    assert normalize_color("coconut") == "coconut"


def test_quirk_rounding_at_the_85_86_boundary():
    # "pack of 2" vs "pack of 12" under the tuple: 87.5 rounds to 88 -> a match
    assert token_set_ratio("pack of 2", ("size", "pack of 12")) == 88
    assert token_set_ratio("pack of 12", ("size", "pack of 2")) == 82
    # round half to even, like Python's round in thefuzz: 85.5 -> 86 would match, 84.5 -> 84
    assert int(round(85.5)) == 86 and int(round(84.5)) == 84
    a, b = "abcdefghijklmnopqrs", "abcdefghijklmnopqrsxyz"  # 2*19/41 = 92.68
    assert token_set_ratio(a, b) == 93


def test_token_set_ratio_edge_cases():
    assert token_set_ratio("", "anything") == 0
    assert token_set_ratio(None, "x") == 0
    assert token_set_ratio("Tea-Tree!", "tea tree") == 100
    assert token_set_ratio("café", "caf") == 100  # é (Latin-1) is dropped by force_ascii
    assert token_set_ratio("abc", "xyz") == 0


def test_fallback_nouns_keeps_order_and_repeats():
    assert fallback_nouns("Bar 3.1 Bar Soundbar for the Home") == ["bar", "bar", "soundbar", "home"]
    assert fallback_nouns("Women's Running Shoes, Pack of 2") == ["running", "shoes", "pack"]


def test_matches_thefuzz_when_installed():
    fuzz = pytest.importorskip("thefuzz.fuzz")
    rng = random.Random(0)
    words = ["blue", "navy", "large", "x-large", "size", "pack", "of", "12", "2", "tea", "tree", "oil", "oils",
             "dark", "grey", "3.4", "fl", "oz", "a", "ab", "abc", "bca", "café", "_x_"]
    for _ in range(20000):
        a = " ".join(rng.choice(words) for _ in range(rng.randint(0, 5)))
        b = " ".join(rng.choice(words) for _ in range(rng.randint(0, 5)))
        if rng.random() < 0.3:
            b = (rng.choice(words), b)
        assert token_set_ratio(a, b) == fuzz.token_set_ratio(a, b), (a, b)
