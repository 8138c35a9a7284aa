"""WebShop (Yao et al., 2022) as a multi-turn text environment, over three backends."""

from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

import numpy as np

from ..protocol import ActionOutcome
from ..webshop.backends import WebShopBackend, make_backend
from ..webshop.catalog import to_printable_ascii
from ..webshop.engine import parse_action
from ..webshop.pages import PageView, available_actions
from .checks import check_bool
from .base import MAX_TEXT_LENGTH, TextGameEnv
from .space import UnicodeText

__all__ = ["WebShopEnv", "INSTRUCTION", "RENDER_TIPS", "WEBSHOP_INFO_KEYS", "MAX_STATE_CHARS"]

# The state text (page + tips + action list) is at most this long, else the turn raises; the
# observation space holds it plus the instruction and turn text (< MAX_TEXT_LENGTH).
MAX_STATE_CHARS = 2 * MAX_TEXT_LENGTH

# The reference's env_instruction (config/envs.yaml), verbatim ("close to the production
# description" and the double space are in the original).
INSTRUCTION = (
    "You are browsing an online shop. Based on the instruction, buy a product that close to the production "
    "description. You need to search, read the search results, pick a product, choose the size and color and "
    "buy. You should only choose action from the available actions list provided later.  Example process: I "
    "need a gingko light and 20x20 pillow cover that is hand painted. First search[gingko light 20x20 pillow "
    "cover hand painted], answer format: <answer>search[blanket with fleece throw]</answer>. Valid answer is "
    "search[<keywords>] or click[<clickable>]."
)

# The reference's RENDER_INSTRUCTIONS, verbatim: a missing comma in the original glues the
# two "Almost never" tips into one line, and "within 10 actions" stays although the budget is 9.
RENDER_TIPS = (
    "We must buy a product within 10 actions. It doesn't have to match perfectly with description.",
    "Search term should not include details like size, color.",
    "Never search for more than 2 times.",
    "Do not be too strict about the description, it's more important to buy one that is close enough within action limit.",
    "Prioritize click a product in the current page over going to next page.",
    "Almost never click[next >] for more than 2 times."
    "Almost never click[< prev] unless you are sure the product is on one of the previous pages.",
    "If you have less than 3 actions left, just buy the first product you see in the current page.",
    "If an matching option exists, make sure to click[size] then click[color], one at a time, before click[buy now], "
    "but don't have to if only 1 action left, in that case you just click[buy now]. Never click description.",
)

# Extra step-info keys: name -> (type, meaning). Documented in the class docstring too.
WEBSHOP_INFO_KEYS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "page_type": (str, "search, results, item, item_sub or done"),
    "available_actions": (list, "the reference's action list for the current page"),
    "action_available": (bool, "the last executed action was in the list (any search[...] counts on the search page)"),
    "purchased": (bool, "click[buy now] ran (the episode ends)"),
    "end_of_page": (bool, "the action list is exactly back to search / < prev (the reference's end_of_page)"),
    # always a dict (empty before a purchase): Gymnasium's vector envs stack info values by
    # type, and a None in one sub-env beside a dict in another raised there
    "reward_breakdown": (dict, "upstream's verbose reward parts after a purchase, else {}"),
    "instruction": (str, "the goal's instruction text"),
    "goal_index": (int, "the goal's index in the backend's goal list"),
    "split": (str, "test, val or train"),
    "backend": (str, "mini, remote or inprocess"),
    "catalog_id": (str, "which catalog (e.g. mini-v1-seed0-n1000)"),
}


class WebShopEnv(TextGameEnv):
    """WebShop: find and buy the product an instruction describes, with the right options.

    ## Description
    WebShop's text mode (search page, results, item pages and their sub-pages, the done page)
    as in upstream ``WebAgentTextEnv`` with ``observation_mode="text"``, behind one backend:
    ``mini`` (default; the bundled engine on the shipped synthetic catalog
    ``mini-v1-seed0-n1000``: 1,000 products, 42 product types, 2,266 goals; no Java, no spaCy,
    no downloads), ``remote`` (an AgentGym-style HTTP server, e.g. ``ragen webshop-server``)
    or ``inprocess`` (upstream ``web_agent_site`` when installed). See ``docs/webshop.md``.

    ## Action Space
    Any string (`Text`). One action per reply by default:
    ``<think>...</think><answer>search[red running shoes]</answer>`` or
    ``<answer>click[b0123abcde]</answer>``. Actions are free text: every answer piece runs
    with upstream's grammar (``search[q]`` on any page, ``click[x]`` for a clickable of the
    page; anything else is a no-op); only a reply without the answer pattern (or an empty
    answer) costs the format penalty.

    ## Observation Space
    `UnicodeText(196608)` (printable ASCII in practice): the reference prompt. The state is the page text (``[SEP]``-separated; at reset
    the reference shows ``Instruction: <text>``) + ``"."`` + the reference's tips
    (``tips=True``) + ``"\\n You must choose from these actions:"`` + the action list.
    ``render_mode="ansi"`` returns that state; ``"rgb_array"`` / ``"human"`` draw the page as a
    small web page (pygame-ce, the ``render`` extra; selected options shown in green).

    ## Starting State
    The search page of goal ``start + seed % size`` of the ``split`` (test 0..499,
    val 500..1499, train 1500.. of the shuffled goals; proportional 10/20/70 % splits for
    catalogs with fewer than 2,000 goals). ``reset(options={"goal_index": i})`` picks a goal
    directly, ``options={"split": "train"}`` a split for one reset.

    ## Rewards
    0 until ``click[buy now]``, then WebShop's score R in [0, 1]
    (``ragen_envs.webshop.reward``). The turn shows ``Reward: 0`` for a no-op and ``0.0`` for
    a page change, as the reference. Per turn: plus the format penalty (-0.1) for a reply
    that does not parse.

    ## Episode End
    Terminated on the first purchase; success = the score is exactly 1.0. Truncated when the
    9 turns or the 9 actions run out first.

    ## Information
    The protocol keys (``ragen_envs.protocol.INFO_KEYS``; ``action_is_effective`` = the page
    text changed) and ``page_type`` (str), ``available_actions`` (list), ``action_available``
    (bool), ``purchased`` (bool), ``end_of_page`` (bool), ``reward_breakdown`` (dict; ``{}`` before a purchase),
    ``instruction`` (str), ``goal_index`` (int), ``split`` (str), ``backend`` (str),
    ``catalog_id`` (str). :meth:`describe` adds the search and reward implementations.

    ## Arguments
    ``gym.make("ragen/WebShop-v0", backend="mini", split="test", catalog=None,
    base_url=None, num_goals=None, timeout=30.0, retries=5, backend_kwargs=None, tips=True,
    permute_goals=False, strict_search=False, max_turns=9, max_actions=9,
    max_actions_per_turn=1, think=True, prompt_style="reference", format_penalty=-0.1,
    max_tokens=200, render_mode=None)``. ``catalog``: a mini catalog file or a
    ``WebShopData``; ``base_url``/``num_goals``/``timeout``/``retries``: the remote backend;
    ``backend`` may also be a ready ``WebShopBackend``. ``permute_goals=True`` maps goal
    indices through the reference's fixed permutation (``random.Random(42).shuffle``), which
    mixes the splits as the reference does. ``strict_search=True`` makes ``search[...]``
    off the search page a no-op (upstream runs it anywhere).

    ## Version History
    * v0: initial release (protocol 1.0).
    """

    instruction = INSTRUCTION

    def __init__(
        self,
        *,
        backend: str | WebShopBackend = "mini",
        split: str = "test",
        catalog: Any = None,
        base_url: str | None = None,
        num_goals: int | None = None,
        timeout: float = 30.0,
        retries: int = 5,
        backend_kwargs: Mapping[str, Any] | None = None,
        tips: bool = True,
        permute_goals: bool = False,
        strict_search: bool = False,
        max_turns: int = 9,
        max_actions: int = 9,
        max_actions_per_turn: int = 1,
        max_tokens: int = 200,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            max_turns=max_turns,
            max_actions=max_actions,
            max_actions_per_turn=max_actions_per_turn,
            max_tokens=max_tokens,
            **kwargs,
        )
        self.observation_space = UnicodeText(MAX_STATE_CHARS + MAX_TEXT_LENGTH)
        options = dict(backend_kwargs or {})
        if backend == "mini":
            if catalog is not None:
                options["catalog"] = catalog
        elif catalog is not None:
            raise ValueError("catalog= applies to backend='mini' only")
        if backend == "remote":
            if not base_url:
                raise ValueError("backend='remote' needs base_url='http://HOST:PORT' (e.g. from `ragen webshop-server`)")
            options.update(base_url=base_url, num_goals=num_goals, timeout=timeout, retries=retries)
        elif base_url is not None or num_goals is not None:
            raise ValueError("base_url= and num_goals= apply to backend='remote' only")
        self.backend: WebShopBackend = make_backend(backend, **options)
        self.backend_name = self.backend.name
        self._ranges = self.backend.split_ranges()
        if split not in self._ranges:
            raise ValueError(f"split must be one of {list(self._ranges)}, got {split!r}")
        self.split = split
        self.tips = check_bool("tips", tips)
        self.strict_search = check_bool("strict_search", strict_search)
        self._permutation: list[int] | None = None
        if check_bool("permute_goals", permute_goals):
            self._permutation = list(range(self.backend.num_goals()))
            random.Random(42).shuffle(self._permutation)
        self._catalog_id = str(self.backend.describe().get("catalog_id", ""))
        self._pending: dict[str, Any] = {}
        self.goal_index = -1
        self.goal_split = split
        self._page: PageView | None = None
        self._shown = ""
        self._last_available = False
        self._purchased = False
        self._breakdown: dict[str, Any] | None = None
        self._click_alias: dict[str, str] = {}

    # ------------------------------------------------------------------ episode setup
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode; ``options`` may hold ``goal_index`` (int) or ``split`` (str)
        besides ``noise_seed``."""
        options = dict(options or {})
        pending = {k: options.pop(k) for k in ("goal_index", "split") if k in options}
        if "goal_index" in pending and "split" in pending:
            raise ValueError("give either options['goal_index'] or options['split'], not both")
        if "split" in pending and pending["split"] not in self._ranges:
            raise ValueError(f"options['split'] must be one of {list(self._ranges)}, got {pending['split']!r}")
        if "goal_index" in pending:
            gi, n = pending["goal_index"], self.backend.num_goals()
            if not isinstance(gi, (int, np.integer)) or isinstance(gi, bool) or not 0 <= gi < n:
                raise ValueError(f"options['goal_index'] must be an integer in 0..{n - 1}, got {gi!r}")
            pending["goal_index"] = int(gi)
        self._pending = pending
        return super().reset(seed=seed, options=options)

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        if "goal_index" in self._pending:
            index = self._pending["goal_index"]
        else:
            split = self._pending.get("split", self.split)
            start, stop = self._ranges[split]
            index = start + layout_seed % (stop - start)
            if self._permutation is not None:
                index = self._permutation[index]
        self._pending = {}
        self.goal_index = index
        self.goal_split = next((k for k, (a, b) in self._ranges.items() if a <= index < b), self.split)
        self._page = self.backend.reset(index)
        self._shown = self.backend.instruction_text()  # the reference renders this at reset
        self._last_available = False
        self._purchased = False
        self._breakdown = None
        self._update_aliases()

    # ------------------------------------------------------------------ game hooks
    def _action_names(self) -> Sequence[str] | None:
        return None

    def available_actions(self) -> list[str]:
        """The reference's action list for the current page (``search[<content>]``,
        ``click[...]``)."""
        page = self._page
        return [] if page is None else available_actions(page.has_search_bar, page.clickables)

    def _update_aliases(self) -> None:
        # clickables shown in ASCII may differ from a remote page's own text: map them back
        page = self._page
        self._click_alias = {}
        if page is not None:
            for c in page.clickables:
                shown = to_printable_ascii(c)
                if shown != c:
                    self._click_alias.setdefault(shown, c)

    def _run_action(self, name: str) -> ActionOutcome:
        before = self._page
        listed = self.available_actions()
        verb, arg = parse_action(name)
        if verb == "click" and arg is not None and arg.lower() in self._click_alias:
            name = f"click[{self._click_alias[arg.lower()]}]"
        self._last_available = name in listed or (
            before.has_search_bar and name.startswith("search[") and name.endswith("]")
        )
        if self.strict_search and verb == "search" and not before.has_search_bar:
            self._shown = before.text
            return ActionOutcome(0, False, False, False)
        result = self.backend.act(name)
        self._page = result.page
        self._shown = result.page.text
        self._update_aliases()
        if result.done:
            self._purchased = True
            self._breakdown = result.breakdown
        success = bool(result.done) and float(result.reward) == 1.0
        return ActionOutcome(result.reward, bool(result.done), success, result.page.text != before.text)

    def _state_text(self) -> str:
        text = self._shown + "."
        if self.tips:
            text += "\n".join(RENDER_TIPS)
        text += "\n You must choose from these actions:" + ", ".join(self.available_actions()) + "."
        text = to_printable_ascii(text)
        if len(text) > MAX_STATE_CHARS:
            raise RuntimeError(f"the WebShop page and its action list are {len(text)} characters: more than "
                               f"{MAX_STATE_CHARS}, the most an observation holds")
        return text

    def expert_actions(self) -> list[str]:
        return [self.backend.expert_action(self.budget.actions_left)]

    def describe(self) -> dict[str, Any]:
        """Backend, catalog, search and reward implementations, goal count, splits, budgets."""
        return {
            **self.backend.describe(),
            "split": self.split,
            "max_turns": self.budget.max_turns,
            "max_actions": self.budget.max_actions,
            "max_actions_per_turn": self.budget.max_actions_per_turn,
            "permute_goals": self._permutation is not None,
            "strict_search": self.strict_search,
        }

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        listed = self.available_actions()
        info.update(
            page_type=self._page.page_type,
            available_actions=listed,
            action_available=bool(self.last_turn.executed) and self._last_available,
            purchased=self._purchased,
            end_of_page=tuple(listed) == ("click[back to search]", "click[< prev]"),
            reward_breakdown={} if self._breakdown is None else dict(self._breakdown),
            instruction=self._page.instruction,
            goal_index=self.goal_index,
            split=self.goal_split,
            backend=self.backend_name,
            catalog_id=self._catalog_id,
        )
        return obs, reward, terminated, truncated, info

    def _frame(self) -> np.ndarray:
        session = getattr(self.backend, "session", None)  # the mini backend knows the selected options
        selected = tuple(session.options.values()) if session is not None else ()
        return draw_page(self._page, self._shown if self._page is None else self._page.text, selected)

    def close(self) -> None:
        self.backend.close()
        super().close()


# ---------------------------------------------------------------------- the page as a picture
PAGE_SIZE = (640, 480)  # (width, height) of an rgb_array frame
_INK, _MUTED, _LINK, _PRICE = (28, 32, 44), (96, 104, 120), (20, 84, 196), (22, 128, 64)
_LABELS = {"search": "search", "results": "results", "item": "product", "item_sub": "details", "done": "done"}


def draw_page(page: PageView | None, text: str, selected: Sequence[str] = ()) -> np.ndarray:
    """The current page drawn like a small web page: header, instruction, then the page's
    segments (buttons as pills, ``selected`` option values in green, products as rows, the
    score as a bar). Loads pygame."""
    from renderers._pygame import SUPERSAMPLE as S, canvas, finish, font, require_pygame, shade, text_fit, vertical_gradient

    pygame = require_pygame()
    width, height = PAGE_SIZE[0] * S, PAGE_SIZE[1] * S
    surface = canvas(width, height, (244, 246, 250))
    vertical_gradient(surface, (0, 0, width, height), (248, 249, 252), (226, 232, 240))
    vertical_gradient(surface, (0, 0, width, 46 * S), (24, 104, 124), (10, 56, 72))
    f_title = font(28 * S, True)
    surface.blit(f_title.render("WebShop", True, (255, 255, 255)), (16 * S, 9 * S))
    page_type = page.page_type if page is not None else "search"
    label = font(15 * S, True).render(_LABELS.get(page_type, page_type), True, (10, 56, 72))
    pill = label.get_rect().inflate(18 * S, 8 * S)
    pill.topright = (width - 16 * S, 11 * S)
    pygame.draw.rect(surface, (250, 214, 120), pill, border_radius=pill.height // 2)
    surface.blit(label, label.get_rect(center=pill.center))

    segments = [s for s in text.split(" [SEP] ") if s]
    instruction = page.instruction if page is not None else ""
    if "Instruction:" in segments:
        k = segments.index("Instruction:")
        instruction, segments = (segments[k + 1] if k + 1 < len(segments) else ""), segments[k + 2:]
    elif segments and segments[0].startswith("Instruction: "):
        instruction, segments = segments[0][len("Instruction: "):], segments[1:]
    y = 56 * S
    f_body = font(16 * S)
    lines = _wrap_words(instruction, f_body, width - 56 * S)[:3]
    box = pygame.Rect(16 * S, y, width - 32 * S, (30 + 18 * len(lines)) * S)
    pygame.draw.rect(surface, (255, 247, 222), box, border_radius=8 * S)
    pygame.draw.rect(surface, (222, 188, 116), box, width=2 * S, border_radius=8 * S)
    surface.blit(font(15 * S, True).render("Instruction:", True, (140, 96, 20)), (28 * S, y + 6 * S))
    for i, line in enumerate(lines):
        surface.blit(f_body.render(line, True, _INK), (28 * S, y + (24 + 18 * i) * S))
    y = box.bottom + 12 * S

    clickables = set(page.clickables) if page is not None else set()
    if page_type == "done":
        score = next((segments[i + 1] for i, s in enumerate(segments[:-1]) if s.startswith("Your score")), "0")
        value = min(max(float(score) if score.replace(".", "", 1).isdigit() else 0.0, 0.0), 1.0)
        surface.blit(font(30 * S, True).render("Thank you for shopping with us!", True, _INK), (28 * S, y + 10 * S))
        surface.blit(font(22 * S).render(f"Your score: {value:.3f}", True, _MUTED), (28 * S, y + 56 * S))
        bar = pygame.Rect(28 * S, y + 96 * S, width - 56 * S, 28 * S)
        pygame.draw.rect(surface, (214, 220, 230), bar, border_radius=14 * S)
        fill = bar.copy()
        fill.width = max(int(bar.width * value), bar.height)
        colour = (46, 160, 90) if value == 1.0 else (232, 160, 40) if value > 0 else (200, 70, 60)
        pygame.draw.rect(surface, colour, fill, border_radius=14 * S)
        return finish(surface)

    x = 16 * S
    row_h = 30 * S
    i = 0
    while i < len(segments) and y < height - row_h:
        seg = segments[i]
        if seg.lower() in clickables and seg.lower().startswith("b0") and i + 2 < len(segments):
            # a product row: ASIN, title, price
            if x > 16 * S:
                x, y = 16 * S, y + row_h
            card = pygame.Rect(16 * S, y, width - 32 * S, 26 * S)
            pygame.draw.rect(surface, (255, 255, 255), card, border_radius=6 * S)
            pygame.draw.rect(surface, (210, 216, 226), card, width=S, border_radius=6 * S)
            asin = font(15 * S, True).render(seg, True, _LINK)
            surface.blit(asin, (24 * S, y + 5 * S))
            price = font(15 * S, True).render(segments[i + 2], True, _PRICE)
            surface.blit(price, price.get_rect(topright=(width - 24 * S, y + 5 * S)))
            room = width - 48 * S - asin.get_width() - price.get_width() - 24 * S
            f, title = text_fit(segments[i + 1], room, 15 * S, 10 * S, bold=False)
            surface.blit(f.render(title, True, _INK), (24 * S + asin.get_width() + 12 * S, y + 6 * S))
            y += 30 * S
            i += 3
            continue
        if seg.lower() in clickables or seg in ("Search", "Buy Now"):
            f = font(15 * S, True)
            label = f.render(seg, True, (255, 255, 255))
            pill = label.get_rect().inflate(20 * S, 10 * S)
            if x + pill.width > width - 16 * S:
                x, y = 16 * S, y + row_h
            pill.topleft = (x, y)
            base = (232, 128, 30) if seg == "Buy Now" else (40, 150, 80) if seg in selected else (46, 110, 200)
            pygame.draw.rect(surface, shade(base, -0.25), pill.move(0, 2 * S), border_radius=6 * S)
            pygame.draw.rect(surface, base, pill, border_radius=6 * S)
            surface.blit(label, label.get_rect(center=pill.center))
            x += pill.width + 8 * S
            i += 1
            continue
        if x > 16 * S:
            x, y = 16 * S, y + row_h
        bold = seg.startswith(("Page ", "Price:", "Rating:")) or (page_type == "item" and i + 1 < len(segments)
                                                                  and segments[i + 1].lower() in clickables
                                                                  and seg.lower() not in clickables)
        f = font(16 * S, bold)
        for line in _wrap_words(seg, f, width - 32 * S)[:3]:
            if y >= height - row_h:
                break
            surface.blit(f.render(line, True, _INK if not bold else _MUTED), (16 * S, y + 4 * S))
            y += 22 * S
        i += 1
    return finish(surface)


def _wrap_words(text: str, f, max_width: int) -> list[str]:
    from renderers._pygame import clean_text

    words, lines, line = clean_text(text).split(), [], ""
    for word in words:
        candidate = f"{line} {word}".strip()
        if f.size(candidate)[0] <= max_width or not line:
            line = candidate
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines
