"""Every fenced command and snippet of README.md and docs/*.md is run or checked (issue 46,
item 5): a renamed flag, folder, module, keyword or output fails here. The blocks are read at
collection time (tests/doc_snippets.py says how each kind is treated); one case per block, named
``doc:line``. The default run executes the cheap commands (``ragen list/play/render``, expert
evaluations, exports) and the snippets; ``-m slow`` also runs ``ragen sft/train`` and local-model
evaluations at tiny sizes, and the TRL snippets. Commands written in the prose (`ragen sft --data`)
are checked too: the program exists and knows each flag."""

from __future__ import annotations

import textwrap

import pytest

import doc_snippets as ds

BLOCKS = [b for b in ds.all_blocks() if b.kind in ("python", "shell", "data")]


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    made: dict[tuple[str, str], ds.DocSession] = {}

    def get(doc: str, mode: str) -> ds.DocSession:
        if (doc, mode) not in made:
            blocks = [b for b in BLOCKS if b.doc == doc]
            made[doc, mode] = ds.DocSession(doc, blocks, tmp_path_factory.mktemp(f"{mode}-{doc.replace('/', '-')}"), mode)
        return made[doc, mode]

    return get


def _check(sessions, block: ds.Block, mode: str) -> list[ds.Result]:
    session = sessions(block.doc, mode)
    return session.result(session.blocks.index(block))


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block(block, sessions):
    _check(sessions, block, "fast")


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block_runs_its_costly_commands_at_tiny_sizes(block, sessions):
    _check(sessions, block, "slow")


INLINE = ds.inline_commands()


@pytest.mark.parametrize("span", INLINE, ids=[i.id for i in INLINE])
def test_prose_command(span):
    """`ragen ...` / `python ...` / `torchrun ...` written in the prose: the program exists and
    knows every flag named (values are the prose's: N, DIR ...)."""
    assert not ds.check_inline(span.text)


# ---------------------------------------------------------------- the rules themselves


@pytest.mark.parametrize("span, error", [
    ("ragen sft --format-x tools", "ragen sft has no flag --format-x"),
    ("ragen evall", "ragen has no command evall"),
    ("ragen sft --stop-at-success S [--validate-evry N]", "ragen sft has no flag --validate-evry"),
    ("python benchmarks/nope.py", "no such path in the repository: benchmarks/nope.py"),
    ("python -m ragen_envs.starpo.demo --procs N", "ragen_envs.starpo.demo has no flag --procs"),
    ("python -m ragen_envs.nope", "no module ragen_envs.nope"),
    ("torchrun --nproc-per-nod=N", "torchrun has no flag --nproc-per-nod"),
])
def test_a_broken_prose_command_fails(span, error):
    assert ds.check_inline(span) == [error]


def test_prose_commands_are_found_outside_fences_only():
    assert len(INLINE) > 50 and {"ragen sft --format tools", "python -m ragen_envs.starpo.demo"} <= {i.text for i in INLINE}
    fenced = {(b.doc, b.line + k) for b in ds.all_blocks() for k in range(b.text.count("\n") + 1)}
    assert not [i.id for i in INLINE if (i.doc, i.line) in fenced]


def test_every_block_has_a_language_the_rules_know():
    unknown = [f"{b.id} ```{b.lang}" for b in ds.all_blocks() if b.kind == "unknown"]
    assert not unknown, f"label these blocks python/bash/console/json/toml or text (output): {unknown}"


def test_the_docs_have_blocks_of_each_kind():
    docs = {b.doc for b in BLOCKS}
    assert {"README.md", "docs/usage.md", "docs/training.md", "docs/eval.md"} <= docs
    assert {b.kind for b in BLOCKS} == {"python", "shell", "data"}
    assert len({b.id for b in BLOCKS}) == len(BLOCKS)


def test_extraction_keeps_indented_fences_and_their_languages():
    text = "intro\n```bash\nragen list\n```\n- item\n  ```python\n  print(1)  # 1\n  ```\n```\nout\n```\n"
    blocks = ds.extract(text, "x.md")
    assert [(b.line, b.lang, b.text) for b in blocks] == [(2, "bash", "ragen list\n"), (6, "python", "print(1)  # 1\n"),
                                                          (9, "", "out\n")]
    assert [b.kind for b in blocks] == ["shell", "python", "output"]


def test_shell_lines_split_into_commands():
    text = ("a --x 1 \\\n    --y 'two words'   # a comment\n"
            "b && c > out.yaml\nd --port 8000 &     # background\n")
    cmds = ds.shell_commands(text)
    assert [c.argv for c in cmds] == [["a", "--x", "1", "--y", "two words"], ["b"], ["c"], ["d", "--port", "8000"]]
    assert [c.line for c in cmds] == [1, 3, 3, 4]
    assert cmds[2].stdout_to == "out.yaml" and cmds[3].background
    assert [c.argv for c in ds.shell_commands("$ ragen list\nragen/Bandit-v0 ...\n", console=True)] == [["ragen", "list"]]


def _doc(tmp_path, body: str) -> ds.DocSession:
    blocks = ds.extract(textwrap.dedent(body), "fake.md")
    return ds.DocSession("fake.md", blocks, tmp_path, "fast")


def _fails(session: ds.DocSession, index: int, message: str):
    with pytest.raises(AssertionError, match=message):
        session.result(index)


@pytest.mark.parametrize("command, message", [
    ("ragen eval ragen/Sokoban-v0 --agent openai:gpt-4o --out runs/x --seed 3", "unrecognized arguments: --seed 3"),
    ("ragen eval ragen/Sokobann-v0 --agent openai:gpt-4o --out runs/x", "unregistered env id ragen/Sokobann-v0"),
    ("ragen train ragen/Sokoban-v0 --model runs/sft/modle --out runs/rl", "reads runs/sft/modle"),
    ("ragen sft ragen/Sokoban-v0 --out runs/sft && ragen serve hf:runs/sft/final", "writes no 'final'"),
    ("python scripts/device_check.py --tiny --devise cpu", "unrecognized arguments: --devise"),
    ("python scripts/no_such_script.py", "no such path in the repository"),
    ("docker build -f spaces/openenv/Dockerfil .", "no such path in the repository: spaces/openenv/Dockerfil"),
    ("python scripts/device_check.py --tiny --out scripts/nofolder/x.json", "scripts/nofolder/x.json"),
    ("python -m ragen_envs.starpo.demo --seeds 3", "unrecognized arguments"),
    ("torchrun --standalone --nproc_per_node=2 -m ragen_envs.starpo ragen/Sokoban-v0 --stepz 3", "--stepz"),
    ("torchrun --nproc-per-nod=2 -m ragen_envs.starpo ragen/Sokoban-v0", "torchrun"),
    ("ragen sft ragen/Sokoban-v0 --format tools --env-kwarg max_turn=2 --out runs/t", "max_turn"),
    ("make demmo", "no target demmo"),
    ("pip install 'ragen-envs[trainn]'", "no extra"),
    (".venv-nope/bin/python -m x", "creates no .venv-nope"),
])
def test_a_broken_command_fails(tmp_path, command, message):
    _fails(_doc(tmp_path, f"```bash\n{command}\n```\n"), 0, message)


def test_parsing_never_runs_the_program(tmp_path):
    session = _doc(tmp_path, """\
        ```bash
        python -m ragen_envs.starpo.demo --out runs/demo
        torchrun --standalone --nproc_per_node=2 -m ragen_envs.starpo ragen/Sokoban-v0 --out runs/t
        make demo
        python scripts/device_check.py --tiny --device cpu --out scripts/new.json
        ```
        """)
    assert [r.ran for r in session.result(0)] == [False, False, False, False]  # an output need not exist
    assert not any(tmp_path.iterdir()) and not (ds.ROOT / "runs" / "demo").exists()


def test_a_command_reading_an_output_of_a_command_not_run_is_parsed_only(tmp_path):
    session = _doc(tmp_path, """\
        ```bash
        ragen eval ragen/Bandit-v0 --agent openai:gpt-4o --out runs/api
        ragen export runs/api --out api.parquet
        ragen eval ragen/Bandit-v0 --agent expert --out runs/exp
        ragen export runs/exp --out exp.jsonl
        ```
        """)
    assert [r.ran for r in session.result(0)] == [False, False, True, True]
    assert (tmp_path / "exp.jsonl").read_text().count("\n") == 2  # --seeds 2 (TINY)


@pytest.mark.parametrize("code, message", [
    ("from ragen_envs.multiagent import parallel_envv\n", "has no parallel_envv"),
    ("import ragen_envs\nragen_envs.make_vecc('ragen/Bandit-v0', 2)\n", "ragen_envs has no make_vecc"),
    ("from ragen_envs.starpo.sampler import CachedResponder\nCachedResponder(m, f, 0, 8, 1.0, g, topp=0.9)\n",
     "takes no keyword topp"),
    ("from ragen_envs.multiagent import parallel_env\nparallel_env('ragen/FrozenLake-v0', group=8)\n",
     "unexpected keyword argument 'group'"),  # **env_kwargs: caught by running it
    ("import gymnasium as gym\nimport ragen_envs\nenv = gym.make('ragen/Bandit-v0')\nobs, info = env.reset(seed=1)\n"
     "print(len(obs) > 0)   # False\n", "the doc says"),
    ("import no_such_package_xyz\n", "not installed"),
])
def test_a_broken_python_snippet_fails(tmp_path, code, message):
    _fails(_doc(tmp_path, f"```python\n{code}```\n"), 0, message)


def test_a_snippet_needing_what_tests_lack_is_checked_not_run(tmp_path):
    session = _doc(tmp_path, """\
        ```python
        from ragen_envs.agents import make_agent
        agent = make_agent("openai:gpt-4o", temperature=0.5)
        ```
        ```python
        out = compute(episodes)
        ```
        ```bash
        ragen sft ragen/Bandit-v0 --out runs/s
        ```
        ```python
        from ragen_envs.lm.chat import load_tokenizer
        tokenizer = load_tokenizer("runs/s/model")
        ```
        ```python
        from ragen_envs.lm.chat import load_tokenizer
        tokenizer = load_tokenizer("runs/s/final")
        ```
        ```python
        import verifiers
        ```
        """)
    assert [r.note for r in session.result(0)] == ["checked, not run: an API model"]
    assert session.result(1)[0].note == "checked, not run: a fragment: uses compute, episodes it never defines"
    assert session.result(2)[0].note == "parsed, not run: a training run (slow)"
    assert session.result(3)[0].note == "checked, not run: its input runs/s/model comes from a command not run here"
    with pytest.raises(AssertionError, match="writes no 'final'"):
        session.result(4)
    if ds._find("verifiers") is None:
        assert session.result(5)[0].note == "checked, not run: needs verifiers, of a venv of its own"


def test_tiny_args_scale_steps_and_append_sizes():
    ns = type("NS", (), {"print_config": False})()
    assert ds.tiny_args("train", ["ragen/Sokoban-v0", "--steps", "200"], ns)[:3] == ["ragen/Sokoban-v0", "--steps", "8"]
    assert ds.tiny_args("train", ["--steps", "25"], ns)[1] == "1"
    assert ds.tiny_args("eval", ["x"], ns) == ["x", "--seeds", "2", "--quiet"]
