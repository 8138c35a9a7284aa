"""Concurrent evaluation of one agent on fixed seeds of several envs, with resume.

``evaluate(agent, env_ids, seeds, out_dir)`` runs every (env id, seed) episode not yet in
``out_dir/episodes.jsonl``, ``concurrency`` at a time on one asyncio loop (each in-flight
episode waits on at most one request), appends each finished episode as one line, records
episodes whose requests kept failing in ``errors.jsonl`` (retried by the next run), then
rebuilds ``summary.json`` and ``report.html`` from the files. An
:class:`~ragen_envs.agents.AgentFatalError` (bad key, unknown model) stops the run at once.
An episode whose record cannot be written as JSON (a non-finite number somewhere) is that
episode's error (``kind: "record"``), never the run's; every string written passes through
the agent's ``redact`` (its API key) and has its surrogates replaced.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium as gym

from .._progress import Progress
from ..agents import Agent, AgentFatalError, AgentRequestError, make_agent
from ..protocol import json_safe
from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted
from .results import build_summary, write_summary_and_report
from .runner import arun_episode
from .seeds import format_seed_ranges, merge_seed_ranges
from .store import (
    CONFIG_FILE, RecordError, RunStore, SkippedLines, read_episodes, read_errors, to_json, write_atomic,
)

__all__ = ["EvalResult", "RunConfigMismatch", "TooManyErrors", "evaluate", "evaluate_async", "check_run_config",
           "check_windowable"]

# Settings that change what a model replies: a run directory holds one value of each.
# (Where the model runs -- base URL, device, key variable -- may change between resumes.)
# context_window: {"mode", "max_context_window"}, stored only for a windowed mode (a full run's
# config.json is as before, and a run made before the modes existed is a full one)
FINGERPRINT_KEYS = ("agent", "agent_config", "env_kwargs", "think", "context_window")
NOT_FINGERPRINTED = frozenset({"base_url", "api_key_env", "device"})


class RunConfigMismatch(ValueError):
    """The run directory holds episodes made with other settings."""


class TooManyErrors(RuntimeError):
    """Many episodes in a row ended in errors: the endpoint is probably down."""


@dataclass
class EvalResult:
    summary: dict[str, Any]
    ran: int = 0  # episodes finished by this call
    skipped: int = 0  # already in episodes.jsonl
    errors: int = 0  # episodes of this call that ended in errors
    elapsed_s: float = 0.0  # the whole call, summary and report included
    play_s: float = 0.0  # playing the episodes only
    out_dir: Path | None = None
    error_reasons: list[str] = field(default_factory=list)
    unreadable: int = 0  # lines of episodes.jsonl skipped on resuming (not JSON, not an episode): played again


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for dist in ("ragen-envs", "gymnasium", "numpy", "openai", "torch", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def check_run_config(out_dir: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Compare ``config`` with the run's ``config.json``; raise :class:`RunConfigMismatch`.

    Returns the config to store: the new one, with the env ids and seeds of both.
    """
    path = out_dir / CONFIG_FILE
    if not path.exists():
        return config
    try:
        old = loads_untrusted(path.read_bytes())
    except UntrustedJSONError:  # not settings we can compare: the new ones replace them
        return config
    if not isinstance(old, dict):
        raise RunConfigMismatch(
            f"{path} holds a JSON {type(old).__name__}, not a run's settings (an object): "
            f"not a ragen eval run directory; use another --out"
        )
    diffs = []
    for key in FINGERPRINT_KEYS:
        a, b = old.get(key), config.get(key)
        if key == "context_window":  # absent: the full history
            a, b = (x if x is not None else {"mode": "full", "max_context_window": -1} for x in (a, b))
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if key == "agent_config" and sub in NOT_FINGERPRINTED:
                    continue
                if a.get(sub) != b.get(sub):
                    diffs.append(f"{key}.{sub}: {a.get(sub)!r} there, {b.get(sub)!r} now")
        elif a != b:
            diffs.append(f"{key}: {a!r} there, {b!r} now")
    if diffs:
        raise RunConfigMismatch(
            f"{out_dir} holds a run with other settings ({'; '.join(diffs)}); use another --out, "
            f"or the same settings to resume"
        )
    merged = dict(config)
    merged["env_ids"] = list(dict.fromkeys(list(old.get("env_ids", [])) + list(config.get("env_ids", []))))
    try:  # old runs stored a list of seeds, newer ones range text ("123..378")
        merged["seeds"] = merge_seed_ranges(old.get("seeds", []), config.get("seeds", []))
    except ValueError as exc:
        raise RunConfigMismatch(f"{path}: {exc}; use another --out") from None
    merged["created"] = old.get("created", config.get("created"))
    return merged


def check_windowable(env_id: str, env_kwargs: dict[str, Any], seed: int, context_window_mode: str) -> None:
    """Build ``env_id`` and reset it on ``seed`` (a kwarg it refuses raises here, TypeError or
    ValueError); then ValueError (one line, :func:`~ragen_envs.protocol.context.require_windowable`)
    when a windowed ``context_window_mode`` cannot cut its first observation. The trainer runs
    this at its start too."""
    from ..protocol.context import require_windowable

    env = gym.make(env_id, **env_kwargs)
    try:
        obs, _ = env.reset(seed=seed)
    finally:
        env.close()
    require_windowable(obs, context_window_mode, env_id)


def _redactor(agent: Agent) -> Callable[[str], str] | None:
    redact = getattr(agent, "redact", None)
    return redact if callable(redact) else None


def _error_record(env_id: str, seed: int, exc: Exception, env: gym.Env, agent: Agent) -> dict[str, Any]:
    """The errors.jsonl line of an episode that could not finish or be written (secrets the
    agent knows redacted, surrogates replaced: the line can always be written)."""
    budget = getattr(env.unwrapped, "budget", None)
    record: dict[str, Any] = {"env_id": env_id, "seed": seed, "kind": "request", "error": str(exc),
                              "turns_played": budget.turns_used if budget is not None else None, "time": _now()}
    if isinstance(exc, RecordError):
        record["kind"] = "record"
    elif not isinstance(exc, AgentRequestError):  # a bug somewhere: keep the traceback
        record.update(kind="exception", error=f"{type(exc).__name__}: {exc}",
                      traceback="".join(traceback.format_exception(exc, limit=8)))
    return json_safe(record, _redactor(agent))


def _agent_config(agent: Agent) -> dict[str, Any]:
    config = getattr(agent, "config", None)
    return config() if callable(config) else {}


async def evaluate_async(
    agent: str | Agent | Callable[[gym.Env, int], Agent],
    env_ids: Sequence[str],
    seeds: Sequence[int],
    out_dir: str | Path,
    *,
    concurrency: int = 16,
    env_kwargs: dict[str, Any] | None = None,
    agent_name: str | None = None,
    prices: Sequence[float] | None = None,
    compare: Sequence[tuple[str, dict[str, Any]]] = (),
    stop_after_errors: int = 20,
    progress: bool = True,
    frame_episodes: int = 16,
    extra_config: dict[str, Any] | None = None,
    image_obs: bool = False,
    context_window_mode: str = "full",
    max_context_window: int = -1,
) -> EvalResult:
    """Play the missing episodes and write the run directory (see the module docstring).

    ``agent`` is a model agent shared by all episodes (``openai:``/``hf:`` spec or object),
    ``"expert"``/``"random"`` (built per episode, ``random`` seeded with the episode seed), or
    a callable ``(env, seed) -> Agent``. ``env_kwargs`` go to every ``gym.make``.
    ``image_obs`` wraps every env in :class:`~ragen_envs.vision.ImageObservation` (the state
    as a picture, sent as content parts). ``context_window_mode`` / ``max_context_window``:
    what each turn's messages hold, the trainer's modes (:func:`.runner.turn_messages`);
    checked first (ValueError), with ``image_obs`` refused in a windowed mode.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    from ..protocol.context import check_context_window

    check_context_window(context_window_mode, max_context_window)
    windowed = context_window_mode != "full"
    if windowed and image_obs:
        raise ValueError(f"context_window_mode={context_window_mode} needs text observations: not with image_obs")
    if windowed:
        for env_id in env_ids:
            check_windowable(env_id, env_kwargs or {}, int(seeds[0]) if len(seeds) else 0, context_window_mode)
    env_kwargs = dict(env_kwargs or {})
    out_dir = Path(out_dir)
    factory: Callable[[gym.Env, int], Agent] | None = None
    shared: Agent | None = None
    if isinstance(agent, str):
        name = agent_name or agent
        if agent in ("expert", "random"):
            spec = agent
            factory = lambda env, seed: make_agent(spec, env=env, **({"seed": seed} if spec == "random" else {}))  # noqa: E731
        else:
            shared = make_agent(agent, **({"think": env_kwargs["think"]} if "think" in env_kwargs else {}))
    elif isinstance(agent, Agent):
        shared, name = agent, agent_name or agent.name
    elif callable(agent):
        factory, name = agent, agent_name or getattr(agent, "__name__", "agent")
    else:
        raise TypeError(f"agent must be a spec string, an Agent or a callable, got {type(agent).__name__}")

    config = {
        "agent": name,
        "agent_config": _agent_config(shared) if shared is not None else {},
        "env_ids": list(env_ids),
        "seeds": format_seed_ranges(int(s) for s in seeds),  # "0..10000000", not ten million numbers
        "env_kwargs": {k: v for k, v in env_kwargs.items() if k != "think"},
        "think": env_kwargs.get("think"),
        "concurrency": concurrency,
        **({"image_obs": True} if image_obs else {}),
        **({"context_window": {"mode": context_window_mode, "max_context_window": max_context_window}}
           if windowed else {}),
        "prices_usd_per_million_tokens": list(prices) if prices is not None else None,
        "created": _now(),
        "versions": _versions(),
    }
    config.update(extra_config or {})

    started = time.monotonic()
    ran = errors = 0
    reasons: list[str] = []
    with RunStore(out_dir) as store:
        merged = check_run_config(out_dir, config)
        write_atomic(out_dir / CONFIG_FILE, to_json(merged, indent=2) + "\n")
        unreadable = SkippedLines()
        done = store.finished_keys(unreadable)
        wanted = [(env_id, int(seed)) for env_id in env_ids for seed in seeds]
        todo = [key for key in wanted if key not in done]
        skipped = len(wanted) - len(todo)
        if progress and skipped:
            print(f"resuming: {skipped} episodes already in {out_dir / 'episodes.jsonl'}, {len(todo)} to run",
                  file=sys.stderr)
        if progress and unreadable.count:  # said once: the summary's read below skips the same lines
            print(f"warning: {unreadable}", file=sys.stderr)
        queue: asyncio.Queue = asyncio.Queue()
        for item in todo:
            queue.put_nowait(item)
        counts = {"success": 0, "finished": 0, "errors": 0, "streak": 0}
        bar = Progress(len(todo), f"{name} ") if progress and todo else None

        def note() -> str:
            fin = counts["finished"]
            rate = f"{counts['success'] / fin:.1%}" if fin else "-"
            return f"success {counts['success']}/{fin} ({rate}), errors {counts['errors']}"

        def episode_failed(env_id: str, seed: int, exc: Exception, env: gym.Env, player: Agent) -> None:
            """Record an episode that could not finish or be written; the run goes on."""
            nonlocal errors
            record = _error_record(env_id, seed, exc, env, player)
            reason = record["error"]
            store.append_error(record)
            errors += 1
            counts["errors"] += 1
            counts["streak"] += 1
            reasons.append(f"{env_id} seed {seed}: {reason}")
            if bar:
                bar.update(1, note=note())
            if stop_after_errors and counts["streak"] >= stop_after_errors:
                raise TooManyErrors(
                    f"{counts['streak']} episodes in a row ended in errors (last: {reason}); "
                    f"fix the cause and run the same command again to resume"
                ) from None

        async def worker() -> None:
            nonlocal ran
            envs: dict[str, gym.Env] = {}
            try:
                while True:
                    try:
                        env_id, seed = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    env = envs.get(env_id)
                    if env is None:
                        env = envs[env_id] = gym.make(env_id, **env_kwargs)
                        if image_obs:
                            from ..vision import ImageObservation

                            env = envs[env_id] = ImageObservation(env)
                    player = shared if shared is not None else factory(env, seed)
                    try:
                        episode = await arun_episode(env, player, seed, env_id=env_id,
                                                     context_window_mode=context_window_mode,
                                                     max_context_window=max_context_window)
                    except (AgentFatalError, asyncio.CancelledError):
                        raise
                    except Exception as exc:  # noqa: BLE001 - an episode error, recorded apart
                        episode_failed(env_id, seed, exc, env, player)
                        continue
                    episode.meta.setdefault("agent", name)
                    try:
                        store.append_episode(episode, redact=_redactor(player))
                    except RecordError as exc:  # nothing was written; a full disk (OSError) stops the run
                        episode_failed(env_id, seed, exc, env, player)
                        continue
                    ran += 1
                    counts["finished"] += 1
                    counts["success"] += int(episode.success)
                    counts["streak"] = 0
                    if bar:
                        bar.update(1, note=note())
            finally:
                for env in envs.values():
                    env.close()

        async def tick() -> None:
            # the bar moves (elapsed time) while long batched generations run, not only when
            # an episode ends
            while True:
                await asyncio.sleep(1.0)
                bar.update(0, note=note())

        play_start = time.monotonic()
        tasks = [asyncio.ensure_future(worker()) for _ in range(min(concurrency, max(1, len(todo))))]
        ticker = asyncio.ensure_future(tick()) if bar else None
        try:
            finished, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failure = next((t.exception() for t in finished if not t.cancelled() and t.exception()), None)
            if failure is not None:
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                raise failure
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            if ticker is not None:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)
            if bar:
                bar.__exit__(None, None, None)
            aclose = getattr(shared, "aclose", None)
            if aclose is not None:
                await aclose()

        play_s = time.monotonic() - play_start
        episodes = read_episodes(out_dir)
        all_errors = read_errors(out_dir)
        redact = _redactor(shared) if shared is not None else None
        if redact is not None:  # lines an older version wrote with a key fragment in them
            all_errors = [json_safe(record, redact) for record in all_errors]
        requested = {env_id: [int(s) for s in seeds] for env_id in env_ids}
        summary = build_summary(episodes, agent=name, errors=all_errors, requested=requested, prices=prices,
                                config=merged)
        keys = set(wanted)
        write_summary_and_report(out_dir, summary, [e for e in episodes if (e.env_id, e.seed) in keys],
                                 all_errors, compare=compare, env_kwargs=config["env_kwargs"],
                                 frame_episodes=frame_episodes)
    return EvalResult(summary=summary, ran=ran, skipped=skipped, errors=errors,
                      elapsed_s=time.monotonic() - started, play_s=play_s, out_dir=out_dir, error_reasons=reasons,
                      unreadable=unreadable.count)


def evaluate(*args: Any, **kwargs: Any) -> EvalResult:
    """Synchronous :func:`evaluate_async` (runs its own event loop)."""
    return asyncio.run(evaluate_async(*args, **kwargs))
