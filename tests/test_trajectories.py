"""Trajectories as datasets (issue 19 item 6): an eval run and a trainer's rollouts export to a
file `datasets.load_dataset` reads whose fields equal the episodes; `ragen sft --data` and
TRL's SFTTrainer train from it; bad inputs are one-line errors."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")

from ragen_envs.agents import Agent, make_agent  # noqa: E402
from ragen_envs.cli import main as cli_main  # noqa: E402
from ragen_envs.eval import evaluate, read_episodes  # noqa: E402
from ragen_envs.trajectories import COLUMNS, episode_row  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64}
SOKOBAN_KWARGS = {"max_turns": 2}


class Recording(Agent):
    """Random well-formed answers with text after the answer (which the reference's history
    drops), recording every conversation it is shown."""

    def __init__(self, env, seed, log):
        self.inner = make_agent("random", env=env, seed=seed)
        self.log = log.setdefault((env.spec.id, seed), [])

    def act(self, messages):
        self.log.append([dict(m) for m in messages])
        return self.inner.act(messages) + " Done."


def _load(path):
    kind = "parquet" if str(path).endswith(".parquet") else "json"
    return datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(Path(path).parent / "hf"))


def _one_line_error(capsys, argv, match):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    # what a terminal shows: each line after its last carriage return (library progress bars redraw with \r)
    shown = [line.rsplit("\r", 1)[-1] for line in err.rstrip("\n").split("\n")]
    ours = [line for line in shown if line.startswith("ragen ")]
    assert len(ours) == 1 and ours[0] == shown[-1] and re.search(match, ours[0]), err
    assert "Traceback" not in err and all("it/s]" in line for line in shown[:-1]), err
    return ours[0]


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "run"
    seen: dict = {}
    evaluate(lambda env, seed: Recording(env, seed, seen), ["ragen/Sokoban-v0", "ragen/FrozenLake-v0"], [123, 124, 125],
             out, concurrency=1, env_kwargs={"max_turns": 3}, progress=False)
    return out, seen


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from ragen_envs.models import build_tiny_checkpoint

    return str(build_tiny_checkpoint(tmp_path_factory.mktemp("model") / "tiny", **TINY))


@pytest.fixture(scope="module")
def train_run(tmp_path_factory, tiny_model):
    """Two StarPO-S steps with save_rollouts; the trajectories as the trainer held them."""
    from ragen_envs.starpo.config import make_config
    from ragen_envs.starpo.trainer import StarPOTrainer

    out = tmp_path_factory.mktemp("train") / "run"
    cfg = make_config("starpo-s", out_dir=str(out), model=tiny_model, steps=2, num_groups=2, group_size=2,
                      max_new_tokens=10, eval_every=2, eval_episodes=2, probe_every=0, mini_batch_size=4, micro_batch_size=2,
                      keep_ratio=0.5, save_every=0, log_samples=0, plots=False, save_rollouts=True,
                      env_kwargs=SOKOBAN_KWARGS)
    trainer = StarPOTrainer(cfg, log=lambda _m: None)
    held = []
    rollout = trainer.rollout

    def keep(base_seed):
        trajs = rollout(base_seed)
        held.extend((trainer.step, t) for t in trajs)
        return trajs

    trainer.rollout = keep
    trainer.train()
    return out, held, trainer.last_eval


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_eval_run_round_trip_fields_equal_the_episodes(eval_run, tmp_path, capsys, suffix):
    run, seen = eval_run
    out = tmp_path / f"ds{suffix}"
    assert cli_main(["export", str(run), "--out", str(out)]) == 0
    assert "wrote 6 episodes (eval;" in capsys.readouterr().out
    ds = _load(out)
    assert ds.column_names == list(COLUMNS) and len(ds) == 6
    episodes = {(e.env_id, e.seed): e for e in read_episodes(run)}
    reformatted_somewhere = False
    for row in ds:
        ep = episodes[(row["env_id"], row["seed"])]
        assert row["messages"] == ep.messages(reformat=False)
        assert [m["content"] for m in row["messages"][2::2]] == [t.response for t in ep.turns]
        assert row["rewards"] == [t.reward for t in ep.turns] and row["return"] == pytest.approx(ep.total_reward)
        assert row["format_penalties"] == [t.format_penalty for t in ep.turns]
        assert (row["success"], row["num_turns"], row["noise_seed"]) == (ep.success, len(ep.turns), None)
        assert json.loads(row["env_kwargs"]) == {"max_turns": 3} and row["source"] == "eval"
        assert row["token_ids"] is None and row["history"] == "reformatted"
        assert row["final_observation"] == ep.final_observation
        # exactly the texts the agent saw: every prompt rebuilt from the row equals the recorded one
        prompts = seen[(row["env_id"], row["seed"])]
        assert len(prompts) == row["num_turns"]
        users = [m["content"] for m in row["messages"][1::2]]
        for k, prompt in enumerate(prompts):
            rebuilt = [row["messages"][0]]
            for j in range(k):
                rebuilt += [{"role": "user", "content": users[j]}, {"role": "assistant", "content": row["history_replies"][j]}]
            assert prompt == rebuilt + [{"role": "user", "content": users[k]}]
        reformatted_somewhere |= row["history_replies"][:-1] != [m["content"] for m in row["messages"][2:-1:2]]
    assert reformatted_somewhere  # the " Done." after the answer is not in the history the agent saw


def test_trainer_rollout_export_holds_the_trajectories_token_ids_and_loss_masks(train_run, tmp_path, capsys):
    run, held, _ = train_run
    assert (run / "rollouts.jsonl").is_file() and len(held) == 8
    out = tmp_path / "rollouts.parquet"
    assert cli_main(["export", str(run), "--out", str(out)]) == 0
    assert "8 with token ids" in capsys.readouterr().out
    rows = {(r["step"], r["group"], r["member"]): r for r in _load(out)}
    assert len(rows) == 8
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for step, t in held:
        row = rows[(step, t.group, t.member)]
        assert row["token_ids"] == t.token_ids and row["loss_mask"] == t.loss_mask and 1 in row["loss_mask"]
        assert row["rewards"] == t.turn_rewards and row["return"] == pytest.approx(t.episode_return)
        assert row["messages"] == t.episode.messages(reformat=False) and row["history"] == "as_written"
        assert (row["seed"], row["noise_seed"]) == (t.episode.seed, t.episode.noise_seed)
        assert json.loads(row["env_kwargs"]) == SOKOBAN_KWARGS and row["source"] == "train"
        # the replies in the messages are the decoded sampled spans (with the forced prefix)
        from ragen_envs.lm.chat import load_tokenizer
        from ragen_envs.lm.masks import mask_spans

        tok = load_tokenizer(row["agent"])
        for (a, b), reply in zip(mask_spans(row["loss_mask"]), row["messages"][2::2]):
            body = row["token_ids"][a:b]
            body = body[:-1] if body[-1] == tok.convert_tokens_to_ids("<|im_end|>") else body
            assert "<think>" + tok.decode(body, skip_special_tokens=False) == reply["content"]
    for step in (0, 1):
        kept = [r["kept"] for k, r in rows.items() if k[0] == step]
        assert sum(kept) / len(kept) == metrics[step]["rollout/kept_fraction"]
    assert cli_main(["export", str(run), "--out", str(tmp_path / "kept.jsonl"), "--kept-only"]) == 0
    assert all(r["kept"] for r in _load(tmp_path / "kept.jsonl"))
    # a resumed run appends the steps after its checkpoint again: the last record of a rollout wins
    again = tmp_path / "resumed"
    again.mkdir()
    (again / "config.json").write_text((run / "config.json").read_text())
    lines = (run / "rollouts.jsonl").read_text().splitlines()
    replayed = [json.loads(x) for x in lines if json.loads(x)["step"] == 1]
    for rec in replayed:
        rec["kept"] = not rec["kept"]
    (again / "rollouts.jsonl").write_text("\n".join(lines + [json.dumps(r) for r in replayed]) + "\n")
    assert cli_main(["export", str(again), "--out", str(tmp_path / "resumed.parquet")]) == 0
    resumed = {(r["step"], r["group"], r["member"]): r["kept"] for r in _load(tmp_path / "resumed.parquet")}
    assert len(resumed) == 8 and all(resumed[k] == (not rows[k]["kept"]) for k in rows if k[0] == 1)
    assert all(resumed[k] == rows[k]["kept"] for k in rows if k[0] == 0)


def test_the_trainers_closing_evaluation_exports_its_token_ids(train_run, tmp_path, capsys):
    run, _, last_eval = train_run
    assert cli_main(["export", str(run / "eval"), "--out", str(tmp_path / "eval.parquet")]) == 0
    assert "2 with token ids" in capsys.readouterr().out
    rows = {r["seed"]: r for r in _load(tmp_path / "eval.parquet")}
    assert len(rows) == len(last_eval) == 2
    for t in last_eval:
        row = rows[t.episode.seed]
        assert (row["token_ids"], row["loss_mask"]) == (t.token_ids, t.loss_mask)
        assert row["history"] == "as_written" and row["messages"] == t.episode.messages(reformat=False)
        assert json.loads(row["env_kwargs"]) == {**SOKOBAN_KWARGS, "think": True}


@pytest.mark.parametrize("prefill", [True, False])
def test_hf_eval_with_token_history_exports_its_ids_and_mask(tiny_model, tmp_path, capsys, prefill):
    """An hf: agent with token history leaves each turn's added and sampled ids: the exported
    sequence decodes to the chat template over the messages it saw, and the mask's spans are
    exactly its replies."""
    from ragen_envs.agents.hf import HFAgent

    agent = HFAgent(tiny_model, max_tokens=6, history="tokens", prefill=prefill, temperature=1.0)
    run = tmp_path / "hf"
    try:
        evaluate(agent, ["ragen/Sokoban-v0"], [123, 124], run, concurrency=2, env_kwargs=SOKOBAN_KWARGS, progress=False)
    finally:
        agent.close()
    out = tmp_path / "hf.parquet"
    assert cli_main(["export", str(run), "--out", str(out)]) == 0
    assert "2 with token ids" in capsys.readouterr().out
    tok = agent.tokenizer
    for row in _load(out):
        assert row["history"] == "as_written" and row["num_turns"] == 2
        ids, mask = row["token_ids"], row["loss_mask"]
        seen = [row["messages"][0]]
        for user, reply in zip(row["messages"][1::2], row["history_replies"]):
            seen += [user, {"role": "assistant", "content": reply}]
        text = tok.apply_chat_template(seen, tokenize=False)
        assert tok.decode(ids, skip_special_tokens=False) + "\n" == text
        prefix = "<think>" if prefill else ""
        from ragen_envs.lm.masks import mask_spans

        spans = mask_spans(mask)
        assert len(spans) == 2
        for (a, b), reply in zip(spans, row["history_replies"]):
            assert prefix + tok.decode(ids[a:b], skip_special_tokens=False).removesuffix("<|im_end|>") == reply
        if not prefill:  # the env got the reply completed with <think>; the history kept the raw text
            assert all(m["content"].startswith("<think>") for m in row["messages"][2::2])
    if not prefill:
        return
    messages_agent = HFAgent(tiny_model, max_tokens=6, history="messages")
    try:
        evaluate(messages_agent, ["ragen/Sokoban-v0"], [123], tmp_path / "hf2", env_kwargs=SOKOBAN_KWARGS, progress=False)
    finally:
        messages_agent.close()
    assert cli_main(["export", str(tmp_path / "hf2"), "--out", str(tmp_path / "hf2.jsonl")]) == 0
    row = _load(tmp_path / "hf2.jsonl")[0]
    assert row["token_ids"] is None and row["history"] == "reformatted"


def test_messages_tokenize_to_the_rollout_sequence(tiny_model):
    """The --data path lays messages out exactly as a rollout does: for expert episodes
    (whose reply ids are the canonical tokenization) the ids and masks are identical."""
    from ragen_envs.lm.chat import ChatFormat, load_tokenizer
    from ragen_envs.starpo.expert import expert_trajectories
    from ragen_envs.starpo.sft import message_trajectory

    fmt = ChatFormat(load_tokenizer(tiny_model), "<think>")
    trajs = expert_trajectories("ragen/Sokoban-v0", fmt, range(10_000, 10_004), actions_per_turn=1,
                                env_kwargs=SOKOBAN_KWARGS)
    assert max(len(t.episode.turns) for t in trajs) == 2
    for t in trajs:
        row = episode_row(t.episode, env_kwargs=SOKOBAN_KWARGS, history="as_written", source="train")
        again = message_trajectory(row["messages"], fmt)
        assert (again.token_ids, again.loss_mask, again.turn_ends) == (t.token_ids, t.loss_mask, t.turn_ends)
    with pytest.raises(ValueError, match="forced prefix"):
        message_trajectory([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                            {"role": "assistant", "content": "<answer>Up</answer>"}], fmt)


def test_sft_data_trains_from_rollouts_and_eval_exports(train_run, eval_run, tiny_model, tmp_path, capsys):
    run = train_run[0]
    data = tmp_path / "rollouts.parquet"
    assert cli_main(["export", str(run), "--out", str(data)]) == 0
    common = ["--model", tiny_model, "--steps", "2", "--batch-size", "2", "--heldout", "0"]
    assert cli_main(["sft", "--data", str(data), "--token-ids", "--out", str(tmp_path / "s1"), *common]) == 0
    out = capsys.readouterr().out
    assert "SFT data: 8 episodes on ragen/Sokoban-v0" in out
    rows = [json.loads(x) for x in (tmp_path / "s1" / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and all(r["loss"] > 0 for r in rows)
    from transformers import AutoModelForCausalLM

    trained, initial = (AutoModelForCausalLM.from_pretrained(p) for p in (tmp_path / "s1" / "model", tiny_model))
    assert any(not torch.equal(a, b) for a, b in zip(trained.parameters(), initial.parameters()))
    settings = json.loads((tmp_path / "s1" / "model" / "ragen_protocol.json").read_text())
    assert settings["env_id"] == "ragen/Sokoban-v0" and settings["env_kwargs"]["max_turns"] == 2

    evdata = tmp_path / "eval.jsonl"
    assert cli_main(["export", str(eval_run[0]), "--out", str(evdata)]) == 0
    n_success = sum(r["success"] for r in _load(evdata) if r["env_id"] == "ragen/FrozenLake-v0")
    capsys.readouterr()
    assert cli_main(["sft", "ragen/FrozenLake-v0", "--data", str(evdata), "--out", str(tmp_path / "s2"), *common]) == 0
    assert "SFT data: 3 episodes on ragen/FrozenLake-v0" in capsys.readouterr().out
    if n_success:
        assert cli_main(["sft", "ragen/FrozenLake-v0", "--data", str(evdata), "--successful-only",
                         "--out", str(tmp_path / "s3"), *common]) == 0
        assert f"SFT data: {n_success} episodes" in capsys.readouterr().out
    _one_line_error(capsys, ["sft", "--data", str(evdata), "--out", str(tmp_path / "s4"), *common],
                    "holds episodes of ragen/FrozenLake-v0, ragen/Sokoban-v0; name one")
    _one_line_error(capsys, ["sft", "ragen/Sokoban-v0", "--data", str(evdata), "--token-ids",
                             "--out", str(tmp_path / "s4"), *common], "no token_ids")
    # ids of another tokenizer (here: shifted by one) are refused, not trained on
    import pyarrow.parquet as pq

    table = pq.read_table(data).to_pylist()
    for row in table:
        row["token_ids"] = [(x + 1) % 300 for x in row["token_ids"]]
    from ragen_envs.trajectories import write_dataset

    write_dataset(table, tmp_path / "shifted.parquet")
    _one_line_error(capsys, ["sft", "--data", str(tmp_path / "shifted.parquet"), "--token-ids",
                             "--out", str(tmp_path / "s5"), *common], "come from another tokenizer")


def test_trl_sft_trainer_accepts_the_file_as_is(train_run, tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    data = tmp_path / "rollouts.parquet"
    assert cli_main(["export", str(train_run[0]), "--out", str(data)]) == 0
    ds = _load(data)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), train_dataset=ds, processing_class=tok,
                         args=SFTConfig(output_dir=str(tmp_path / "trl"), max_steps=2, per_device_train_batch_size=2,
                                        use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
                                        max_length=None))
    # TRL read the conversational `messages` column: its ids are the chat template over them
    first = trainer.train_dataset[0]["input_ids"]
    assert first == tok.apply_chat_template(ds[0]["messages"], tokenize=True, return_dict=True)["input_ids"]
    result = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert result.global_step == 2 and len(losses) == 2 and all(0 < x < 100 for x in losses)


def test_bad_inputs_are_one_line_errors(eval_run, tmp_path, capsys):
    run = eval_run[0]
    out = tmp_path / "x.parquet"
    _one_line_error(capsys, ["export", str(tmp_path / "missing"), "--out", str(out)], "does not exist")
    (tmp_path / "empty").mkdir()
    _one_line_error(capsys, ["export", str(tmp_path / "empty"), "--out", str(out)], "holds no episodes.jsonl")
    (tmp_path / "empty" / "episodes.jsonl").write_text("")
    _one_line_error(capsys, ["export", str(tmp_path / "empty"), "--out", str(out)], "holds no episode")
    (tmp_path / "empty" / "episodes.jsonl").write_text('{"not": "an episode"}\n')
    _one_line_error(capsys, ["export", str(tmp_path / "empty"), "--out", str(out)], "holds no episode: 1 unreadable line skipped")
    _one_line_error(capsys, ["export", str(run), "--out", str(tmp_path / "x.csv")], r"must end in \.parquet or \.jsonl")
    _one_line_error(capsys, ["export", str(run), "--out", str(out), "--env", "ragen/Bandit-v0"], "passes the filters")
    assert cli_main(["export", str(run), "--out", str(out)]) == 0
    capsys.readouterr()
    _one_line_error(capsys, ["export", str(run), "--out", str(out)], "exists; pass --overwrite")
    assert cli_main(["export", str(run), "--out", str(out), "--overwrite", "--env", "ragen/Sokoban-v0"]) == 0
    assert set(_load(out)["env_id"]) == {"ragen/Sokoban-v0"}
    capsys.readouterr()  # load_dataset's progress

    sft = ["--steps", "1", "--out", str(tmp_path / "sft")]
    _one_line_error(capsys, ["sft", "--data", str(tmp_path / "nope.parquet"), *sft], "does not exist")
    (tmp_path / "empty.jsonl").write_text("\n")
    _one_line_error(capsys, ["sft", "--data", str(tmp_path / "empty.jsonl"), *sft], "holds no rows")
    (tmp_path / "wrong.jsonl").write_text('{"text": "hello"}\n')
    _one_line_error(capsys, ["sft", "--data", str(tmp_path / "wrong.jsonl"), *sft], "lacks the column.*not a trajectory dataset")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"messages": [[{"role": "user", "content": "hi"}]], "env_id": ["ragen/Sokoban-v0"],
                             "env_kwargs": ["{}"], "success": [True], "return": [1.0]}), tmp_path / "roles.parquet")
    _one_line_error(capsys, ["sft", "--data", str(tmp_path / "roles.parquet"), *sft], "messages must be a list")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    _one_line_error(capsys, ["sft", "--data", str(tmp_path / "junk.parquet"), *sft], "is not a Parquet file")
    _one_line_error(capsys, ["sft", *sft], "an ENV_ID is needed")
    assert not (tmp_path / "sft").exists()


def _doc_section(name: str) -> str:
    text = (ROOT / "docs" / "training.md").read_text()
    start = text.index(f"## {name}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_the_docs_snippet_runs(tmp_path, monkeypatch, capsys):
    """docs/training.md "Trajectories as datasets": the shell commands (with the test's
    sizes appended: a tiny model, two steps) and the Python block, as written."""
    section = _doc_section("Trajectories as datasets")
    shell = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    from ragen_envs.models import build_tiny_checkpoint

    tiny = str(build_tiny_checkpoint(tmp_path / "tiny-test", **TINY))
    for line in shell.strip().splitlines():
        argv = shlex.split(line.split("#")[0])
        assert argv[0] == "ragen"
        argv = argv[1:]
        if argv[0] == "sft":
            argv += ["--model", tiny, "--steps", "2", "--batch-size", "2", "--heldout", "0"]
        assert cli_main(argv) == 0, capsys.readouterr().err
    exec(compile(code, "docs/training.md", "exec"), {"__name__": "__doc_snippet__"})
    assert Path("runs/trl-sft").is_dir()
