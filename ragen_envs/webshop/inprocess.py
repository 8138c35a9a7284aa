"""The ``inprocess`` backend: upstream WebShop (``web_agent_site``) or RAGEN's
``webshop_minimal`` in this process, when you have installed it with its data and index.

Neither is a dependency: the package is imported only here, when this backend is built.
Its known setup failures become one actionable message: the spaCy model missing (``OSError
E050`` at import), Java / pyserini or the Lucene index missing, the data files missing.

Like the design asks: one upstream ``SimServer`` per process and configuration, shared by
every env copy (each gets its own ``session_prefix``); Python's ``random`` and numpy's
global generator are seeded with ``seed`` while the server is built (fixing range prices
and ``price_upper``, which upstream draws unseeded) and restored afterwards; sessions are
opened by goal index; the reward and its breakdown are upstream's own
(``reward_impl = "upstream"``). Tests of this backend run only where the package, its
data and its index are present.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
import threading
import uuid
from typing import Any

from .base import StepResult, WebShopBackend
from .pages import PageView, infer_page_type

__all__ = ["InProcessBackend", "find_upstream_package"]

_PACKAGES = ("web_agent_site", "webshop_minimal")
_SERVERS: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def find_upstream_package() -> str | None:
    """``"web_agent_site"`` or ``"webshop_minimal"`` when importable, else None."""
    for name in _PACKAGES:
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except (ImportError, ValueError):
            continue
    return None


def _seeded(seed: int, build: Any) -> Any:
    """Run ``build()`` with Python's and numpy's global generators seeded, then restore them."""
    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        return build()
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _setup_error(package: str, exc: BaseException) -> ValueError:
    text = f"{type(exc).__name__}: {exc}"
    low = text.lower()
    if "e050" in low or "en_core_web" in low or "spacy" in low:
        hint = ("the spaCy model is missing: install en_core_web_sm (upstream goal.py loads it at import; "
                "AgentGym's copy loads en_core_web_lg)")
    elif "java" in low or "jvm" in low or "pyserini" in low or "jnius" in low:
        hint = "pyserini needs a Java runtime (JDK 11 for pyserini 0.17, JDK 21 for current releases) and its index"
    elif "index" in low and ("exist" in low or "not found" in low):
        hint = "the Lucene index is missing: build it with upstream's search_engine/run_indexing.sh"
    elif isinstance(exc, (FileNotFoundError, OSError)) or "no such file" in low:
        hint = "WebShop's data files are missing: run upstream's setup.sh (items_shuffle*.json, items_ins_v2*.json)"
    elif isinstance(exc, ImportError):
        hint = f"{package} or one of its dependencies is not installed"
    else:
        hint = "see the upstream WebShop setup instructions"
    return ValueError(f"the 'inprocess' WebShop backend could not start {package}: {hint} ({text}). "
                      "The bundled backend='mini' needs none of this.")


class InProcessBackend(WebShopBackend):
    """Upstream's ``WebAgentTextEnv`` in ``text`` mode behind the backend interface.

    Args:
        package: ``"auto"`` (``web_agent_site``, else ``webshop_minimal``) or either name.
        num_products: upstream's ``num_products`` (1000 = the 1k index; None = full).
        human_goals: upstream's goal kind (False: synthetic, like RAGEN).
        dataset: ``webshop_minimal`` only: ``init_basedir(dataset)`` (``"small"``/``"full"``).
        seed: seeds ``random`` / ``numpy.random`` while the server is built.
    """

    name = "inprocess"

    def __init__(
        self,
        package: str = "auto",
        num_products: int | None = 1000,
        human_goals: bool = False,
        dataset: str = "small",
        seed: int = 0,
        show_attrs: bool = False,
    ) -> None:
        if package == "auto":
            found = find_upstream_package()
            if found is None:
                raise ValueError(
                    "the 'inprocess' WebShop backend needs upstream WebShop (web_agent_site) or RAGEN's "
                    "webshop_minimal installed with its data and search index; neither is importable. "
                    "Use backend='mini' (bundled) or backend='remote' with a running server."
                )
            package = found
        if package not in _PACKAGES:
            raise ValueError(f"package must be 'auto' or one of {_PACKAGES}, got {package!r}")
        self.package = package
        self.seed = int(seed)
        key = (package, num_products, bool(human_goals), dataset, self.seed, bool(show_attrs))
        try:
            if package == "web_agent_site":
                module = importlib.import_module("web_agent_site.envs.web_agent_text_env")
            else:
                module = importlib.import_module("webshop_minimal")
                module.init_basedir(dataset)
            env_cls = module.WebAgentTextEnv
            kwargs = dict(observation_mode="text", num_products=num_products, human_goals=human_goals,
                          show_attrs=show_attrs, session_prefix=uuid.uuid4().hex)
            with _LOCK:
                server = _SERVERS.get(key)
                if server is None:  # the first env builds upstream's SimServer; later ones share it
                    self.env = _seeded(self.seed, lambda: env_cls(**kwargs))
                    server = _SERVERS[key] = self.env.server
                else:
                    self.env = env_cls(server=server, **kwargs)
        except ValueError:
            raise
        except BaseException as exc:  # noqa: BLE001 - turned into one actionable message
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise _setup_error(package, exc) from exc
        self.server = server
        self._page: PageView | None = None
        self._goal_index: int | None = None

    # ------------------------------------------------------------------ interface
    def num_goals(self) -> int:
        return len(self.server.goals)

    def _view(self, text: str) -> PageView:
        avail = self.env.get_available_actions()
        goal = self.server.user_sessions[self.env.session]["goal"]
        return PageView(text, infer_page_type(text), bool(avail["has_search_bar"]),
                        tuple(avail["clickables"]), str(goal["instruction_text"]))

    def reset(self, goal_index: int) -> PageView:
        n = self.num_goals()
        if not isinstance(goal_index, int) or not 0 <= goal_index < n:
            raise ValueError(f"goal index must be an integer in 0..{n - 1}, got {goal_index!r}")
        obs, _ = self.env.reset(session=goal_index)
        self._goal_index = goal_index
        self._page = self._view(self.env.observation if not obs else obs)
        return self._page

    def act(self, action: str) -> StepResult:
        if self._page is None:
            raise RuntimeError("the in-process WebShop session has not started: call reset(goal_index) first")
        state, reward, done, _ = self.env.step(action)
        self._page = self._view(state)
        breakdown = self.server.user_sessions[self.env.session].get("verbose_info") if done else None
        return StepResult(self._page, reward, bool(done), dict(breakdown) if breakdown else None)

    def page(self) -> PageView:
        if self._page is None:
            raise RuntimeError("the in-process WebShop session has not started: call reset(goal_index) first")
        return self._page

    def instruction_text(self) -> str:
        return str(self.env.get_instruction_text())

    def close(self) -> None:
        self._page = None

    def describe(self) -> dict[str, Any]:
        n = self.num_goals()
        return {
            "backend": self.name,
            "catalog_id": f"{self.package}-n{len(self.server.all_products)}-seed{self.seed}",
            "search_impl": "lucene",
            "reward_impl": "upstream",
            "num_goals": n,
            "splits": {k: list(v) for k, v in self.split_ranges().items()},
        }
