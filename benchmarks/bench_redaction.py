"""Key redaction cost per episode record (BENCHMARKS.md#key-redaction):
json_safe(record, KeyRedactor(key)) vs json_safe(record).

    PYTHONPATH=. python benchmarks/bench_redaction.py
"""
import time, secrets, gymnasium as gym, ragen_envs
from ragen_envs.agents import make_agent
from ragen_envs.agents.redaction import KeyRedactor
from ragen_envs.eval import run_episode
from ragen_envs.protocol import json_safe
for env_id in ("ragen/Sokoban-v0", "ragen/FrozenLake-v0", "ragen/Bandit-v0"):
    env = gym.make(env_id)
    records = [run_episode(env, make_agent("expert", env=env), seed, env_id=env_id).to_dict() for seed in range(123, 133)]
    for klen in (51, 164):
        r = KeyRedactor("sk-proj-" + secrets.token_urlsafe(klen)[:klen])
        t = time.perf_counter()
        for rec in records:
            json_safe(rec, r)
        with_r = (time.perf_counter() - t) / len(records)
        t = time.perf_counter()
        for rec in records:
            json_safe(rec)
        without = (time.perf_counter() - t) / len(records)
        print(f"{env_id:22s} key {klen + 8:3d} chars: {with_r * 1e3:5.2f} ms per episode record redacted, "
              f"{without * 1e3:5.2f} ms without redaction")
