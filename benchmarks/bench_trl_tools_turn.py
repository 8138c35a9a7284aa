"""What one env turn costs on the host through TRL's environment_factory path, next to the local
env and the rollout-function path: the same random well-formed replies on the same Sokoban /
FrozenLake seeds, interleaved turn by turn in a shuffled order, medians of the per-turn CPU time of this thread
(``time.thread_time``: on a shared machine wall-clock medians of millisecond steps mostly
measure the scheduler). Model generation is excluded: it is the same tokens on every path.

- local: ``env.step(reply)``;
- act: ``RagenToolEnv.act(reply)`` (the adapter alone);
- TRL tool turn: what TRL 1.16's tool loop does per call besides generating: transformers'
  ``parse_response`` on the reply (with the prompt so far as prefix, as TRL passes it), the
  ``act`` call, and TRL's own ``GRPOTrainer._get_tool_suffix_ids`` (it renders the chat template
  twice to find the tool-result tokens);
- rollout_func turn: ``ProtocolEpisode.add_reply`` (decode the reply, ``env.step``, the
  template's increment for the next observation).

    python benchmarks/bench_trl_tools_turn.py --episodes 50
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import gymnasium as gym  # noqa: E402

import ragen_envs  # noqa: E402,F401
from ragen_envs.agents import make_agent  # noqa: E402
from ragen_envs.integrations import trl as rtrl  # noqa: E402
from ragen_envs.integrations.episodes import EpisodeSpec, ProtocolEpisode  # noqa: E402
from ragen_envs.lm.chat import ChatFormat, load_tokenizer  # noqa: E402
from ragen_envs.models import build_tiny_checkpoint  # noqa: E402


def replies_of(env_id, seed):
    """A random agent's well-formed replies for one episode (played once, replayed on every path)."""
    env = gym.make(env_id)
    agent = make_agent("random", env=env, seed=seed)
    env.reset(seed=seed)
    out, done = [], False
    while not done:
        out.append(agent.act([]))
        _, _, term, trunc, _ = env.step(out[-1])
        done = term or trunc
    env.close()
    return out


def timed(fn):
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def main() -> int:
    from trl import GRPOTrainer
    from trl.chat_template_utils import parse_response

    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--envs", nargs="+", default=["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
    args = p.parse_args()
    tok = load_tokenizer(build_tiny_checkpoint(tempfile.mkdtemp(), hidden_size=16, num_layers=1))
    rtrl.install_tool_chat_template(tok)
    shim = SimpleNamespace(processing_class=tok, _tokenizer=tok, chat_template=None, _is_vlm=False,
                           chat_template_kwargs={})
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")
    print("| env | turns each way | local | act | TRL tool turn (parse + suffix) | rollout_func turn | TRL tool / local |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for env_id in args.envs:
        local, tool_env = gym.make(env_id), rtrl.make_environment_factory(env_id)()
        act_env = rtrl.make_environment_factory(env_id)()
        fmt = ChatFormat(tok, "")
        order = random.Random(0)
        times = {k: [] for k in ("local", "act", "trl", "rollout", "parse", "suffix")}
        for seed in range(args.episodes):
            replies = replies_of(env_id, seed)
            row = rtrl.make_environment_dataset(env_id, [seed])[0]
            local.reset(seed=seed)
            act_env.reset(**row)
            first = tool_env.reset(**row)
            msgs = row["prompt"][:-1] + [{"role": "user", "content": first}]
            seq = tok.apply_chat_template(msgs, tools=[tool_env.act], add_generation_prompt=True, tokenize=True,
                                          return_dict=False)
            ep = ProtocolEpisode(EpisodeSpec(env_id, seed), fmt)
            for reply in replies:
                call = "<tool_call>\n" + json.dumps({"name": "act", "arguments": {"reply": reply}}) + "\n</tool_call>"
                call_ids = tok(call, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                reply_ids = tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

                def trl_turn():
                    t0 = time.thread_time()
                    parsed = parse_response(tok, call_ids, prefix=seq, tools=[tool_env.act])
                    t1 = time.thread_time()
                    fn = parsed["tool_calls"][0]["function"]
                    result = tool_env.act(**fn["arguments"])
                    t2 = time.thread_time()
                    suffix = GRPOTrainer._get_tool_suffix_ids(shim, [{"role": "tool", "name": "act", "content": result}])
                    times["parse"].append(t1 - t0)
                    times["suffix"].append(time.thread_time() - t2)
                    seq.extend(call_ids + suffix)

                paths = [("local", lambda: local.step(reply)), ("act", lambda: act_env.act(reply)),
                         ("trl", trl_turn), ("rollout", lambda: ep.add_reply(reply_ids, True))]
                order.shuffle(paths)  # no path always runs first (warm caches)
                for name, fn in paths:
                    times[name].append(timed(fn))
            ep.close()
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        if os.environ.get("BENCH_DEBUG"):
            print({k: [round(x * 1e3, 2) for x in statistics.quantiles(v, n=10)] for k, v in times.items()})
        print(f"| {env_id.split('/')[-1]} | {len(times['local'])} | {med['local']:.3f} ms | {med['act']:.3f} ms | "
              f"{med['trl']:.2f} ms ({med['parse']:.2f} + {med['suffix']:.2f}) | {med['rollout']:.2f} ms | {med['trl'] / med['local']:.0f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
