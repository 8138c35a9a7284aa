"""``ragen play ENV_ID [--seed S]``: play an environment yourself in the terminal.

Type the whole answer (``<think>..</think><answer>Up || Left</answer>``) or, as a shortcut,
only the actions (``Up || Left``), which are wrapped in the protocol format for you. When the
episode ends the final state is shown. Ctrl-D or Ctrl-C quits.
"""

from __future__ import annotations

import sys

from . import add_kwarg_limit_flag, kwarg_bounds_or_fail, make_env_or_fail, parse_env_kwargs


def register(sub) -> None:
    p = sub.add_parser("play", help="play an environment in the terminal", description=__doc__)
    p.add_argument("env_id", help="e.g. ragen/Sokoban-v0 (see `ragen list`)")
    p.add_argument("--seed", type=int, default=123, help="layout seed (default 123, the first EVAL_SEEDS puzzle)")
    p.add_argument("--raw", action="store_true", help="send lines exactly as typed (no auto-wrapping)")
    p.add_argument("--env-kwarg", action="append", metavar="KEY=VALUE", help="constructor kwarg (repeatable)")
    add_kwarg_limit_flag(p)
    p.set_defaults(run=run)


def _wrap(line: str, think: bool) -> str:
    if "<answer>" in line:
        return line
    from ..protocol import format_answer

    return format_answer([p.strip() for p in line.split("||")], "", think)


def run(args) -> int:
    from ..cli import CLIError
    from ..webshop.remote import RemoteWebShopError

    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0, got {args.seed}")
    env = make_env_or_fail(args.env_id, bounds=kwarg_bounds_or_fail(args.kwarg_limit), **parse_env_kwargs(args.env_kwarg))
    try:
        return _play(env, args)
    except RemoteWebShopError as exc:  # the WebShop server went away (or never answered) mid-game
        raise CLIError(str(exc)) from None
    finally:
        env.close()


def _play(env, args) -> int:
    base = env.unwrapped
    obs, info = env.reset(seed=args.seed)
    print(f"[system] {info['system_prompt']}")
    print(obs)
    total = 0.0
    while True:
        try:
            line = input("your answer> ")
        except (EOFError, KeyboardInterrupt):
            print("\nbye")
            return 0
        reply = line if args.raw else _wrap(line, base.think)
        obs, reward, terminated, truncated, info = env.step(reply)
        total += reward
        note = f"reward {reward:+.2f} (game {info['game_reward']:+.2f}, penalty {info['format_penalty']:+.2f}), "
        note += f"ran {info['actions']}" + (f", unknown {info['invalid_actions']}" if info["invalid_actions"] else "")
        print(f"[{note}]")
        print(obs)
        if terminated or truncated:
            print("[final state]")  # the last observation has the reward only, not the board
            print(base.state_text())
            how = "solved" if (terminated and info["success"]) else ("ended" if terminated else "out of budget")
            print(f"[episode {how}: success={bool(terminated and info['success'])}, return {total:+.2f}]")
            sys.stdout.flush()
            return 0
