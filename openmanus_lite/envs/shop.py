"""E-commerce: a WebShop-style store over a generated catalogue.

Pages are rendered in WebShop's `[SEP]` style (search page, paged results with product ids,
titles and prices, product pages with options, Description / Features / Reviews, Buy Now).
The agent acts with `search[query]` (on the search page) and `click[value]` (any button or
option shown on the page). Search ranks products with BM25, computed once per catalogue.
The episode ends at `click[Buy Now]`, scored with WebShop's reward: product type match times
the share of matched attributes, options and price.

A catalogue is generated from a small seed stored in the task spec and cached per process, so
tasks stay small, every task on a catalogue shares one index, and `clone()` shares it too.
"""

from __future__ import annotations

import copy
import functools
import math
import random
import re
from dataclasses import dataclass

import numpy as np

from openmanus_lite.envs.base import Env, InvalidAction, echoed, expert_turn, register_domain
from openmanus_lite.react import Action
from openmanus_lite.schema import Task

# --------------------------------------------------------------------------- catalogue data


@dataclass(frozen=True)
class ProductType:
    category: str
    name: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (dimension, values)
    price: tuple[float, float]


def _ptype(category: str, name: str, attributes: str, options: dict[str, str], price: tuple[float, float]):
    return ProductType(category, name, tuple(attributes.split(", ")),
                       tuple((d, tuple(v.split("; "))) for d, v in options.items()), price)


COLORS = "black; white; navy blue; red; grey; green; pink"
SIZES = "small; medium; large; x-large; xx-large"
PRODUCT_TYPES: tuple[ProductType, ...] = (
    _ptype("beauty", "shampoo", "sulfate free, paraben free, natural ingredients, dry hair, cruelty free, long lasting",
           {"size": "8 fl oz; 12 fl oz; 16.9 fl oz; 33.8 fl oz", "scent": "lavender; coconut; mint; unscented"},
           (6, 40)),
    _ptype("beauty", "hair brush", "travel size, with mirror, detangling, wet hair, boar bristle, for women",
           {"color": "black; pink; purple; white; gold"}, (5, 30)),
    _ptype("beauty", "lipstick", "long lasting, matte finish, cruelty free, moisturizing, paraben free, vegan",
           {"color": "classic red; nude; berry; coral; rose pink"}, (4, 30)),
    _ptype("beauty", "makeup bottle", "bpa free, travel size, leak proof, refillable, easy to clean",
           {"size": "30 ml; 50 ml; 100 ml", "pack": "pack of 2; pack of 4; pack of 6"}, (3, 20)),
    _ptype("grocery", "beef jerky", "high protein, gluten free, low sugar, keto friendly, non gmo, grass fed",
           {"flavor": "original; teriyaki; peppered; sweet n spicy; honey bbq",
            "size": "2.85 ounce (pack of 2); 3.25 ounce (pack of 3); 3.25 ounce (pack of 4); 8 ounce (pack of 1)"},
           (8, 60)),
    _ptype("grocery", "popcorn", "gluten free, dietary fiber, non gmo, low calorie, whole grain, dairy free",
           {"flavor": "butter; sea salt; caramel; white cheddar",
            "size": "2 count (pack of 2); 6 count (pack of 6); 12 count (pack of 12)"}, (4, 35)),
    _ptype("grocery", "green tea", "organic, decaffeinated, caffeine free, antioxidant, individually wrapped",
           {"flavor": "jasmine; mint; lemon; matcha", "size": "20 count; 50 count; 100 count"}, (5, 30)),
    _ptype("electronics", "headphones", "noise cancelling, wireless, bluetooth, over ear, with microphone, "
           "long battery life", {"color": "black; white; silver; midnight blue"}, (20, 300)),
    _ptype("electronics", "phone case", "shockproof, slim fit, wireless charging, card holder, kickstand",
           {"color": "clear; black; purple; mint green", "model": "iphone 13; iphone 14; galaxy s22"}, (7, 35)),
    _ptype("electronics", "power bank", "fast charging, usb c, portable, high capacity, led display",
           {"capacity": "10000mah; 20000mah; 26800mah"}, (15, 80)),
    _ptype("home", "throw pillow cover", "machine washable, double sided, hidden zipper, linen, farmhouse",
           {"size": "16 x 16 inch; 18 x 18 inch; 20 x 20 inch", "color": COLORS}, (8, 40)),
    _ptype("home", "shower curtain", "waterproof, machine washable, mildew resistant, with hooks, extra long",
           {"size": "60 x 72 inch; 72 x 72 inch; 72 x 84 inch", "color": COLORS}, (10, 45)),
    _ptype("home", "desk lamp", "dimmable, led, usb charging, eye caring, touch control", {"color": COLORS}, (15, 70)),
    _ptype("clothing", "women's blazer", "long sleeve, button closure, machine wash, slim fit, polyester spandex",
           {"color": "black; z-nude pink; navy; white; camel", "size": SIZES}, (25, 90)),
    _ptype("clothing", "men's t-shirt", "short sleeve, cotton, crew neck, regular fit, machine wash, moisture wicking",
           {"color": COLORS, "size": SIZES}, (8, 35)),
    _ptype("clothing", "running shoes", "lightweight, non slip, breathable, rubber sole, memory foam",
           {"size": "7; 8; 8.5; 9; 10; 11", "color": COLORS}, (30, 140)),
)
BRANDS = (
    "Oakridge", "Bluefin", "Nordvik", "Sunmeadow", "Larkspur", "Tidewell", "Copperleaf", "Halvorsen", "Brightway",
    "Marlowe", "Quillon", "Redcliff", "Silverpine", "Westbrook", "Ambergate", "Fennick", "Glenmore", "Kestrel",
    "Ravenna", "Stonehill", "Vantor", "Wrenfield", "Yellowtail", "Zephyra",
)
_ID_CHARS = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"


@dataclass(frozen=True)
class Product:
    asin: str
    ptype: ProductType
    brand: str
    title: str
    attributes: frozenset[str]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: float
    rating: float

    def option_values(self) -> dict[str, str]:
        """value -> dimension, for every option value this product offers."""
        return {v: d for d, vals in self.options for v in vals}


def tokenize(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class Catalogue:
    """Products and a BM25 index over their text; immutable, so clones and tasks share it."""

    K1, B = 1.5, 0.75

    def __init__(self, seed: int, size: int):
        self.seed, self.size = seed, size
        rng = random.Random(f"catalogue:{seed}:{size}")
        self.products: list[Product] = []
        used: set[str] = set()
        for i in range(size):
            ptype = PRODUCT_TYPES[i % len(PRODUCT_TYPES)]
            asin = "B0" + "".join(rng.choice(_ID_CHARS) for _ in range(8))
            while asin in used:
                asin = "B0" + "".join(rng.choice(_ID_CHARS) for _ in range(8))
            used.add(asin)
            self.products.append(_make_product(rng, asin, ptype))
        self.by_asin = {p.asin.lower(): i for i, p in enumerate(self.products)}
        self._build_index()

    def __deepcopy__(self, memo):
        return self

    def _build_index(self) -> None:
        docs = [tokenize(_doc_text(p)) for p in self.products]
        n = len(docs)
        avgdl = sum(len(d) for d in docs) / max(1, n)
        df: dict[str, int] = {}
        tfs = []
        for d in docs:
            tf: dict[str, int] = {}
            for t in d:
                tf[t] = tf.get(t, 0) + 1
            tfs.append(tf)
            for t in tf:
                df[t] = df.get(t, 0) + 1
        postings: dict[str, tuple[list[int], list[float]]] = {}
        for i, (tf, d) in enumerate(zip(tfs, docs)):
            norm = self.K1 * (1 - self.B + self.B * len(d) / avgdl)
            for t, f in tf.items():
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                ids, weights = postings.setdefault(t, ([], []))
                ids.append(i)
                weights.append(idf * f * (self.K1 + 1) / (f + norm))
        # per term: the documents holding it and their precomputed BM25 term weights
        self.postings = {t: (np.array(ids, dtype=np.int64), np.array(w)) for t, (ids, w) in postings.items()}

    def search(self, query: str, limit: int = 50) -> list[int]:
        """Product indices ranked by BM25 for `query` (ties by catalogue order), at most `limit`."""
        terms = sorted(t for t in set(tokenize(query[:1000])) if t in self.postings)  # fixed order: exact sums
        if not terms:
            return []
        scores = np.zeros(len(self.products))
        for t in terms:
            ids, weights = self.postings[t]
            scores[ids] += weights
        hits = np.flatnonzero(scores)
        order = np.lexsort((hits, -scores[hits]))[:limit]
        return hits[order].tolist()


def _make_product(rng: random.Random, asin: str, ptype: ProductType) -> Product:
    attrs = rng.sample(ptype.attributes, rng.randint(1, min(4, len(ptype.attributes))))
    options = []
    for dim, values in ptype.options:
        k = rng.randint(2, len(values))
        chosen = set(rng.sample(values, k))
        options.append((dim, tuple(v for v in values if v in chosen)))
    lo, hi = ptype.price
    price = round(rng.uniform(lo, hi)) + rng.choice((-0.01, -0.51, 0.0, -0.05))
    brand = rng.choice(BRANDS)
    words = " ".join(a.title() for a in attrs)
    title = f"{brand} {words} {ptype.name.title()}"
    return Product(asin, ptype, brand, title, frozenset(attrs), tuple(options), max(1.99, round(price, 2)),
                   round(rng.uniform(3.0, 5.0), 1))


def _doc_text(p: Product) -> str:
    values = " ".join(v for _, vals in p.options for v in vals)
    return f"{p.title} {p.ptype.name} {p.ptype.category} {' '.join(sorted(p.attributes))} {values}"


@functools.lru_cache(maxsize=16)
def catalogue(seed: int, size: int) -> Catalogue:
    """The catalogue for (seed, size), built once per process."""
    return Catalogue(seed, size)


# --------------------------------------------------------------------------- reward


def webshop_reward(product: Product, selected: dict[str, str], goal: dict) -> float:
    """WebShop's score: r_type * (matched attributes + matched options + price ok) / (n_attr + n_opt + 1).

    r_type is 1 for the asked product type, 0.5 for another type of the same category, else 0.1.
    """
    if product.ptype.name == goal["type"]:
        r_type = 1.0
    elif product.ptype.category == goal["category"]:
        r_type = 0.5
    else:
        r_type = 0.1
    attrs = goal["attributes"]
    options = goal["options"]  # dimension -> value
    hits = sum(1 for a in attrs if a in product.attributes)
    hits += sum(1 for d, v in options.items() if selected.get(d) == v)
    hits += 1 if product.price <= goal["price"] else 0
    return r_type * hits / (len(attrs) + len(options) + 1)


# --------------------------------------------------------------------------- generator

_LEVELS = {
    # catalogue size, goal attributes, goal option dimensions, turn budget
    "easy": {"size": 240, "attrs": (1, 1), "opts": (1, 1), "max_turns": 10},
    "medium": {"size": 480, "attrs": (1, 2), "opts": (1, 2), "max_turns": 12},
    "hard": {"size": 960, "attrs": (2, 3), "opts": (2, 2), "max_turns": 15},
}
PER_PAGE = 5
_OPENERS = ("i am looking for", "i need", "i want", "find me")


def instruction_for(goal: dict) -> str:
    attrs = " and ".join(a.removeprefix("with ") for a in goal["attributes"])
    opts = " and ".join(f"{d} {v}" for d, v in goal["options"].items())
    text = f"{goal['opener']} {goal['type']} with {attrs}"
    if opts:
        text += f", {opts}"
    return f"{text}, and price lower than {goal['price']:.2f} dollars"


def expert_query(goal: dict) -> str:
    return " ".join(goal["attributes"] + [goal["type"]] + list(goal["options"].values()))


def _looks_right(p: Product, goal: dict) -> bool:
    """What a reader can check on the results page: the title names the type and attributes; price."""
    return p.ptype.name == goal["type"] and all(a in p.attributes for a in goal["attributes"]) and \
        p.price <= goal["price"]


def _fits(p: Product, goal: dict) -> bool:
    """Also offers every asked option (visible only on the product page)."""
    offered = p.option_values()
    return _looks_right(p, goal) and all(offered.get(v) == d for d, v in goal["options"].items())


def expert_cost(cat: Catalogue, goal: dict) -> int | None:
    """Turns the expert needs (search, paging, trying products, options, Buy Now); None if it cannot succeed."""
    ranked = cat.search(expert_query(goal))
    cost = 1
    for start in range(0, len(ranked), PER_PAGE):
        if start:
            cost += 1  # Next >
        for i in ranked[start:start + PER_PAGE]:
            p = cat.products[i]
            if not _looks_right(p, goal):
                continue
            if _fits(p, goal):
                return cost + 1 + len(goal["options"]) + 1
            cost += 2  # open it, see the options are missing, go back
    return None


def generate(rng: random.Random, difficulty: str, index: int) -> Task:
    level = _LEVELS[difficulty]
    seed = rng.randrange(4)
    cat = catalogue(seed, level["size"])
    for _ in range(1000):
        p = rng.choice(cat.products)
        n_attr = min(len(p.attributes), rng.randint(*level["attrs"]))
        n_opt = min(len(p.options), rng.randint(*level["opts"]))
        attrs = rng.sample(sorted(p.attributes), n_attr)
        options = {d: rng.choice(vals) for d, vals in rng.sample(p.options, n_opt)}
        ceiling = math.ceil(p.price * rng.uniform(1.05, 1.5) / 10) * 10
        goal = {"opener": rng.choice(_OPENERS), "type": p.ptype.name, "category": p.ptype.category,
                "attributes": attrs, "options": options, "price": float(ceiling)}
        cost = expert_cost(cat, goal)
        if cost is not None and cost <= level["max_turns"]:
            break
    else:  # pragma: no cover
        raise RuntimeError(f"could not generate a {difficulty} shop task")
    return Task(
        id=f"ecommerce/{difficulty}/{index}",
        domain="ecommerce",
        instruction=instruction_for(goal),
        spec={"catalogue": {"seed": seed, "size": level["size"]}, "goal": goal, "max_turns": level["max_turns"]},
        answer=None,
        difficulty=difficulty,
        meta={"product_type": p.ptype.name},
    )


# --------------------------------------------------------------------------- environment

SEP = " [SEP] "


class ShopEnv(Env):
    domain = "ecommerce"
    max_turns = 15
    intro = (
        "You are shopping online. Search for the product that matches the instruction, open it, "
        "choose the asked options and buy it. search[...] works on the search page; click[...] takes a "
        "button, product id or option shown on the page."
    )

    def __deepcopy__(self, memo):
        new = copy.copy(self)  # catalogue, task and result list are immutable and shared
        new.selected = dict(self.selected)
        new.visited = set(self.visited)
        new.last_info = dict(self.last_info)
        return new

    def _setup(self, task: Task) -> None:
        spec = task.spec
        self._turns_from(spec)
        self.cat = catalogue(int(spec["catalogue"]["seed"]), int(spec["catalogue"]["size"]))
        self.goal = spec["goal"]
        self.page = "search"  # search | results | item | description | features | reviews
        self.query = ""
        self.results: tuple[int, ...] = ()
        self.page_no = 1
        self.item: int | None = None
        self.selected: dict[str, str] = {}
        self.bought: int | None = None
        self.visited: set[int] = set()  # products whose page the agent has opened

    def _initial_observation(self) -> str:
        return "\n\n" + self._render()

    # ---------------------------------------------------------------- pages
    def _page_items(self) -> tuple[int, ...]:
        start = (self.page_no - 1) * PER_PAGE
        return self.results[start:start + PER_PAGE]

    def _has_next(self) -> bool:
        return self.page_no * PER_PAGE < len(self.results)

    def _clickables(self) -> dict[str, str]:
        """lower-cased value -> what it does, for the current page."""
        if self.page == "search":
            return {}
        out = {"back to search": "back"}
        if self.page == "results":
            if self.page_no > 1:
                out["< prev"] = "prev"
            if self._has_next():
                out["next >"] = "next"
            for i in self._page_items():
                out[self.cat.products[i].asin.lower()] = f"item:{i}"
            return out
        out["< prev"] = "prev"
        if self.page == "item":
            for value in self.cat.products[self.item].option_values():
                out[value.lower()] = f"option:{value}"
            for name in ("description", "features", "reviews"):
                out[name] = f"sub:{name}"
            out["buy now"] = "buy"
        return out

    def _render(self) -> str:
        if self.page == "search":
            return "WebShop [SEP] Search"
        parts = ["Back to Search"]
        if self.page == "results":
            parts.append(f"Page {self.page_no} (Total results: {len(self.results)})")
            if self.page_no > 1:
                parts.append("< Prev")
            if self._has_next():
                parts.append("Next >")
            for i in self._page_items():
                p = self.cat.products[i]
                parts += [p.asin, p.title, f"${p.price:.2f}"]
            return SEP.join(parts)
        p = self.cat.products[self.item]
        parts.append("< Prev")
        if self.page == "item":
            for dim, values in p.options:
                parts.append(dim)
                parts += values
            parts += [p.title, f"Price: ${p.price:.2f}", f"Rating: {p.rating}", "Description", "Features", "Reviews",
                      "Buy Now"]
        elif self.page == "description":
            attrs = ", ".join(sorted(p.attributes))
            parts.append(f"The {p.brand} {p.ptype.name} is {attrs}. Sold by {p.brand}.")
        elif self.page == "features":
            parts += sorted(p.attributes)
        else:
            verdict = "Great value, works as described." if p.rating >= 4 else "Okay, but not what I hoped for."
            parts += [f"Rating: {p.rating} out of 5", verdict]
        return SEP.join(parts)

    # ---------------------------------------------------------------- actions
    def _execute(self, action: Action) -> str:
        name = action.name.lower()
        arg = " ".join(action.arg.split())
        if name == "search":
            if self.page != "search":
                raise InvalidAction("There is no search box on this page. Use click[Back to Search] first.")
            if not arg:
                raise InvalidAction("The search query is empty. Use search[<keywords>].")
            self.query = arg[:500]
            self.results = tuple(self.cat.search(self.query))
            self.page, self.page_no, self.item = "results", 1, None
            return self._render()
        if name != "click":
            raise InvalidAction(f"Unknown action {echoed(action.name, 30)!r}. Use search[<keywords>] or click[<value>].")
        target = self._clickables().get(arg.lower())
        if target is None:
            raise InvalidAction(f"Nothing to click named {echoed(arg)!r} on this page. "
                                "Click a button, product id or option exactly as shown.")
        if target == "back":
            self.page, self.item, self.selected = "search", None, {}
        elif target == "next":
            self.page_no += 1
        elif target == "prev":
            if self.page == "results":
                self.page_no -= 1
            elif self.page == "item":
                self.page, self.item, self.selected = "results", None, {}
            else:
                self.page = "item"
        elif target.startswith("item:"):
            self.page, self.item, self.selected = "item", int(target[5:]), {}
            self.visited.add(self.item)
        elif target.startswith("option:"):
            value = target[7:]
            self.selected[self.cat.products[self.item].option_values()[value]] = value
        elif target.startswith("sub:"):
            self.page = target[4:]
        elif target == "buy":
            self.bought = self.item
            return f"Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0): {self._score(None):.2f}"
        return self._render()

    def _goal_reached(self) -> bool:
        return self.bought is not None

    def _score(self, answer_text: str | None) -> float:
        if self.bought is None:
            return 0.0
        return webshop_reward(self.cat.products[self.bought], self.selected, self.goal)

    # ---------------------------------------------------------------- expert
    def expert_action(self) -> str:
        goal = self.goal
        if self.page == "search":
            q = expert_query(goal)
            return expert_turn(f"I will search for the {goal['type']} with the asked features.", f"search[{q}]")
        if self.page == "results":
            for i in self._page_items():
                p = self.cat.products[i]
                if _looks_right(p, goal) and (i not in self.visited or _fits(p, goal)):
                    attrs = " and ".join(goal["attributes"])
                    return expert_turn(f"{p.asin} is a {goal['type']} that is {attrs}, for ${p.price:.2f}, under "
                                       f"${goal['price']:.2f}. I will open it.", f"click[{p.asin}]")
            if self._has_next() and self.query == expert_query(goal):
                return expert_turn("Nothing on this page matches. I will look at the next page.", "click[Next >]")
            return expert_turn("No product here matches. I will search again.", "click[Back to Search]")
        if self.page != "item":
            return expert_turn("I will go back to the product page.", "click[< Prev]")
        p = self.cat.products[self.item]
        offered = p.option_values()
        if not _looks_right(p, goal):
            return expert_turn("This product is not what I need. I will go back.", "click[< Prev]")
        for d, v in goal["options"].items():
            if offered.get(v) != d:
                return expert_turn(f"This product has no {d} {v}. I will go back and try another.", "click[< Prev]")
        for d, v in goal["options"].items():
            if self.selected.get(d) != v:
                return expert_turn(f"I will choose {d} {v}.", f"click[{v}]")
        return expert_turn("The product matches the type, features, options and price. I will buy it.",
                           "click[Buy Now]")

    # ---------------------------------------------------------------- random baseline
    def random_action(self, rng: random.Random) -> str:
        if self.page == "search":
            words = tokenize(self.task.instruction)
            query = " ".join(rng.sample(words, min(len(words), rng.randint(1, 4))))
            return expert_turn("I will search.", f"search[{query}]")
        if self.page == "results":
            values = [self.cat.products[i].asin for i in self._page_items()] + ["Back to Search"]
            if self._has_next():
                values.append("Next >")
        elif self.page == "item":
            values = list(self.cat.products[self.item].option_values()) + [
                "< Prev", "Back to Search", "Description", "Features", "Reviews", "Buy Now"]
        else:
            values = ["< Prev", "Back to Search"]
        return expert_turn("I will click something.", f"click[{rng.choice(values)}]")


register_domain("ecommerce", ShopEnv, generate)
