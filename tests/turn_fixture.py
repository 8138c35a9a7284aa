"""Scripted episodes on every id, and their recorded outputs (``tests/fixtures/turn_outputs.json``).

The recording was made with the implementation before the step hot path was optimised
(issue 23 goal 4); ``tests/test_turn_fixture.py`` replays the same scripts and compares
every reset and step: the observation text (its SHA-256 and length), reward, terminated,
truncated and the whole ``info`` as JSON (keys in order, ints and floats kept apart, so
``0`` vs ``0.0`` and ``-0.30000000000000004`` count).

Regenerate (only when a change of the protocol's outputs is intended, and say so in the
commit): ``PYTHONPATH=. python tests/turn_fixture.py``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gymnasium as gym

import ragen_envs
from ragen_envs.protocol import format_answer

FIXTURE = Path(__file__).parent / "fixtures" / "turn_outputs.json"
SEEDS = (0, 1, 2, 123)
MAX_STEPS = 12

# (label, env id, make kwargs, set_vocabulary kwargs or None, reset options or None)
CONFIGS = [(spec.id.split("/")[1], spec.id, {}, None, None) for spec in ragen_envs.ENV_SPECS] + [
    ("Sokoban-nothink", "ragen/Sokoban-v0", {"think": False}, None, None),
    ("Sokoban-minimal", "ragen/Sokoban-v0", {"prompt_style": "minimal", "max_actions_per_turn": 2,
                                             "max_tokens": 7, "format_penalty": -0.5}, None, None),
    ("Sokoban-vocab", "ragen/Sokoban-v0", {}, {"symbols": {"#": "W", "P": "@"}, "actions": {"Up": "North", "Left": "West"}}, None),
    ("Sokoban-ansi-turnlimit", "ragen/Sokoban-v0", {"render_mode": "ansi", "turn_limit_terminates": True, "max_turns": 3}, None, None),
    ("NewVocab-legendbug", "ragen/SokobanNewVocab-v0", {"legend_symbols": "default"}, None, None),
    ("FrozenLake-noise", "ragen/FrozenLake-v0", {"turn_limit_terminates": True}, None, {"noise_seed": 77}),
    ("FrozenLake-nonslip", "ragen/FrozenLake-v0", {"slippery": False, "max_actions": 20, "max_turns": 8}, None, None),
    ("FrozenLake-vocab", "ragen/FrozenLake-v0", {}, {"actions": {"Down": "South"}}, None),
]


def scripted_replies(names) -> list[str]:
    """Replies that exercise the parser, the budgets, the penalty and the reasoning checks."""
    if not names:  # free-text actions (WebShop)
        return [
            "<think>I search for it.</think><answer>search[red shoes]</answer>",
            "<think>x</think><answer>click[back to search] || click[< prev] || search[a] || b || c || d</answer>",
            "no tags at all",
            "<answer>search[blue]</answer>",
        ]
    a, b = names[0], names[1 % len(names)]
    c, d = names[2 % len(names)], names[-1]
    return [
        f"<think>The box is below me and the target is to my left. I go {b}.</think><answer>{b} || {c}</answer>",
        f"<think>x</think><answer>{a.lower()} || jump || {d.upper()} || {d} || {c} || {b}</answer>",
        "no tags at all",
        f"<think>The target is to the right and above; the hole is below.</think>  \n<answer>{d}</answer> trailing",
        f"<think>\ud800 surrogate, the goal is left\udfff</think><answer>{c}\ud801</answer>",
        f"<answer>{a}</answer>",
        f"<think><think>nested</think><answer>{a}||<answer>{b}</answer><|im_end|>",
        f"<think>I push {d}, then move {a}; the wall is below. Boxes are right!</think><answer>{d} || {a} || {d}</answer>",
        f"<think></think><answer> || {b} ||  || </answer>",
        f"<think>I choose {a}</think><answer>{a}</answer>",
    ]


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _obs(obs: str) -> list:
    return [hashlib.sha256(obs.encode("utf-8", "surrogatepass")).hexdigest(), len(obs)]


def play(label: str, env_id: str, kwargs: dict, vocab: dict | None, options: dict | None) -> list:
    """The recorded form of every scripted episode of one config."""
    env = gym.make(env_id, **kwargs)
    if vocab is not None:
        env.unwrapped.set_vocabulary(**vocab)
    out = []
    for seed in SEEDS:
        for mode in ("scripted", "expert"):
            obs, info = env.reset(seed=seed, options=options)
            record = {"seed": seed, "mode": mode, "reset": [_obs(obs), _json(info)], "steps": []}
            replies = scripted_replies(env.unwrapped.action_names())
            for k in range(MAX_STEPS):
                if mode == "expert":
                    u = env.unwrapped
                    reply = format_answer(u._expert_reply_actions(), "expert", u.think)
                else:
                    reply = replies[(k + seed) % len(replies)]
                obs, reward, terminated, truncated, info = env.step(reply)
                step = [_obs(obs), _json(reward), terminated, truncated, _json(info)]
                if kwargs.get("render_mode") == "ansi":
                    step.append(_obs(env.render()))
                record["steps"].append(step)
                if terminated or truncated:
                    break
            out.append(record)
    env.close()
    return out


def record_all() -> dict:
    return {label: play(label, env_id, kw, vocab, opts) for label, env_id, kw, vocab, opts in CONFIGS}


if __name__ == "__main__":
    FIXTURE.parent.mkdir(exist_ok=True)
    data = record_all()  # one line per config: diffs stay readable
    lines = [f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=True, separators=(',', ':'))}" for k, v in data.items()]
    FIXTURE.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size:,} bytes)")
