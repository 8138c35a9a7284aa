"""Every import arrow inside ragen_envs points one way: no module imports, even lazily inside
a function, a module that imports it back (DESIGN.md's layers; issue 11 §7)."""

from __future__ import annotations

import ast
from pathlib import Path

import ragen_envs

ROOT = Path(ragen_envs.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = module.split(".") if is_pkg else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    targets = [base]
    if node.module is None or node.level:
        targets += [f"{base}.{a.name}" for a in node.names]  # `from . import x` may name a module
    return targets


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                targets = _resolve(module, is_pkg, node)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                if t in modules and t != module:
                    graph[module].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_between_modules():
    graph = import_graph()
    # a package's __init__ re-exporting its submodules is not a circle of layers
    for module in graph:
        graph[module] = {t for t in graph[module] if not module.startswith(t + ".")}
    assert _cycles(graph) == []


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    assert "ragen_envs.eval.report" in graph["ragen_envs.eval.results"]  # imported inside a function
    assert "ragen_envs.lm.sampler" in graph["ragen_envs.agents.hf"]
