"""The WebShop bridge: a bundled mini WebShop, a remote HTTP backend and an in-process adapter.

``gym.make("ragen/WebShop-v0")`` plays the bundled engine (:mod:`.engine`) on the shipped
synthetic catalog; ``backend="remote", base_url=...`` talks to an AgentGym-style server
(:mod:`.remote`; ours is :mod:`.server`, ``ragen webshop-server``); ``backend="inprocess"``
drives upstream ``web_agent_site`` when it is installed (:mod:`.inprocess`). Everything here
is standard library only. See ``docs/webshop.md``.
"""

from .backends import BACKENDS, MiniBackend, StepResult, WebShopBackend, make_backend
from .catalog import DEFAULT_CATALOG_PATH, DEFAULT_CATALOG_SHA256, generate_catalog
from .engine import Session, WebShopData, load_mini, parse_action
from .pages import PageView, available_actions
from .reward import get_reward, token_set_ratio

__all__ = [
    "BACKENDS",
    "DEFAULT_CATALOG_PATH",
    "DEFAULT_CATALOG_SHA256",
    "MiniBackend",
    "PageView",
    "Session",
    "StepResult",
    "WebShopBackend",
    "WebShopData",
    "available_actions",
    "generate_catalog",
    "get_reward",
    "load_mini",
    "make_backend",
    "parse_action",
    "token_set_ratio",
]
