"""``ragen render ENV_ID --seed S --agent expert|random --out ep.gif``: film one episode.

Plays one episode with the agent and writes a picture after the reset and after each turn,
captioned with the turn number and the agent's answer, as an animated GIF (``.gif``) or an
MP4 (``.mp4``, needs ``pip install imageio-ffmpeg``). Drawing needs the render extra:
``pip install "ragen-envs[render]"``.

examples:
  ragen render ragen/Sokoban-v0 --seed 123 --agent expert --out sokoban.gif
  ragen render ragen/FrozenLake-v0 --seed 7 --agent random --out lake.mp4 --fps 1
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import add_kwarg_limit_flag, kwarg_bounds_or_fail, make_env_or_fail, parse_env_kwargs

AGENTS = ("expert", "random")
EXTENSIONS = (".gif", ".mp4")


def register(sub) -> None:
    p = sub.add_parser(
        "render",
        help="play one episode and save it as an animated GIF or MP4",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("env_id", help="e.g. ragen/Sokoban-v0 (see `ragen list`)")
    p.add_argument("--seed", type=int, default=123, help="layout seed (default 123, the first EVAL_SEEDS puzzle)")
    p.add_argument("--agent", default="expert", help="expert or random (default expert)")
    p.add_argument("--out", required=True, help="output file: .gif or .mp4")
    p.add_argument("--fps", type=float, default=2.0, help="frames per second (default 2)")
    p.add_argument("--env-kwarg", action="append", metavar="KEY=VALUE", help="constructor kwarg (repeatable)")
    add_kwarg_limit_flag(p)
    p.set_defaults(run=run)


def _answer_text(reply: str, info: dict) -> str:
    if info.get("matched") and info.get("answer"):
        return str(info["answer"])
    snippet = " ".join(str(reply).split())
    return "(malformed reply) " + (snippet[:80] + "..." if len(snippet) > 80 else snippet)


def _outcome(episode) -> str:
    if episode.terminated and episode.turns and episode.turns[-1].info.get("success"):
        return "success"
    return "ended, no success" if episode.terminated else "out of budget"


def captions_for(episode, agent: str) -> list[str]:
    """One caption per frame: the start, then ``Turn k: <answer> (reward r)`` per turn."""
    captions = [f"{episode.env_id}, seed {episode.seed}, {agent} agent: start"]
    for k, turn in enumerate(episode.turns, start=1):
        text = f"Turn {k}: {_answer_text(turn.response, turn.info)}  (reward {turn.reward:+.2f})"
        if k == len(episode.turns):
            text += f" - {_outcome(episode)}"
        captions.append(text)
    return captions


def run(args) -> int:
    import importlib.util
    import os

    from gymnasium.error import DependencyNotInstalled

    from ..agents import make_agent
    from ..cli import CLIError
    from ..eval import run_episode
    from ..webshop.remote import RemoteWebShopError

    out = Path(args.out)
    suffix = out.suffix.lower()
    if suffix not in EXTENSIONS:
        raise CLIError(f"--out must end in {' or '.join(EXTENSIONS)}, got {args.out!r}")
    if out.is_symlink():
        raise CLIError(f"--out {out} is a symbolic link (to {os.path.realpath(out)}); pass a plain file path")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0, got {args.seed}")
    if not args.fps > 0:
        raise CLIError(f"--fps must be > 0, got {args.fps}")
    if args.agent not in AGENTS:
        raise CLIError(f"unknown agent {args.agent!r}; choose one of: {', '.join(AGENTS)}")
    if suffix == ".mp4" and importlib.util.find_spec("imageio_ffmpeg") is None:
        raise CLIError("MP4 export needs imageio-ffmpeg, which is not installed: run `pip install imageio-ffmpeg` (or write a .gif)")

    kwargs = parse_env_kwargs(args.env_kwarg)
    kwargs.pop("render_mode", None)
    env = make_env_or_fail(args.env_id, bounds=kwarg_bounds_or_fail(args.kwarg_limit), render_mode="rgb_array", **kwargs)
    recorder = _FrameRecorder(env)
    try:
        agent = make_agent(args.agent, env=env, **({"seed": args.seed} if args.agent == "random" else {}))
        episode = run_episode(recorder, agent, seed=args.seed, env_id=args.env_id)
        from renderers.export import save_frames

        out.parent.mkdir(parents=True, exist_ok=True)
        save_frames(recorder.frames, out, captions_for(episode, args.agent), fps=args.fps)
    except (DependencyNotInstalled, RemoteWebShopError) as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    finally:
        env.close()
    total = sum(t.reward for t in episode.turns)
    print(f"wrote {out} ({len(recorder.frames)} frames, {len(episode.turns)} turns, {_outcome(episode)}, return {total:+.2f})")
    return 0


class _FrameRecorder:
    """Passes reset/step through to ``env`` and keeps ``env.render()`` after each of them."""

    def __init__(self, env) -> None:
        self.env = env
        self.frames: list = []

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self, **kwargs):
        out = self.env.reset(**kwargs)
        self.frames = [self.env.render()]
        return out

    def step(self, action):
        out = self.env.step(action)
        self.frames.append(self.env.render())
        return out
