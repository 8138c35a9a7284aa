"""The protocol's reasoning checks (``info["reasoning"]``) in ``ragen eval``: per-episode
numbers, the pooled summary, None for episodes recorded without them, the tables and an
end-to-end run on a real env."""

from __future__ import annotations

import json

import pytest

from ragen_envs.agents import Agent, make_agent
from ragen_envs.eval import episode_metrics, evaluate, format_summary_table, load_summary, summarize
from ragen_envs.eval.report import _summary_table
from ragen_envs.eval.tables import summary_rows
from ragen_envs.protocol import Episode, Turn, format_answer

REASONING_KEYS = ("reasoning_score", "actions_agree", "claims_true_rate")


def _turn(score=None, agree=None, claims=0, true=0) -> Turn:
    info = {"format_ok": True, "action_is_valid": True, "action_is_effective": True}
    if score is not None:
        info["reasoning"] = {"stated_actions": [], "actions_agree": agree, "claims": claims,
                             "claims_true": true, "score": score}
    return Turn("o", "r", 0.0, info)


def _episodes() -> list[Episode]:
    a = Episode(env_id="x", seed=1, turns=[_turn(1.0, True, claims=3, true=2), _turn(0.5, True)])
    b = Episode(env_id="x", seed=2, turns=[_turn(0.0, False, claims=1, true=0)])
    return [a, b]


def test_episode_metrics_by_hand():
    a, b = _episodes()
    ma, mb = episode_metrics(a), episode_metrics(b)
    assert ma["reasoning_score"] == pytest.approx(0.75) and ma["actions_agree"] == 1.0
    assert ma["claims"] == 3 and ma["claims_true"] == 2 and ma["reasoning_turns"] == 2
    assert mb["reasoning_score"] == 0.0 and mb["actions_agree"] == 0.0
    assert mb["claims"] == 1 and mb["claims_true"] == 0


def test_summary_pools_turns_by_hand():
    s = summarize(_episodes())
    # turns: 1.0, 0.5, 0.0 -> 0.5 (pooled over turns, not 0.375 = mean of episode means)
    assert s["reasoning_score"] == pytest.approx(0.5)
    assert s["actions_agree"] == pytest.approx(2 / 3)
    assert s["claims"] == 4 and s["claims_true"] == 2 and s["claims_true_rate"] == pytest.approx(0.5)
    assert s["reasoning_turns"] == 3
    assert "mean_reasoning_score" not in s and "mean_claims" not in s


def test_no_claims_gives_no_rate():
    s = summarize([Episode(env_id="x", seed=1, turns=[_turn(1.0, True), _turn(0.0, False)])])
    assert s["reasoning_score"] == pytest.approx(0.5) and s["actions_agree"] == 0.5
    assert s["claims"] == 0 and s["claims_true_rate"] is None


def test_absent_reasoning_is_none_not_zero():
    old = Episode(env_id="x", seed=1, turns=[_turn(), _turn()])  # recorded before the feature
    m = episode_metrics(old)
    assert all(m[k] is None for k in ("reasoning_score", "actions_agree", "claims", "claims_true"))
    s = summarize([old])
    assert s["reasoning_turns"] == 0
    assert all(s[k] is None for k in (*REASONING_KEYS, "claims", "claims_true"))
    assert s["mean_action_is_valid"] == 1.0  # the other numbers are unchanged
    # mixed with new episodes: old turns do not count as zeros
    mixed = summarize([old, *_episodes()])
    assert mixed["reasoning_score"] == pytest.approx(0.5) and mixed["claims_true_rate"] == pytest.approx(0.5)
    # an episode read back from an older episodes.jsonl line
    back = Episode.from_dict(json.loads(json.dumps(old.to_dict())))
    assert summarize([back])["reasoning_score"] is None


def _summary(**envs) -> dict:
    return {"agent": "a", "envs": envs}


def test_tables_show_the_columns_and_dash_for_none():
    new, old = summarize(_episodes()), summarize([Episode(env_id="y", seed=1, turns=[_turn()])])
    summary = _summary(new=new, old=old, empty={"episodes": 0, "errors": 0})
    header, rows = summary_rows(summary)
    i, k = header.index("reasoning"), header.index("claims ok %")
    assert header[i + 1] == "agree %" and k == i + 2
    assert rows[0][i:k + 1] == ["0.500", "66.7", "50.0"]
    assert rows[1][i:k + 1] == ["-", "-", "-"]
    assert all(len(r) == len(header) for r in rows) and rows[2][-1] == "0"
    text = format_summary_table(summary)
    assert "reasoning" in text.splitlines()[0] and "0.500" in text
    head, rows = summary_rows(summary, labels="long", dash="–")
    assert {"reasoning score", "actions agree %", "claims true %"} <= set(head)
    assert rows[1][head.index("reasoning score")] == "–"
    html = _summary_table(summary)
    assert "<th>reasoning score</th>" in html and "<th>claims true %</th>" in html


class Narrator(Agent):
    """The expert, whose think states the actions it answers: every turn agrees."""

    name = "narrator"

    def __init__(self, env):
        self.env = make_agent("expert", env=env).env

    def act(self, messages):
        actions = self.env._expert_reply_actions()
        return format_answer(actions, "I go " + ", ".join(actions) + ".", self.env.think)


@pytest.mark.parametrize("agent,expect", [("expert", None), (lambda env, seed: Narrator(env), 1.0)])
def test_eval_end_to_end_reports_reasoning(tmp_path, agent, expect):
    result = evaluate(agent, ["ragen/Sokoban-v0"], [123, 124, 125], tmp_path, progress=False, frame_episodes=0,
                      agent_name="expert" if agent == "expert" else "narrator")
    for s in (result.summary["envs"]["ragen/Sokoban-v0"], load_summary(tmp_path)["envs"]["ragen/Sokoban-v0"]):
        assert s["reasoning_turns"] >= 3
        assert 0.0 <= s["reasoning_score"] <= 1.0 and 0.0 <= s["actions_agree"] <= 1.0
        if expect is not None:
            assert s["reasoning_score"] == expect and s["actions_agree"] == expect
    assert "reasoning score" in (tmp_path / "report.html").read_text()
