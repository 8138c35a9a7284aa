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


def test_the_trainer_never_imports_a_command():
    """``ragen_envs.starpo`` sits below the command line: the demo's run-directory claim comes
    from ``ragen_envs._rundir``, not ``commands/`` (only ``python -m ragen_envs.starpo``, the
    ``ragen train`` entry, imports ``ragen_envs.cli``)."""
    graph = import_graph()
    bad = sorted((m, t) for m in graph if m.startswith("ragen_envs.starpo") for t in graph[m]
                 if t.startswith("ragen_envs.commands") or (t == "ragen_envs.cli" and m != "ragen_envs.starpo.__main__"))
    assert bad == []


def test_the_lm_layer_knows_no_http_and_no_command():
    """``lm/`` (the token engine of ``ragen serve`` included) is used by serve, never the reverse."""
    graph = import_graph()
    above = ("ragen_envs.serve", "ragen_envs._http", "ragen_envs.commands", "ragen_envs.cli", "ragen_envs.starpo")
    bad = sorted((m, t) for m in graph if m.startswith("ragen_envs.lm") for t in graph[m] if t.startswith(above))
    assert bad == []


# ----------------------------------------------------------------------------- benchmarks/, labs/, scripts/
CHECKOUT = Path(__file__).resolve().parents[1]
SCRIPT_FOLDERS = ("benchmarks", "labs", "scripts")
# the one helpers module of a folder: its scripts import it, nothing else of the folders
HELPERS = {"benchmarks": "_bench_common", "labs": "_labs_common"}


def imported_names(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports, at any depth (lazy imports too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def script_imports() -> list[tuple[str, str]]:
    """(file, imported script) for every file under the script folders that imports a module of
    those folders other than its own folder's helpers module."""
    scripts = {p.stem: p.parent.name for f in SCRIPT_FOLDERS for p in (CHECKOUT / f).glob("*.py")}
    bad = []
    for folder in SCRIPT_FOLDERS:
        for path in sorted((CHECKOUT / folder).glob("*.py")):
            for name in imported_names(path):
                if name in scripts and name != path.stem and name != HELPERS.get(folder):
                    bad.append((f"{folder}/{path.name}", f"{scripts[name]}/{name}.py"))
    return bad


def test_no_benchmark_lab_or_script_imports_another_script():
    """What scripts share lives in their folder's helpers module (benchmarks/_bench_common.py,
    labs/_labs_common.py) or in ragen_envs, so each script is one command that runs alone."""
    assert script_imports() == []


def test_the_script_check_sees_lazy_and_from_imports(tmp_path, monkeypatch):
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "a.py").write_text("def f():\n    from b import g\n")
    (tmp_path / "labs" / "b.py").write_text("import _labs_common\nimport numpy\n")
    (tmp_path / "labs" / "_labs_common.py").write_text("")
    monkeypatch.setitem(globals(), "CHECKOUT", tmp_path)
    assert script_imports() == [("labs/a.py", "labs/b.py")]
