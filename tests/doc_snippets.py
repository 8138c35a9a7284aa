"""The fenced blocks of README.md and docs/*.md as checks (issue 46, item 5): every command and
snippet is run or, where it cannot be run in a test (an API model, a GPU, a server, several
machines), its flags, files, modules and env ids are checked, so a renamed flag, folder or
output fails. Used by tests/test_doc_snippets.py; the blocks are read when the tests are
collected, so a new block is checked without a test edit.

How a block is treated follows from its language and content, never from its place in a doc:

- ```python``` blocks run in a subprocess in the doc's work folder (shared by the doc's blocks,
  in order, so a block may read what an earlier one wrote); prints with a trailing comment
  (``print(x)   # 10.7 True True``) must print that. A block that cannot run (see NOT_RUN,
  PLACEHOLDERS, names it never defines) is compiled and its project imports, attributes and
  keyword arguments are checked against the source.
- ```bash``` / ```sh``` / ```console``` blocks: each command is parsed (every flag must exist in
  its argparse parser; every env id registered; every repository path present; every input a
  file of the repository or an output of an earlier command of the doc, and a run folder's
  file one that kind of run writes: rundir.WRITES). The `ragen` commands of RUN_COST run for
  real at the tiny sizes of TINY (the "slow" ones only in ``mode="slow"``); a command that
  needs what a test lacks (NOT_RUN, PLACEHOLDERS, a server) or reads what a command not run
  wrote is parsed only. Other programs (python scripts and modules, torchrun, make, pip,
  docker) are parsed or looked up, never run: their own tests run them.
- ```json``` / ```toml``` blocks must parse; unlabelled and ```text``` blocks are output or
  format examples and are not run.
- Commands written in the prose (a code span such as `ragen sft --data`): the program must
  exist and know every flag named; their values are the prose's (N, DIR) and are not parsed.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import importlib
import importlib.util
import io
import json
import math
import os
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

ROOT = Path(__file__).resolve().parents[1]
PYTHON_LANGS = {"python", "py", "python3"}
SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
DATA_LANGS = {"json", "toml"}
OUTPUT_LANGS = {"", "text", "txt", "output", "yaml", "yml", "html"}  # shown, not run (yaml: a config excerpt)
KNOWN_LANGS = PYTHON_LANGS | SHELL_LANGS | DATA_LANGS | OUTPUT_LANGS

# ---------------------------------------------------------------- the allow-tables (keep them small)

# Words the docs use for what the reader supplies, with the stand-in parsed in their place
# (None: dropped). A command or snippet holding one is checked, never run, and an input path
# that is one need not exist.
PLACEHOLDERS = {
    "...": None,  # elided arguments
    "path/to/checkpoint": "path/to/checkpoint",  # the reader's model folder
    "run.yaml": "run.yaml",  # the reader's config file
    "M": "M",  # the reader's model (torchrun examples)
    "R": "0",  # this machine's rank (torchrun --node_rank)
    "HOST:29500": "HOST:29500",  # the rendezvous host
    "MODEL": "MODEL",  # the reader's served model name
    "items_shuffle_1000.json": "items_shuffle_1000.json",  # the WebShop download
    "items_ins_v2_1000.json": "items_ins_v2_1000.json",
}
# What a snippet needs that a test machine has not: such a snippet is checked, never run.
NOT_RUN = {
    r"\bopenai:": "an API model",
    r"https?://": "a running server",
    r"\bQwen/": "a Hugging Face hub model (no downloads in tests)",
    r"--device cuda|\bnccl\b|--memory-table": "a GPU",
}
# Python snippets that run only in mode="slow" (a training loop takes tens of seconds).
SLOW_PY = {r"^\s*(from|import)\s+trl\b": "a TRL training loop"}
# Stand-ins for names a doc leaves to the reader (defined before the snippet runs).
PRELUDE = {
    "policy": "def policy(observation):\n    return '<think>go</think><answer>Left</answer>'\n",
}
# `ragen` subcommands that run for real, and when: "fast" in the default run, "slow" only in
# mode="slow"; servers and the rest are parsed only.
RUN_COST = {"list": "fast", "play": "fast", "render": "fast", "export": "fast", "eval": "fast", "sft": "slow",
            "train": "slow"}
# Added to a command run for real (the doc's sizes are for real work; these keep it to seconds).
TINY = {
    "eval": ["--seeds", "2", "--quiet"],
    "sft": ["--episodes", "4", "--steps", "2", "--batch-size", "2", "--heldout", "2"],
    "train": ["--set", "num_groups=2", "--set", "group_size=2", "--set", "eval_episodes=2", "--set",
              "mini_batch_size=2", "--set", "max_new_tokens=6", "--set", "probe_every=0", "--set", "plots=false"],
}
# ... and `ragen train --steps N` runs ceil(N / STEP_SCALE) steps (monotone, so a --resume to more steps still has work)
STEP_SCALE = 25
# `python -m MODULE` that is a `ragen` command
PYTHON_ALIASES = {"ragen_envs.cli": [], "ragen_envs.starpo": ["train"]}
# Shell words that set up the reader's shell, not a project command: nothing to check.
SETUP = {"git", "cd", "export", ".", "source", "echo"}
# Packages that live in a venv of their own (the Makefile's .venv-verl / .venv-verifiers): a
# snippet importing one is checked from source here, not run.
OTHER_VENV = {"verl", "verifiers"}
# Flags whose value is a path the command writes (it need not exist yet, its folder must)
OUTPUT_FLAGS = {"--out", "-o", "--output", "--write-config"}
# `ragen` subcommands that serve until stopped (parsed only)
SERVERS = {"serve", "webshop-server", "openenv-server"}

ENV_ID = re.compile(r"\bragen/[A-Za-z0-9]+-v\d+\b")
_FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)[^\n]*$")


# ---------------------------------------------------------------- extraction


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository, e.g. docs/usage.md
    line: int  # 1-based line of the opening fence
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def kind(self) -> str:
        if self.lang in PYTHON_LANGS:
            return "python"
        if self.lang in SHELL_LANGS:
            return "shell"
        if self.lang in DATA_LANGS:
            return "data"
        return "output" if self.lang in OUTPUT_LANGS else "unknown"


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def extract(text: str, doc: str) -> list[Block]:
    """Every fenced block of a Markdown text (indented fences too, their indent removed)."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        body = "\n".join(line[indent:] if not line[:indent].strip() else line.lstrip() for line in lines[i + 1:j])
        blocks.append(Block(doc, i + 1, lang, body + "\n"))
        i = j + 1
    return blocks


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [b for p in doc_files(root) for b in extract(p.read_text(encoding="utf-8"), p.relative_to(root).as_posix())]


# ---------------------------------------------------------------- shell commands


@dataclass
class Command:
    argv: list[str]
    line: int  # line inside the block (1-based)
    stdout_to: str | None = None
    background: bool = False

    @property
    def text(self) -> str:
        return shlex.join(self.argv)


def shell_commands(text: str, console: bool = False) -> list[Command]:
    """The commands of a shell block: ``\\`` continuations joined, comments cut, split at
    ``&&``, ``||``, ``;``, ``|`` and ``&``; ``> FILE`` kept as the command's stdout. In a
    console block only ``$ `` lines are commands."""
    out: list[Command] = []
    raw = text.splitlines()
    i = 0
    while i < len(raw):
        start, line = i + 1, raw[i]
        while line.rstrip().endswith("\\") and i + 1 < len(raw):
            i += 1
            line = line.rstrip()[:-1] + " " + raw[i]
        i += 1
        if console:
            if not line.lstrip().startswith("$ "):
                continue
            line = line.lstrip()[2:]
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lex.whitespace_split = True
        lex.commenters = "#"
        words = list(lex)
        cur = Command([], start)
        it = iter(words)
        for w in it:
            if w in ("&&", "||", ";", "|", "&"):
                cur.background = w == "&"
                if cur.argv:
                    out.append(cur)
                cur = Command([], start)
            elif w in (">", ">>"):
                cur.stdout_to = next(it, None)
            else:
                cur.argv.append(w)
        if cur.argv:
            out.append(cur)
    return out


# ---------------------------------------------------------------- parsing without running


class _Parsed(Exception):
    def __init__(self, namespace):
        super().__init__("parsed")
        self.namespace = namespace


@contextlib.contextmanager
def _stop_at_parse():
    """Make the outermost ``ArgumentParser.parse_args`` / ``parse_known_args`` raise
    :class:`_Parsed` with its result, so a program is parsed and never run. Abbreviated flags
    are refused: ``--seed`` must not pass for ``--seeds`` (nor a renamed ``--seeds-list``)."""
    pa, pka, depth = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, [0]

    def wrap(orig, take):
        def f(self, *a, **k):
            self.allow_abbrev = False
            depth[0] += 1
            try:
                res = orig(self, *a, **k)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                raise _Parsed(take(res))
            return res
        return f

    argparse.ArgumentParser.parse_args = wrap(pa, lambda r: r)
    argparse.ArgumentParser.parse_known_args = wrap(pka, lambda r: r[0])
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = pa, pka


def parse_program(target: str, args: list[str], module: bool, python: str = "python") -> argparse.Namespace | None:
    """Parse ``args`` with the argparse parser of a module (``python -m target``) or script
    (``python target``) without running it. Raises AssertionError with argparse's message on a
    flag it does not know. ``python``: the interpreter the doc names; one of another venv of
    the Makefile (.venv-verl/bin/python: its packages clash with this venv's) parses there when
    it has been built (`make test` builds it), else only the program's file is looked for."""
    if python.startswith(".venv-"):
        return _parse_in_other_venv(target, args, module, ROOT / python)
    if module:
        spec = importlib.util.find_spec(target)
        assert spec is not None, f"no module {target}"
        origin = spec.origin
        if spec.submodule_search_locations:  # a package: its __main__
            origin = str(Path(spec.origin).with_name("__main__.py"))
    else:
        origin = str(ROOT / target)
        assert Path(origin).is_file(), f"no script {target}"
    source = Path(origin).read_text(encoding="utf-8")
    assert "argparse" in source or "from ..cli import main" in source or "cli import main" in source, \
        f"{target}: no argparse parser to check its flags with"
    err, saved = io.StringIO(), sys.argv[:]
    sys.argv = [origin, *args]
    try:
        with _stop_at_parse(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: "found in sys.modules" (imported before)
            if module:
                runpy.run_module(target, run_name="__main__", alter_sys=False)
            else:
                runpy.run_path(origin, run_name="__main__")
    except _Parsed as parsed:
        return parsed.namespace
    except SystemExit as exc:
        raise AssertionError(f"{target} {shlex.join(args)}: {err.getvalue().strip() or exc}") from None
    finally:
        sys.argv = saved
    raise AssertionError(f"{target} finished without parsing its arguments")


def _parse_in_other_venv(target: str, args: list[str], module: bool, python: Path) -> argparse.Namespace | None:
    if not python.exists():
        found = (ROOT / (target.replace(".", "/") + ".py")).exists() or (ROOT / target.replace(".", "/")).is_dir() \
            if module else (ROOT / target).is_file()
        assert found or not target.startswith(("ragen_envs", "scripts")), f"no {target}"
        return None
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import doc_snippets as d; "
            "d.parse_program(sys.argv[2], sys.argv[4:], sys.argv[3] == 'm')")
    res = subprocess.run([str(python), "-c", code, str(Path(__file__).parent), target, "m" if module else "s", *args],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "failed"
    return argparse.Namespace()


# ---------------------------------------------------------------- commands inside prose


@dataclass(frozen=True)
class Inline:
    doc: str
    line: int
    text: str  # the code span, e.g. ragen sft --format tools

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}:`{self.text[:40]}`"


_INLINE = re.compile(r"(?<!`)`((?:ragen [a-z]|python3? |torchrun)[^`]*)`(?!`)")


def inline_commands(root: Path = ROOT) -> list[Inline]:
    """The ``ragen ...`` / ``python ...`` / ``torchrun ...`` code spans of the prose (outside
    fenced blocks): their programs and flags are checked, not their values (prose writes
    ``--seeds N``, ``hf:DIR``)."""
    out = []
    for path in doc_files(root):
        inside = False
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                out += [Inline(path.relative_to(root).as_posix(), n, m.group(1).strip()) for m in _INLINE.finditer(line)]
    return out


class _Grabbed(Exception):
    def __init__(self, parser):
        super().__init__("grabbed")
        self.parser = parser


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return set(parser._option_string_actions)


def program_options(words: list[str]) -> tuple[str, set[str] | None]:
    """(what the words run, the option strings its parser knows; None when it cannot be read
    here). Raises AssertionError when the program does not exist."""
    if words[0] == "ragen":
        from ragen_envs.cli import build_parser

        sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
        assert words[1] in sub.choices, f"ragen has no command {words[1]}"
        return f"ragen {words[1]}", _options(sub.choices[words[1]])
    if words[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        return "torchrun", _options(get_args_parser())
    if words[1:2] == ["-c"] or len(words) < 2 or words[1] == "-m" and (len(words) < 3 or words[2] == "..."):
        return "python", None
    module = words[1] == "-m"
    target = words[2] if module else words[1]
    if module and not target.startswith("ragen_envs"):
        return target, None  # another package (sglang, verl ...): not this project's to check
    if module:
        spec = _find(target)
        assert spec is not None, f"no module {target}"
        origin = Path(spec.origin).with_name("__main__.py") if spec.submodule_search_locations else Path(spec.origin)
    else:
        origin = ROOT / target
        assert origin.is_file(), f"no such path in the repository: {target}"
    if "argparse" not in origin.read_text(encoding="utf-8"):
        return target, None
    pa, pka, saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, sys.argv[:]

    def grab(self, *a, **k):
        raise _Grabbed(self)

    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = grab
    sys.argv = [str(origin)]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if module:
                runpy.run_module(target, run_name="__main__", alter_sys=False)
            else:
                runpy.run_path(str(origin), run_name="__main__")
    except _Grabbed as g:
        return target, _options(g.parser)
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = pa, pka
        sys.argv = saved
    return target, None


def check_inline(span: str) -> list[str]:
    """The errors of one prose command: a program that does not exist, a flag its parser lacks."""
    words = span.replace("[", " ").replace("]", " ").split()
    try:
        what, options = program_options(words)
    except AssertionError as exc:
        return [str(exc)]
    if options is None:
        return []
    if what == "torchrun":  # its own flags come before the program (or an ellipsis)
        words = words[:next((i for i, w in enumerate(words) if w in ("-m", "...") or w.endswith(".py")), len(words))]
    flags = [w.split("=", 1)[0] for w in words if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", w)]
    return [f"{what} has no flag {f}" for f in flags if f not in options and f != "-m"]


# ---------------------------------------------------------------- a doc's session (its blocks in order)


def _registered(env_id: str) -> bool:
    import gymnasium as gym

    import ragen_envs  # noqa: F401

    return env_id in gym.registry


def _check_ids(text: str) -> list[str]:
    return [f"unregistered env id {i}" for i in ENV_ID.findall(text) if not _registered(i)]


_TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} - {"runs"}


def _repo_path_errors(words: list[str]) -> list[str]:
    """A word that names a path under a folder of the repository (scripts/, labs/, spaces/ ...)
    must exist (an output, after --out / -o, only its folder); a .venv* folder must be one the
    Makefile creates."""
    errors, makefile = [], (ROOT / "Makefile").read_text()
    for before, w in zip(["", *words], words):
        w = w.split("=", 1)[-1] if w.startswith("-") else w
        first = w.split("/", 1)[0]
        path = ROOT / w.rstrip("/")
        if "/" in w and first in _TOP and not ENV_ID.fullmatch(w) and \
                not (path.exists() or before in OUTPUT_FLAGS and path.parent.is_dir()):
            errors.append(f"no such path in the repository: {w}")
        if first.startswith(".venv") and first not in re.findall(r"\?=\s*(\.venv[\w-]*)", makefile) + [".venv"]:
            errors.append(f"the Makefile creates no {first}")
    return errors


def stand_ins(words: list[str]) -> list[str]:
    """``words`` with each placeholder (alone or after ``=``) replaced by its stand-in."""
    out = []
    for w in words:
        key, eq, value = w.rpartition("=") if "=" in w else ("", "", w)
        if value in PLACEHOLDERS:
            if PLACEHOLDERS[value] is None:
                continue
            w = key + eq + PLACEHOLDERS[value]
        out.append(w)
    return out


def _placeholder(words: list[str]) -> str | None:
    for w in words:
        for p in PLACEHOLDERS:
            if w == p or w.endswith(":" + p) or w.endswith("=" + p):
                return p
    return None


def _not_run_reason(text: str) -> str | None:
    for pattern, why in NOT_RUN.items():
        if re.search(pattern, text, flags=re.M):
            return why
    return None


@dataclass
class Result:
    what: str  # the command or "python"
    ran: bool
    note: str = ""


@dataclass
class DocSession:
    """The blocks of one doc, processed in order in one work folder. ``mode``: "fast" (the
    default test run) or "slow" (also the costly commands at tiny sizes)."""

    doc: str
    blocks: list[Block]
    workdir: Path
    mode: str = "fast"
    produced: dict[str, tuple[str, bool]] = field(default_factory=dict)  # path -> (kind, really there)
    done: dict[int, list[Result] | BaseException] = field(default_factory=dict)

    def result(self, index: int) -> list[Result]:
        for i in range(len(self.done), index + 1):
            try:
                self.done[i] = self._process(self.blocks[i])
            except Exception as exc:  # recorded; the block's own test reports it
                self.done[i] = exc
        res = self.done[index]
        if isinstance(res, BaseException):
            raise res
        return res

    # ---- blocks

    def _process(self, block: Block) -> list[Result]:
        if block.kind == "data":
            if block.lang == "json":
                json.loads(block.text)
            elif tomllib is None:
                return [Result(block.lang, False, "not parsed: no tomllib before Python 3.11")]
            else:
                tomllib.loads(block.text)
            return [Result(block.lang, False, "parses")]
        if block.kind == "python":
            return [self._python(block)]
        if block.kind == "shell":
            results = []
            for cmd in shell_commands(block.text, console=block.lang == "console"):
                try:
                    results.append(self._command(cmd))
                except AssertionError as exc:
                    raise AssertionError(f"{block.doc}:{block.line + cmd.line}: {cmd.text}\n  {exc}") from None
            return results
        return []

    # ---- python

    def _python(self, block: Block) -> Result:
        code = block.text
        errors = check_python_statically(code)
        errors += _check_ids(code)
        assert not errors, "\n".join(errors)
        free = free_names(code)
        reason = _not_run_reason(_without_comments(code))
        literals = sorted(n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant)
                          and isinstance(n.value, str))
        placeholder = _placeholder(literals)
        reason = reason or (f"placeholder {placeholder!r}" if placeholder else None)
        missing = sorted(free - set(PRELUDE))
        reason = reason or (f"a fragment: uses {', '.join(missing)} it never defines" if missing else None)
        elsewhere = sorted(t for t in _imported(code) if t in OTHER_VENV and _find(t) is None)
        reason = reason or (f"needs {elsewhere[0]}, of a venv of its own" if elsewhere else None)
        unmade = [p for p in literals if self._produced_as(p) and not self._real(p)]
        reason = reason or (f"its input {unmade[0]} comes from a command not run here" if unmade else None)
        if not reason:
            for pattern, why in SLOW_PY.items():
                if re.search(pattern, code, flags=re.M) and self.mode != "slow":
                    reason = why + " (slow)"
        if reason:
            return Result("python", False, f"checked, not run: {reason}")
        prelude = "".join(PRELUDE[n] for n in sorted(free & set(PRELUDE)))
        res = subprocess.run([sys.executable, "-c", prelude + code], cwd=self.workdir, env=_env(), capture_output=True,
                             text=True, timeout=600, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, f"the snippet failed:\n{res.stderr[-3000:]}"
        want = expected_prints(code)
        if want:
            assert res.stdout.splitlines() == want, f"printed {res.stdout.splitlines()}, the doc says {want}"
        return Result("python", True)

    # ---- shell

    def _command(self, cmd: Command) -> Result:
        argv = cmd.argv
        errors = _check_ids(" ".join(argv)) + _repo_path_errors(argv)
        assert not errors, "; ".join(errors)
        prog = argv[0]
        if prog in SETUP:
            return Result(cmd.text, False, "shell setup")
        if prog == "ragen":
            return self._ragen(cmd, argv[1:])
        if prog == "make":
            return self._make(argv[1:])
        if prog.endswith("pip") or prog == "pip3":
            return self._pip(argv[1:])
        if re.fullmatch(r"(.*/)?python3?(\.\d+)?", prog):
            return self._python_cmd(cmd, prog, argv[1:])
        if prog == "torchrun":
            return self._torchrun(argv[1:])
        return Result(cmd.text, False, "another tool: its paths and env ids checked")

    def _python_cmd(self, cmd: Command, prog: str, args: list[str]) -> Result:
        other_venv = prog.startswith(".venv-")
        if args[:1] == ["-m"]:
            module, rest = args[1], args[2:]
            if module in PYTHON_ALIASES:
                return self._ragen(cmd, PYTHON_ALIASES[module] + rest)
            if module.startswith("ragen_envs"):
                parsed = parse_program(module, stand_ins(rest), module=True, python=prog)
                return Result(cmd.text, False, "parsed (a long run)" if parsed is not None else
                              f"found ({prog} is not built here: not parsed)")
            if not other_venv:
                assert importlib.util.find_spec(module.split(".")[0]) is not None, f"no module {module}"
            return Result(cmd.text, False, "another package's module")
        script, rest = args[0], args[1:]
        parsed = parse_program(script, stand_ins(rest), module=False, python=prog)
        return Result(cmd.text, False, "parsed" if parsed is not None else f"found ({prog} is not built here)")

    def _torchrun(self, args: list[str]) -> Result:
        from torch.distributed.run import get_args_parser

        try:
            with _stop_at_parse(), contextlib.redirect_stderr(io.StringIO()) as err:
                get_args_parser().parse_args(stand_ins(args))
        except _Parsed as parsed:
            ns = parsed.namespace
        except SystemExit:
            raise AssertionError(f"torchrun: {err.getvalue().strip()}") from None
        inner = ["-m", ns.training_script] if ns.module else [ns.training_script]
        target = ns.training_script
        rest = stand_ins(ns.training_script_args)
        if ns.module and target in PYTHON_ALIASES:
            self._ragen_parse(PYTHON_ALIASES[target] + rest)
        else:
            parse_program(target, rest, module=ns.module)
        return Result("torchrun " + shlex.join(inner + rest), False, "parsed (several processes)")

    def _make(self, args: list[str]) -> Result:
        text = (ROOT / "Makefile").read_text()
        for target in [a for a in args if not a.startswith("-") and "=" not in a]:
            m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)*)", text, flags=re.M)
            assert m, f"the Makefile has no target {target}"
            for line in m.group(1).splitlines():  # the recipe's project modules, parsed
                words = shlex.split(line.strip())
                if words[:2] and words[0] == "$(PY)" and words[1] == "-m" and words[2].startswith("ragen_envs"):
                    parse_program(words[2], words[3:], module=True)
        return Result("make " + " ".join(args), False, "target found, its recipe parsed")

    def _pip(self, args: list[str]) -> Result:
        extras = _extras()
        for a in args:
            m = re.fullmatch(r"(?:ragen-envs|\.)\[([\w,-]+)\].*", a)
            if m:
                unknown = [e for e in m.group(1).split(",") if e not in extras]
                assert not unknown, f"pyproject.toml has no extra {unknown}"
        return Result("pip " + " ".join(args), False, "extras exist")

    # ---- ragen

    def _ragen_parse(self, args: list[str]) -> argparse.Namespace:
        from ragen_envs.cli import build_parser

        err = io.StringIO()
        try:
            with _stop_at_parse(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(args)
        except _Parsed as parsed:
            return parsed.namespace
        except SystemExit:
            raise AssertionError(err.getvalue().strip() or "ragen: bad arguments") from None

    def _ragen(self, cmd: Command, args: list[str]) -> Result:
        args = stand_ins(args)
        ns = self._ragen_parse(args)
        sub = ns.command
        agent = getattr(ns, "agent", None)
        assert agent is None or re.fullmatch(r"(openai|hf):\S+|expert|random", agent), f"unknown agent {agent}"
        _check_env_kwargs(ns)
        inputs = self._inputs(ns, sub)
        virtual = [p for p in inputs if not self._real(p)]
        out = getattr(ns, "out", None) if sub not in ("list", "play") else None
        reason = ("serves until stopped" if sub in SERVERS else
                  None if sub in RUN_COST else "not run in tests")
        reason = reason or _not_run_reason(cmd.text) or (
            f"placeholder {_placeholder(cmd.argv)!r}" if _placeholder(cmd.argv) else None)
        if not reason and sub == "eval" and agent.startswith("hf:") and self.mode != "slow":
            reason = "a local model (slow)"
        if not reason and RUN_COST[sub] == "slow" and self.mode != "slow" and not getattr(ns, "print_config", False):
            reason = "a training run (slow)"
        if not reason and virtual:
            reason = f"its input {virtual[0]} comes from a command not run here"
        if reason:
            if out:
                self.produced[str(out)] = (sub, False)
            if cmd.stdout_to:
                self.produced[cmd.stdout_to] = ("file", False)
            return Result(cmd.text, False, f"parsed, not run: {reason}")
        run_args = tiny_args(sub, args, ns)
        stdout = open(self.workdir / cmd.stdout_to, "w") if cmd.stdout_to else subprocess.PIPE
        try:
            res = subprocess.run([sys.executable, "-m", "ragen_envs.cli", *run_args], cwd=self.workdir, env=_env(),
                                 stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=600)
        finally:
            if cmd.stdout_to:
                stdout.close()
        assert res.returncode == 0, f"ragen {shlex.join(run_args)} failed:\n{(res.stderr or '')[-3000:]}"
        if out:
            assert (self.workdir / out).exists(), f"wrote no {out}"
            self.produced[str(out)] = (sub, True)
        if cmd.stdout_to:
            self.produced[cmd.stdout_to] = ("file", True)
        return Result(cmd.text, True)

    def _inputs(self, ns: argparse.Namespace, sub: str) -> list[str]:
        """The paths the command reads; each must be a placeholder, in the repository, or an
        output of an earlier command of the doc (a run folder's own file: rundir.WRITES)."""
        paths = []
        for name in ("model", "data", "config", "compare", "agent"):
            value = getattr(ns, name, None)
            if isinstance(value, str) and (name != "agent" or value.startswith("hf:")):
                paths.append(value.removeprefix("hf:"))
        if sub == "export":
            paths += list(ns.runs)
        if getattr(ns, "resume", False):
            paths.append(ns.out)
        found = []
        for p in paths:
            if p in PLACEHOLDERS or (ROOT / p).exists() or (self.workdir / p).exists():
                continue
            hit = self._produced_as(p)
            if hit is None and not self._hub_id(p):
                raise AssertionError(f"reads {p}: no earlier command of {self.doc} writes it and the repository "
                                     f"has no such file")
            if hit is not None:
                found.append(p)
        return found

    def _produced_as(self, path: str) -> str | None:
        from ragen_envs._rundir import WRITES

        if path in self.produced:
            return path
        for out, (kind, _) in self.produced.items():
            if path.startswith(out.rstrip("/") + "/"):
                first = path[len(out.rstrip("/")) + 1:].split("/")[0]
                assert kind not in WRITES or first in WRITES[kind], \
                    f"{path}: a `ragen {kind}` run writes no {first!r} (it writes {sorted(WRITES[kind])})"
                return path
        return None

    def _hub_id(self, path: str) -> bool:
        """owner/name whose owner is no folder the doc or the repository uses: a hub model."""
        first = path.split("/")[0]
        return path.count("/") == 1 and first not in _TOP and not any(o.split("/")[0] == first for o in self.produced)

    def _real(self, path: str) -> bool:
        if (ROOT / path).exists() or (self.workdir / path).exists() or path in PLACEHOLDERS:
            return True
        for out, (_, real) in self.produced.items():
            if path == out or path.startswith(out.rstrip("/") + "/"):
                return real
        return True  # a hub id: never run anyway


def _check_env_kwargs(ns: argparse.Namespace) -> None:
    """``--env-kwarg KEY=VALUE`` pairs make each named env (the command's own gate:
    commands.make_env_or_fail), so a renamed or out-of-bounds kwarg fails without a run."""
    if not getattr(ns, "env_kwarg", None):
        return
    from ragen_envs.cli import CLIError
    from ragen_envs.commands import make_env_or_fail, parse_env_kwargs

    ids = getattr(ns, "env_ids", None) or [getattr(ns, "env_id", None)]
    for env_id in [i for i in ids if i and i != "all"]:
        try:
            make_env_or_fail(env_id, **parse_env_kwargs(ns.env_kwarg)).close()
        except CLIError as exc:
            raise AssertionError(f"{env_id}: {exc}") from None


def tiny_args(sub: str, args: list[str], ns: argparse.Namespace) -> list[str]:
    """The command as run in a test: TINY's sizes appended (argparse keeps the last value) and
    ``train --steps N`` scaled to ``ceil(N / STEP_SCALE)`` (1 step when a new run names none)."""
    if getattr(ns, "print_config", False):
        return args
    out = list(args)
    if sub == "train" and "--steps" in out:
        i = out.index("--steps")
        out[i + 1] = str(max(1, math.ceil(int(out[i + 1]) / STEP_SCALE)))
    elif sub == "train" and not getattr(ns, "resume", False):
        out += ["--steps", "1"]  # the default 200 steps
    return [*out, *TINY.get(sub, [])]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    return env


# ---------------------------------------------------------------- python snippets, statically

_EXPECT = re.compile(r"^\s*print\(.*\)\s+#\s*(?P<want>.+)$")


def expected_prints(code: str) -> list[str]:
    """The expected output the snippet's prints carry as trailing comments, in order."""
    return [m.group("want").strip() for line in code.splitlines() if (m := _EXPECT.match(line))]


def _without_comments(code: str) -> str:
    import tokenize

    toks = [t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type != tokenize.COMMENT]
    return tokenize.untokenize(toks)


def free_names(code: str) -> set[str]:
    """Names the snippet reads but never binds (imports, assignments, defs, loop and with
    targets, comprehension variables, parameters), builtins excepted."""
    tree = ast.parse(code)
    bound, read = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound


def _module_source(name: str) -> tuple[ast.Module, str] | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8")), spec.origin


def _package_of(name: str, origin: str) -> str:
    return name if origin.endswith("__init__.py") else name.rpartition(".")[0]


def _definition(module: str, name: str, depth: int = 0):
    """The ast node defining ``module.name`` (following ``from .x import name``), ``True`` when
    it is bound some other way or a submodule, ``None`` when the module does not have it."""
    src = _module_source(module)
    if src is None or depth > 6:
        return True  # not a source file we can read: nothing to hold against it
    tree, origin = src
    if _is_package(origin) and _find(f"{module}.{name}") is not None:  # a submodule
        return True
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if (a.asname or a.name) == name:
                    base = importlib.util.resolve_name("." * node.level + (node.module or ""),
                                                       _package_of(module, origin)) if node.level else node.module
                    if not base.startswith("ragen_envs"):
                        return True
                    return _definition(base, a.name, depth + 1)
        if isinstance(node, ast.Import) and any((a.asname or a.name) == name for a in node.names):
            return True
        for t in _targets(node):
            if t == name:
                return True
    if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
        try:
            return True if hasattr(importlib.import_module(module), name) else None
        except ImportError:
            return True
    return None


def _is_package(origin: str) -> bool:
    return origin.endswith("__init__.py")


def _targets(node) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, (ast.If, ast.Try)):
        return [t for sub in node.body + getattr(node, "orelse", []) for t in _targets(sub)]
    return []


def _parameters(node) -> set[str] | None:
    """Keyword names a call of ``node`` accepts; None when anything goes (**kwargs, unknown)."""
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            if node.bases:  # inherited, or a dataclass: its fields
                return None
            return {t for n in node.body for t in _targets(n)}
        node = init
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.args.kwarg:
        return None
    a = node.args
    return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}


def check_python_statically(code: str) -> list[str]:
    """The snippet's project imports exist, the attributes it takes of project modules exist,
    and its calls of project functions and classes pass keywords they accept. Third-party
    imports must be installed (when another venv holds them, the project module importing them
    is still checked from its source)."""
    tree = ast.parse(code)
    errors, bound = [], {}  # local name -> ("module", name) | ("attr", module, attr)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top == "ragen_envs" and _module_source(a.name) is None:
                    errors.append(f"no module {a.name}")
                elif top != "ragen_envs" and _find(top) is None and not _other_venv(top):
                    errors.append(f"module {top} is not installed")
                if top == "ragen_envs":
                    bound[a.asname or top] = ("module", a.name if a.asname else top)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] != "ragen_envs":
                top = node.module.split(".")[0]
                if _find(top) is None and not _other_venv(top):
                    errors.append(f"module {top} is not installed")
                continue
            if _module_source(node.module) is None:
                errors.append(f"no module {node.module}")
                continue
            for a in node.names:
                d = _definition(node.module, a.name)
                if d is None:
                    errors.append(f"{node.module} has no {a.name}")
                bound[a.asname or a.name] = ("attr", node.module, a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                bound.get(node.value.id, ("",))[0] == "module":
            if _definition(bound[node.value.id][1], node.attr) is None:
                errors.append(f"{bound[node.value.id][1]} has no {node.attr}")
        if isinstance(node, ast.Call):
            target = None
            if isinstance(node.func, ast.Name) and bound.get(node.func.id, ("",))[0] == "attr":
                target = bound[node.func.id][1:]
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and \
                    bound.get(node.func.value.id, ("",))[0] == "module":
                target = (bound[node.func.value.id][1], node.func.attr)
            if target is None:
                continue
            d = _definition(*target)
            accepted = _parameters(d) if d not in (None, True) else None
            if accepted is not None:
                wrong = [k.arg for k in node.keywords if k.arg and k.arg not in accepted]
                if wrong:
                    errors.append(f"{'.'.join(target)}() takes no keyword {', '.join(wrong)}")
    return errors


def _extras() -> set[str]:
    """The extras of pyproject.toml's [project.optional-dependencies] (read without tomllib)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*=", section, flags=re.M))


def _imported(code: str) -> set[str]:
    """The top-level packages a snippet imports."""
    tops = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            tops.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            tops.add(node.module.split(".")[0])
    return tops


def _find(top: str):
    try:
        return importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None


def _other_venv(top: str) -> bool:
    return top in OTHER_VENV
