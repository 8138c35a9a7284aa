"""The mini catalog (determinism, checksum, shape), goal construction, splits, and the
loader for real WebShop data files."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import string

import pytest

from ragen_envs.webshop.catalog import (
    DEFAULT_CATALOG_PATH,
    DEFAULT_CATALOG_SHA256,
    catalog_bytes,
    generate_catalog,
    read_catalog_file,
    write_catalog_file,
)
from ragen_envs.webshop.engine import WebShopData, load_mini
from ragen_envs.webshop.goals import PRICE_RANGE, goal_index_for_seed, split_ranges
from ragen_envs.webshop.rng import SplitMix64
from ragen_envs.webshop.vocab import CATEGORIES, PRODUCT_TYPES


@pytest.fixture(scope="module")
def data():
    return load_mini()


def test_shipped_catalog_regenerates_byte_for_byte():
    doc = generate_catalog(0, 1000)
    assert hashlib.sha256(catalog_bytes(doc)).hexdigest() == DEFAULT_CATALOG_SHA256
    shipped, sha = read_catalog_file(DEFAULT_CATALOG_PATH)
    assert sha == DEFAULT_CATALOG_SHA256
    assert shipped == json.loads(catalog_bytes(doc))


def test_generation_is_deterministic_and_seeded(tmp_path):
    a, b = generate_catalog(3, 200), generate_catalog(3, 200)
    assert catalog_bytes(a) == catalog_bytes(b)
    assert catalog_bytes(a) != catalog_bytes(generate_catalog(4, 200))
    # the gzip file itself is reproducible (fixed mtime, no file name)
    sha1 = write_catalog_file(a, tmp_path / "x.json.gz")
    sha2 = write_catalog_file(b, tmp_path / "y.json.gz")
    assert sha1 == sha2 and (tmp_path / "x.json.gz").read_bytes() == (tmp_path / "y.json.gz").read_bytes()


def test_splitmix64_reference_values():
    # SplitMix64 from seed 0: the published first outputs
    rng = SplitMix64(0)
    assert [rng.next_u64() for _ in range(3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_catalog_shape(data):
    products = data.products
    assert len(products) == 1000 and len(PRODUCT_TYPES) == 42
    assert {p["category"] for p in products} == set(CATEGORIES)
    assert len({p["query"] for p in products}) == 42
    asins = [p["asin"] for p in products]
    assert len(set(asins)) == 1000 and all(re.fullmatch(r"B0[A-Z0-9]{8}", a) for a in asins)
    printable = set(string.printable)
    for p in products:
        shown = [p["Title"], p["Description"], p["Price"], *p["BulletPoints"], *p["options"], *(v for vs in p["options"].values() for v in vs)]
        assert all(set(s) <= printable for s in shown), p["asin"]
        assert all(v == v.lower() for vs in p["options"].values() for v in vs)
        assert 3 <= len(p["Attributes"]) <= 6 and p["Rating"] == "N.A." and p["Reviews"] == []
        assert p["Price"] == (f"${p['pricing'][0]}" if len(p["pricing"]) == 1 else f"${p['pricing'][0]} to ${p['pricing'][1]}")
        assert len(p["product_category"].split(" › ")) >= 3
    ranged = [p for p in products if len(p["pricing"]) == 2]
    assert 50 < len(ranged) < 150
    for p in ranged:
        assert p["pricing"][0] <= data.prices[p["asin"]] <= p["pricing"][1]


def test_goal_construction_follows_upstream(data):
    by_asin = data.by_asin
    assert data.num_goals == 2266
    for g in data.goals:
        p = by_asin[g["asin"]]
        names = sorted(p["options"])
        assert list(g["goal_options"]) == names
        option_text = ", and ".join(f"{k}: {g['goal_options'][k]}" for k in names)
        price = data.prices[p["asin"]]
        decades = [x for x in PRICE_RANGE if x > price][:4]
        assert g["price_upper"] in decades[1:]  # the larger of two distinct draws of the first four
        expected = p["instruction_text"] + (f" with {option_text}" if option_text else "") \
            + f", and price lower than {g['price_upper']:.2f} dollars"
        assert g["instruction_text"] == expected
        assert g["attributes"] == p["instruction_attributes"] and set(g["attributes"]) <= set(p["Attributes"])
        assert g["name"] == p["Title"] and g["query"] == p["query"]
    # one goal per option combination, one price_upper per product
    per_product = {}
    for g in data.goals:
        per_product.setdefault(g["asin"], set()).add(g["price_upper"])
    assert all(len(v) == 1 for v in per_product.values())
    for asin in list(per_product)[:50]:
        p = by_asin[asin]
        n = 1
        for values in p["options"].values():
            n *= len(values)
        assert sum(g["asin"] == asin for g in data.goals) == n
    counts = {}
    for g in data.goals:
        for a in g["attributes"]:
            counts[a] = counts.get(a, 0) + 1
    g = data.goals[0]
    assert g["weight"] == pytest.approx(sum(1 / counts[a] for a in g["attributes"]) / len(g["attributes"]))


def test_every_goal_is_achievable_with_score_one(data):
    bad = [i for i, g in enumerate(data.goals) if data.score(g["asin"], g, g["goal_options"])[0] != 1.0]
    assert bad == []


def test_standard_and_proportional_splits():
    assert split_ranges(2266) == {"test": (0, 500), "val": (500, 1500), "train": (1500, 2266)}
    assert split_ranges(1000) == {"test": (0, 100), "val": (100, 300), "train": (300, 1000)}
    with pytest.raises(ValueError, match="at least 3 goals"):
        split_ranges(2)
    r = split_ranges(2266)
    # RAGEN: test seed % 500, val seed % 1000 + 500, train seed % (n - 1500) + 1500
    for seed in (0, 123, 499, 500, 1234, 10**9 + 7):
        assert goal_index_for_seed(seed, "test", r) == seed % 500
        assert goal_index_for_seed(seed, "val", r) == seed % 1000 + 500
        assert goal_index_for_seed(seed, "train", r) == seed % (2266 - 1500) + 1500
    with pytest.raises(ValueError, match="split must be one of"):
        goal_index_for_seed(1, "dev", r)


def test_catalog_file_errors(tmp_path):
    with pytest.raises(ValueError, match="cannot read the WebShop catalog"):
        read_catalog_file(tmp_path / "missing.json.gz")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_catalog_file(bad)
    other = tmp_path / "other.json"
    other.write_text('{"products": []}')
    with pytest.raises(ValueError, match="is not a ragen-webshop-catalog-1 catalog file"):
        read_catalog_file(other)
    with pytest.raises(ValueError, match="n_products"):
        generate_catalog(0, 5)


def test_small_catalog_gets_proportional_splits(tmp_path):
    path = tmp_path / "small.json.gz"
    write_catalog_file(generate_catalog(7, 120), path)
    small = load_mini(path)
    assert small.catalog_id == "mini-v1-seed7-n120"
    n = small.num_goals
    assert n < 2000 and small.ranges["test"] == (0, n // 10)


# ------------------------------------------------------------------ real WebShop data files
RAW_ITEMS = [
    {"asin": "B000000001", "name": "Café Crème Shampoo for Dry Hair", "full_description": "A gentle shampoo.",
     "small_description": ["Sulfate free formula", "Smells like lemons"], "pricing": "$12.50",
     "customization_options": {"Size": [{"value": "8 Fl Oz", "image": None}, {"value": "16 fl oz/1 pack", "image": None}],
                               "Scent": None},
     "category": "beauty", "query": "Shampoo ", "product_category": "Beauty › Hair Care › Shampoo", "images": ["x"]},
    {"asin": "B000000002", "name": "Plain Soap", "full_description": "", "small_description": "Just soap",
     "pricing": "$3.00 - $5.00", "customization_options": {}, "category": "beauty", "query": "soap",
     "product_category": "Beauty › Bath › Soap", "images": ["y"]},
    {"asin": "B000000002", "name": "duplicate is skipped", "customization_options": {}},
    {"asin": "nan", "name": "bad asin is skipped"},
    {"asin": "B000000003", "name": "Tea Tree Conditioner", "full_description": "Conditioner with tea tree.",
     "small_description": ["Tea tree oil"], "pricing": "", "customization_options": {},
     "category": "beauty", "query": "conditioner", "product_category": "Beauty › Hair Care › Conditioner", "images": ["z"]},
]
RAW_ATTRS = {
    "B000000001": {"attributes": ["sulfate free", "dry hair"], "instruction": "i need a sulfate free shampoo for dry hair",
                   "instruction_attributes": ["sulfate free", "dry hair"]},
    "B000000002": {"attributes": ["gentle"], "instruction": "find me a plain soap", "instruction_attributes": ["plain"]},
    "B000000003": {"instruction": "tea tree conditioner please", "instruction_attributes": ["tea tree"]},
}


def test_real_data_loader(tmp_path):
    items, attrs = tmp_path / "items_shuffle_1000.json", tmp_path / "items_ins_v2_1000.json"
    items.write_text(json.dumps(RAW_ITEMS), encoding="utf-8")
    attrs.write_text(json.dumps(RAW_ATTRS), encoding="utf-8")
    real = WebShopData.from_webshop_files(items, attrs, nouns="fallback")
    assert [p["asin"] for p in real.products] == ["B000000001", "B000000002", "B000000003"]
    p1, p2, p3 = real.products
    assert p1["Title"] == "Cafe Creme Shampoo for Dry Hair"  # NFKD, accents dropped
    assert p1["options"] == {"size": ["8 fl oz", "16 fl oz | 1 pack"]}
    assert p1["Price"] == "$12.5" and p1["pricing"] == [12.5] and p1["query"] == "shampoo"
    assert p2["Price"] == "$3.0 to $5.0" and 3.0 <= real.prices["B000000002"] <= 5.0
    assert p2["BulletPoints"] == ["Just soap"]
    assert p3["Attributes"] == ["DUMMY_ATTR"] and p3["Price"] == "$100.0"
    assert real.reward_impl == "port+noun-fallback" and real.catalog_id.startswith("webshop-1k-synthetic-n3")
    assert real.num_goals == 4  # 2 size goals + soap + conditioner
    expected = [g for g in ([("B000000001", "8 fl oz"), ("B000000001", "16 fl oz | 1 pack")] + [("B000000002", None), ("B000000003", None)])]
    random.Random(233).shuffle(expected)  # upstream's goal order
    got = [(g["asin"], g["goal_options"].get("size")) for g in real.goals]
    assert got == expected
    for g in real.goals:
        if g["asin"] == "B000000001":
            assert g["instruction_text"].startswith("i need a sulfate free shampoo for dry hair with size: ")
            assert real.score(g["asin"], g, g["goal_options"])[0] == 1.0


def test_real_data_loader_errors(tmp_path):
    with pytest.raises(ValueError, match="cannot read the WebShop products file"):
        WebShopData.from_webshop_files(tmp_path / "nope.json", tmp_path / "nope2.json")
    items = tmp_path / "items.json"
    items.write_text("[]")
    attrs = tmp_path / "attrs.json"
    attrs.write_text("{}")
    with pytest.raises(ValueError, match="human_path"):
        WebShopData.from_webshop_files(items, attrs, human_goals=True)
    with pytest.raises(ValueError, match="no products"):
        WebShopData.from_webshop_files(items, attrs, nouns="fallback")


def test_gzip_and_plain_catalog_files_load_the_same(tmp_path):
    doc = generate_catalog(1, 100)
    plain = tmp_path / "c.json"
    plain.write_bytes(catalog_bytes(doc))
    gz = tmp_path / "c.json.gz"
    gz.write_bytes(gzip.compress(catalog_bytes(doc)))
    assert read_catalog_file(plain) == read_catalog_file(gz)


def test_real_data_human_goals_and_the_env(tmp_path):
    import gymnasium as gym

    from ragen_envs.agents import make_agent
    from ragen_envs.eval import run_episode

    items, attrs, human = tmp_path / "items.json", tmp_path / "attrs.json", tmp_path / "human.json"
    items.write_text(json.dumps(RAW_ITEMS), encoding="utf-8")
    attrs.write_text(json.dumps(RAW_ATTRS), encoding="utf-8")
    human.write_text(json.dumps({
        "B000000001": [{"instruction": "I want a shampoo for dry hair.", "instruction_attributes": ["dry hair"],
                        "instruction_options": ["16 fl oz"]},
                       {"instruction": "skipped: no attributes", "instruction_attributes": [], "instruction_options": []}],
        "B000000002": [{"instruction": "Soap please", "instruction_attributes": ["gentle"], "instruction_options": []}],
        "B000000003": [{"instruction": "conditioner", "instruction_attributes": ["tea tree"], "instruction_options": []}],
    }), encoding="utf-8")
    real = WebShopData.from_webshop_files(items, attrs, human, human_goals=True, nouns="fallback")
    assert real.num_goals == 3 and real.catalog_id.startswith("webshop-1k-human")
    shampoo = next(g for g in real.goals if g["asin"] == "B000000001")
    assert shampoo["instruction_text"].startswith("I want a shampoo for dry hair, and price lower than ")
    assert shampoo["goal_options"] == ["16 fl oz"] and shampoo["weight"] == 1
    # human goal options are a list of strings: "16 fl oz" matches the value "16 fl oz | 1 pack"
    assert real.score("B000000001", shampoo, {"size": "16 fl oz | 1 pack"})[0] == 1.0
    # the env runs on real data through the same engine
    env = gym.make("ragen/WebShop-v0", catalog=WebShopData.from_webshop_files(items, attrs, nouns="fallback"))
    expert = make_agent("expert", env=env)
    assert all(run_episode(env, expert, seed).success for seed in range(4))
    assert env.unwrapped.describe()["reward_impl"] == "port+noun-fallback"
