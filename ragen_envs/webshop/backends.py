"""The WebShop backends by name (:func:`make_backend`) and the bundled ``mini`` backend.

The interface (:class:`~.base.WebShopBackend`, :class:`~.base.StepResult`) lives in :mod:`.base`
so that ``remote`` and ``inprocess`` implement it without importing this module (which builds
them by name): every import points one way.

A backend runs one shopping session at a time: :meth:`~WebShopBackend.reset` to a goal
index, :meth:`~WebShopBackend.act` with an action string, read the page. Parsing of the
model's reply, budgets, success, splits and metrics belong to the env
(:class:`ragen_envs.envs.webshop.WebShopEnv`), so all backends share them.

| backend | what | goal count | reward breakdown |
|---|---|---|---|
| ``mini`` | :class:`MiniBackend`: the bundled engine and synthetic catalog (or real data files you have) | known | yes |
| ``remote`` | :class:`~.remote.RemoteBackend`: an AgentGym-style HTTP server (ours: ``ragen webshop-server``) | from ``GET /goals`` or ``num_goals=`` | ours: yes; AgentGym: no |
| ``inprocess`` | :class:`~.inprocess.InProcessBackend`: upstream ``web_agent_site`` / ``webshop_minimal`` if importable | known | yes |
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import StepResult, WebShopBackend
from .engine import Session, WebShopData, load_mini
from .pages import PageView
from .policies import oracle_action

__all__ = ["WebShopBackend", "StepResult", "MiniBackend", "make_backend", "BACKENDS"]

BACKENDS = ("mini", "remote", "inprocess")


class MiniBackend(WebShopBackend):
    """The bundled engine. ``catalog``: None (the shipped ``mini-v1-seed0-n1000``), a catalog
    file path, or a ready :class:`~.engine.WebShopData` (e.g. real data loaded with
    :meth:`~.engine.WebShopData.from_webshop_files`). The catalog is shared per process."""

    name = "mini"

    def __init__(self, catalog: str | Path | WebShopData | None = None) -> None:
        self.data = catalog if isinstance(catalog, WebShopData) else load_mini(catalog)
        self.session: Session | None = None

    def num_goals(self) -> int:
        return self.data.num_goals

    def split_ranges(self) -> dict[str, tuple[int, int]]:
        return dict(self.data.ranges)

    def reset(self, goal_index: int) -> PageView:
        self.session = Session(self.data, goal_index)
        return self.session.view()

    def _session(self) -> Session:
        if self.session is None:
            raise RuntimeError("the WebShop session has not started: call reset(goal_index) first")
        return self.session

    def act(self, action: str) -> StepResult:
        page, reward, done, breakdown = self._session().act(action)
        return StepResult(page, reward, done, breakdown)

    def page(self) -> PageView:
        return self._session().view()

    def instruction_text(self) -> str:
        return self._session().instruction_text

    def goal(self) -> dict[str, Any]:
        return dict(self._session().goal)

    def close(self) -> None:
        self.session = None

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, **self.data.describe()}

    def expert_action(self, actions_left: int) -> str:
        return oracle_action(self._session(), actions_left)


def make_backend(kind: str | WebShopBackend = "mini", **kwargs: Any) -> WebShopBackend:
    """Build a backend by name: ``mini`` (``catalog=``), ``remote`` (``base_url=``,
    ``num_goals=``, ``timeout=``, ``retries=``) or ``inprocess`` (see
    :class:`~.inprocess.InProcessBackend`). A backend instance is returned as is."""
    if isinstance(kind, WebShopBackend):
        if kwargs:
            raise ValueError(f"backend options {sorted(kwargs)} cannot be applied to a ready backend instance")
        return kind
    if kind == "mini":
        unknown = set(kwargs) - {"catalog"}
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for backend 'mini'; it takes: catalog")
        return MiniBackend(**kwargs)
    if kind == "remote":
        from .remote import RemoteBackend

        return RemoteBackend(**kwargs)
    if kind == "inprocess":
        from .inprocess import InProcessBackend

        return InProcessBackend(**kwargs)
    raise ValueError(f"backend must be one of {BACKENDS} or a WebShopBackend, got {kind!r}")
