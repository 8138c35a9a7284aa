"""The WebShop package sits below the envs: no import circle inside it, nothing above it imported.

Every import is read from the source (module level and inside functions), so a lazy import
that closes a circle counts too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import ragen_envs.webshop

PACKAGE = Path(ragen_envs.webshop.__file__).parent
ABOVE = ("ragen_envs.agents", "ragen_envs.eval", "ragen_envs.envs", "ragen_envs.starpo", "ragen_envs.commands",
         "ragen_envs.cli", "ragen_envs.serve", "ragen_envs.multiagent", "ragen_envs.vector")


def _imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (``from . import x`` gives ``pkg.x``)."""
    module = "ragen_envs.webshop" + ("" if path.stem == "__init__" else f".{path.stem}")
    package = "ragen_envs.webshop"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            found.add(name)
            found |= {f"{name}.{a.name}" for a in node.names}  # `from . import engine`
    found.discard(module)
    return found


def _graph() -> dict[str, set[str]]:
    mods = {("ragen_envs.webshop" + ("" if p.stem == "__init__" else f".{p.stem}")): p for p in PACKAGE.glob("*.py")}
    return {m: {d for d in _imports(p) if d in mods and d != "ragen_envs.webshop"} for m, p in mods.items()}, mods


def test_no_import_circle_inside_webshop():
    graph, _ = _graph()
    assert "ragen_envs.webshop.base" in graph and graph["ragen_envs.webshop.remote"] >= {"ragen_envs.webshop.base"}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(dep):] + [dep]))
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_webshop_imports_nothing_above_it():
    _, mods = _graph()
    offending = {m: sorted(d for d in _imports(p) if d.startswith(ABOVE)) for m, p in mods.items()}
    assert {m: v for m, v in offending.items() if v} == {}


def test_importing_every_webshop_module_loads_no_agent_or_evaluator():
    names = sorted(f"ragen_envs.webshop.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    code = ("import importlib, sys\n"
            f"for n in {names!r}:\n    importlib.import_module(n)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('ragen_envs.agents', 'ragen_envs.eval', 'ragen_envs.starpo'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
