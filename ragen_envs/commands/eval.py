"""``ragen eval ENV_ID [ENV_ID ...] --agent SPEC --out DIR``: zero-shot evaluation on fixed seeds.

Agents: openai:MODEL (any OpenAI-compatible endpoint, --base-url; the key is read from the
environment variable named by --api-key-env), hf:PATH (a local model), expert, random.

A model folder written by `ragen sft`, `ragen train` or the demo carries the protocol settings
it was trained under (ragen_protocol.json: env kwargs such as think on/off, the forced reply
prefix, the reply cap, the temperature, token history): hf:PATH uses them unless a flag says
otherwise, and prints what it uses. That includes the trainer's context_window_mode /
max_context_window (what each turn's prompt held): a model trained windowed is evaluated
windowed unless --context-window-mode / --max-context-window say otherwise; each turn every
agent is then sent the trainer's window of the episode.

Writes DIR/episodes.jsonl (one line per finished episode), DIR/errors.jsonl (episodes whose
requests kept failing: not counted as failures, retried by the next run), DIR/config.json,
DIR/summary.json and DIR/report.html, and prints a table per env. Running the same command
again resumes: finished episodes are skipped.

examples:
  ragen eval ragen/Sokoban-v0 ragen/FrozenLake-v0 --agent openai:gpt-4o --out runs/gpt4o
  ragen eval all --agent openai:qwen --base-url http://127.0.0.1:8000/v1 --seeds 123..150 --out runs/qwen
  ragen eval ragen/Bandit-v0 --agent hf:Qwen/Qwen2.5-0.5B-Instruct --no-think --out runs/q05 --compare runs/gpt4o
  ragen eval ragen/Sokoban-v0 ragen/FrozenLake-v0 --agent openai:gpt-4o --out runs/gpt4o --compare paper
"""

from __future__ import annotations

import argparse
import sys

from . import add_kwarg_limit_flag, kwarg_bounds_or_fail, make_env_or_fail, parse_env_kwargs


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate an agent on the fixed seeds, with a report", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_ids", nargs="+", metavar="ENV_ID", help="ragen/* ids (see `ragen list`), or `all`")
    p.add_argument("--agent", required=True, metavar="SPEC", help="openai:MODEL, hf:PATH, expert or random")
    p.add_argument("--out", required=True, metavar="DIR", help="run directory (created; reused to resume)")
    p.add_argument("--seeds", default="256", metavar="N|A..B|LIST",
                   help="N: the first N of the 256 EVAL_SEEDS (default 256); A..B: seeds A to B inclusive; "
                        "or a comma list such as 123,130..140")
    p.add_argument("--concurrency", type=int,
                   help="episodes (= requests) in flight (default 16; hf: 64, sampled together as one batch)")
    g = p.add_argument_group("model")
    g.add_argument("--base-url", help="API root of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (default OPENAI_API_KEY)")
    g.add_argument("--temperature", type=float,
                   help="sampling temperature (default 0.5, the paper's; hf: the checkpoint's setting when it has one)")
    g.add_argument("--max-tokens", type=int,
                   help="reply cap (default 512 for openai:; hf: the checkpoint's reply cap, else 400)")
    g.add_argument("--max-tokens-field", choices=("max_tokens", "max_completion_tokens"), default="max_tokens",
                   help="request field carrying --max-tokens (newer OpenAI models need max_completion_tokens)")
    g.add_argument("--top-p", type=float, help="nucleus sampling (default: the server's)")
    g.add_argument("--stop", action="append", metavar="TEXT", help="stop sequence (repeatable)")
    g.add_argument("--extra-body", metavar="JSON", help='extra request fields, e.g. \'{"top_k": 20}\'')
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    g.add_argument("--max-retries", type=int, default=5,
                   help="retries of a failing request: 429/5xx/timeouts/dropped connections (default 5)")
    g.add_argument("--retry-backoff", type=float, default=0.5, metavar="SECONDS",
                   help="first retry wait; doubles each retry up to 30 s, with jitter; Retry-After wins (default 0.5)")
    g.add_argument("--think-prefix", choices=("auto", "always", "never"), default="auto",
                   help="prepend <think> to replies: auto = only when missing (default), always = the reference's "
                        "API evaluation, never")
    g.add_argument("--tokenizer", metavar="PATH", help="count tokens with this tokenizer when the API reports no usage")
    g.add_argument("--batch-size", type=int, help="hf: most conversations per sampling batch (default: --concurrency)")
    g.add_argument("--prefill", action=argparse.BooleanOptionalAction, default=None,
                   help="hf: end the prompt with the opening tag (<think>, or <answer> with think off) as the "
                        "trainer does (default: the checkpoint's setting, else off)")
    g.add_argument("--history", choices=("tokens", "messages"),
                   help="hf: feed earlier turns back as the sampled tokens (tokens, the trainer's way) or as "
                        "re-rendered messages (default: the checkpoint's setting, else messages)")
    g.add_argument("--device", help="hf: cuda, cpu, ... (default: cuda when available)")
    g.add_argument("--context-window-mode", choices=("full", "limited_multi_turn", "single_turn"), default=None,
                   help="what each turn's prompt holds, the trainer's context_window_mode: full = the whole "
                        "episode, limited_multi_turn = the last K turns, single_turn = one message "
                        "summarising the K - 1 turns before and the current state (default: an hf: checkpoint's "
                        "training mode, else full)")
    g.add_argument("--max-context-window", type=int, default=None, metavar="K",
                   help="K, the current turn included, for the windowed modes: -1 no limit (the default with a "
                        "mode flag), 1 the current state only; the trainer's max_context_window")
    e = p.add_argument_group("environment")
    e.add_argument("--think", action=argparse.BooleanOptionalAction, default=None,
                   help="ask for <think>..</think><answer>..</answer> (default) or <answer> only")
    e.add_argument("--env-kwarg", action="append", metavar="KEY=VALUE", help="env constructor kwarg (repeatable)")
    add_kwarg_limit_flag(e)
    e.add_argument("--image-obs", action="store_true",
                   help="grid envs: show the state as a picture (OpenAI content parts, a PNG of a few KB) for "
                        "vision endpoints; openai:, expert and random agents")
    r = p.add_argument_group("results")
    r.add_argument("--compare", action="append", metavar="DIR2|NAME",
                   help="another run directory to compare with, or the bundled reference numbers: paper, expert, "
                        "random or reference (all three); repeatable (docs/reference-scores.md)")
    r.add_argument("--prices", metavar="IN,OUT", help="USD per 1M prompt tokens and per 1M completion tokens, e.g. 2.5,10")
    r.add_argument("--stop-after-errors", type=int, default=20, metavar="N",
                   help="stop when N episodes in a row end in errors (default 20; 0 = never)")
    r.add_argument("--report-frames", type=int, default=16, metavar="N",
                   help="episodes per env shown with rendered frames in report.html (default 16; others as text)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def parse_seeds(text: str) -> list[int]:
    """``"256"`` -> the first 256 EVAL_SEEDS; ``"123..200"`` -> 123..200 inclusive; ``"1,5..7"`` -> [1, 5, 6, 7]."""
    from .. import EVAL_SEEDS
    from ..cli import CLIError

    text = text.strip()
    if text.isdigit():
        n = int(text)
        if not 1 <= n <= len(EVAL_SEEDS):
            raise CLIError(f"--seeds N must be between 1 and {len(EVAL_SEEDS)} (the fixed seeds), got {n}; "
                           f"use A..B for other seeds")
        return list(EVAL_SEEDS[:n])
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("..")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise CLIError(f"--seeds: cannot read {part!r} (use N, A..B or a comma list)") from None
        if a < 0 or b < a:
            raise CLIError(f"--seeds: {part!r} is not a range of seeds >= 0")
        if b >= 2**32:
            raise CLIError(f"--seeds: {part!r} goes beyond the largest seed 2**32 - 1 = {2**32 - 1}")
        seeds += range(a, b + 1)
    return list(dict.fromkeys(seeds))


def parse_prices(text: str | None) -> tuple[float, float] | None:
    from ..cli import CLIError

    if text is None:
        return None
    try:
        prices = tuple(float(x) for x in text.split(","))
    except ValueError:
        prices = ()
    if len(prices) != 2 or any(p < 0 for p in prices):
        raise CLIError(f"--prices expects IN,OUT (USD per 1M prompt and completion tokens), got {text!r}")
    return prices


def _compare_runs(names: list[str], env_ids: list[str]) -> tuple[list[dict], list[str]]:
    """The summaries that ``--compare`` names, each with its name for the column labels: a run
    directory, or a reference name (``paper``, ``expert``, ``random``, ``reference``: the bundled
    numbers for ``env_ids``; always these, so a directory of that name is written ``./paper``)."""
    from ..cli import CLIError
    from ..eval import load_summary
    from ..eval.reference import REFERENCE_NAMES, ReferenceScoresError, reference_runs

    summaries, dirs = [], []
    for name in names:
        if name in REFERENCE_NAMES:
            try:
                runs = reference_runs(name, env_ids)
            except (ReferenceScoresError, OSError) as exc:
                raise CLIError(f"--compare {name}: the bundled reference scores cannot be read: {exc}") from None
            if not runs:
                print(f"note: --compare {name}: no reference numbers for {', '.join(env_ids)}", file=sys.stderr)
            summaries += [summary for _, summary in runs]
            dirs += [label for label, _ in runs]
            continue
        try:
            summaries.append(load_summary(name))
        except (FileNotFoundError, OSError) as exc:
            why = "no run there" if isinstance(exc, FileNotFoundError) else str(exc)
            raise CLIError(f"--compare {name}: {why}; give a run directory or one of "
                           f"{', '.join(REFERENCE_NAMES)}") from None
        dirs.append(name)
    return summaries, dirs


def _checkpoint_settings(spec: str):
    """The protocol settings saved beside an hf: model folder (None for other agents). A folder
    that does not exist (or a hub id that cannot be had) is one line now, not after torch loads
    and the hub is retried (:func:`ragen_envs.agents.hf.resolve_model_path`)."""
    from ..cli import CLIError

    kind, sep, path = spec.partition(":")
    if kind != "hf" or not sep:
        return None
    from ..agents.hf import resolve_model_path
    from ..lm.settings import load_settings

    try:
        return load_settings(resolve_model_path(path))
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def resolve_context_window(args, trained) -> str:
    """Set ``args.context_window_mode`` / ``args.max_context_window`` and say where they came
    from: the flags when either is given (a mode alone: K = -1; K alone: mode full, which the
    check then refuses with K != -1) -> ``"argument"``; else the hf: checkpoint's training values
    (``trained``: its ProtocolSettings, or None) -> ``"checkpoint"``; else full / -1 -> ``"default"``."""
    if args.context_window_mode is None and args.max_context_window is None:
        if trained is not None:
            args.context_window_mode, args.max_context_window = trained.context_window_mode, trained.max_context_window
            return "checkpoint"
        args.context_window_mode, args.max_context_window = "full", -1
        return "default"
    if args.context_window_mode is None:
        args.context_window_mode = "full"
    if args.max_context_window is None:
        args.max_context_window = -1
    return "argument"


def _build_agent(args, think: bool | None):
    from ..cli import CLIError

    kind, sep, arg = args.agent.partition(":")
    extra = {}
    if args.extra_body:
        from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted

        try:
            extra = loads_untrusted(args.extra_body, allow_nan=False)  # a request body: NaN is not JSON
        except UntrustedJSONError as exc:
            raise CLIError(f"--extra-body is not valid JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise CLIError("--extra-body must be a JSON object")
    think_kw = {} if think is None else {"think": think}
    if kind in ("expert", "random") and not sep:
        return args.agent
    if kind == "openai" and sep:
        from ..agents.openai_agent import OpenAIAgent

        if args.prefill is not None or args.history is not None:
            raise CLIError("--prefill and --history are for hf: agents")
        temperature = 0.5 if args.temperature is None else args.temperature
        kwargs = dict(base_url=args.base_url, api_key_env=args.api_key_env, temperature=temperature,
                      max_tokens_field=args.max_tokens_field, top_p=args.top_p, stop=args.stop, extra_body=extra,
                      timeout=args.timeout, max_retries=args.max_retries, backoff_base=args.retry_backoff,
                      think_prefix=args.think_prefix,
                      tokenizer=args.tokenizer, **think_kw)
        if args.max_tokens is not None:
            kwargs["max_tokens"] = args.max_tokens
        try:
            return OpenAIAgent(arg, **kwargs)
        except (ImportError, ValueError) as exc:
            raise CLIError(str(exc)) from None
    if kind == "hf" and sep:
        if args.base_url or args.extra_body:
            raise CLIError("--base-url and --extra-body are for openai: agents; hf: runs the model in this process")
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            from ..agents.hf import HFAgent

            return HFAgent(arg, temperature=args.temperature, top_p=args.top_p if args.top_p is not None else 1.0,
                           max_tokens=args.max_tokens, stop=args.stop, batch_size=args.batch_size or args.concurrency,
                           device=args.device, think_prefix=args.think_prefix, prefill=args.prefill,
                           history=args.history, **think_kw)
        except (ImportError, ValueError) as exc:
            raise CLIError(str(exc)) from None
    raise CLIError(f"unknown agent {args.agent!r}; use openai:MODEL, hf:PATH, expert or random")


def run(args) -> int:
    from ..devices import passive_omp

    passive_omp()  # before anything imports torch (hf: agents): idle OpenMP threads must not spin
    trained = _checkpoint_settings(args.agent)  # first: a missing hf: folder is one line at once
    import ragen_envs

    from ..agents import AgentFatalError
    from ..cli import CLIError
    from ..eval import format_compare_table, format_summary_table
    from ..eval.harness import RunConfigMismatch, TooManyErrors, evaluate
    from ..eval.tables import context_window_label, run_labels
    from ..eval.store import RunLockedError

    env_ids = list(dict.fromkeys(
        s.id for name in args.env_ids for s in ragen_envs.ENV_SPECS if name == "all" or s.id == name))
    for name in args.env_ids:
        if name != "all":
            make_env_or_fail(name).close()  # unknown ids -> one clear line
    seeds = parse_seeds(args.seeds)
    prices = parse_prices(args.prices)
    kind = args.agent.partition(":")[0]
    if args.concurrency is None:
        args.concurrency = 64 if kind == "hf" else 16
    if args.concurrency < 1:
        raise CLIError(f"--concurrency must be >= 1, got {args.concurrency}")
    if args.batch_size is not None and args.batch_size < 1:
        raise CLIError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.temperature is not None and args.temperature < 0:
        raise CLIError(f"--temperature must be >= 0, got {args.temperature}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise CLIError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    if min(args.max_retries, args.report_frames, args.stop_after_errors, args.retry_backoff) < 0 or args.timeout <= 0:
        raise CLIError("--max-retries, --retry-backoff, --report-frames and --stop-after-errors must be >= 0, "
                       "--timeout > 0")
    from ..protocol.context import check_context_window

    window_from = resolve_context_window(args, trained)
    try:  # the trainer's own check of its context_window_mode / max_context_window
        check_context_window(args.context_window_mode, args.max_context_window)
    except ValueError as exc:
        raise CLIError(f"--context-window-mode / --max-context-window: {exc}") from None
    windowed = args.context_window_mode != "full"
    if windowed and args.image_obs:
        raise CLIError(f"--context-window-mode {args.context_window_mode} cuts text observations: not with --image-obs")
    env_kwargs = parse_env_kwargs(args.env_kwarg)
    if trained is not None:
        # the env kwargs the model was trained with, unless a flag says otherwise
        env_kwargs = {**trained.env_kwargs, **env_kwargs}
    if args.think is not None:
        env_kwargs["think"] = args.think
    for env_id in env_ids:
        env = make_env_or_fail(env_id, bounds=kwarg_bounds_or_fail(getattr(args, "kwarg_limit", None)),
                               **env_kwargs)  # bad kwargs -> one clear line, before any request
        if args.image_obs:
            if kind == "hf":
                raise CLIError("--image-obs sends pictures: use an openai: vision endpoint (hf: agents take text)")
            from ..vision import ImageObservation

            try:
                ImageObservation(env).close()
            except (ValueError, ImportError) as exc:
                raise CLIError(f"--image-obs: {exc}") from None
        env.close()
        if windowed:
            from ..eval.harness import check_windowable

            try:
                check_windowable(env_id, env_kwargs, seeds[0], args.context_window_mode)
            except ValueError as exc:
                raise CLIError(str(exc)) from None

    compare, dirs = _compare_runs(args.compare or [], env_ids)
    labels = run_labels([{"agent": args.agent}] + compare, [args.out] + dirs)
    if env_kwargs and any(s.get("reference") for s in compare):
        kw = ", ".join(f"{k}={v!r}" for k, v in sorted(env_kwargs.items()))
        print(f"note: the reference numbers are for each id's default settings; this run sets {kw}", file=sys.stderr)

    # a checkpoint's own think setting is the hf: agent's default: pass think only when the user set it
    user_think = args.think if args.think is not None else parse_env_kwargs(args.env_kwarg).get("think")
    agent = _build_agent(args, user_think if trained is not None else env_kwargs.get("think"))
    describe = getattr(agent, "describe", None)
    if callable(describe):
        print(describe(), file=sys.stderr)
        if trained is not None:
            others = [e for e in env_ids if e != trained.env_id]
            kw = ", ".join(f"{k}={v!r}" for k, v in sorted(env_kwargs.items()))
            print(f"env kwargs: {kw or '(none)'}" + (f"; note: the model was trained on {trained.env_id}, not "
                                                    f"{', '.join(others)}" if others else ""), file=sys.stderr)
    from .._rundir import claim_run_dir

    claim_run_dir(args.out, kind="eval", resume=True)  # an eval run resumes; anything else non-empty: refused
    window = context_window_label(args.context_window_mode, args.max_context_window)
    print(f"evaluating {args.agent} on {len(env_ids)} env(s) x {len(seeds)} seeds "
          f"({seeds[0]}..{seeds[-1]}) -> {args.out}" + (f"; context window {window} ({window_from})" if window else ""),
          file=sys.stderr)
    try:
        result = evaluate(agent, env_ids, seeds, args.out, concurrency=args.concurrency, env_kwargs=env_kwargs,
                          agent_name=args.agent, prices=prices, compare=list(zip(labels[1:], compare)),
                          stop_after_errors=args.stop_after_errors, progress=not args.quiet,
                          frame_episodes=args.report_frames, image_obs=args.image_obs,
                          context_window_mode=args.context_window_mode, max_context_window=args.max_context_window)
    except (RunLockedError, RunConfigMismatch) as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"cannot write the run directory {args.out}: {exc}") from None
    except (TooManyErrors, AgentFatalError) as exc:
        raise CLIError(f"stopped: {exc}") from None
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished episodes are kept in {args.out}/episodes.jsonl; "
              f"run the same command again to resume", file=sys.stderr)
        raise
    finally:
        close = getattr(agent, "close", None)
        if callable(close):
            close()  # a generation thread must not outlive the command (an abort at exit otherwise)
    summary = result.summary
    print()
    print(f"{args.agent}: {result.ran} episodes played now, {result.skipped} resumed, "
          f"{result.elapsed_s:.1f}s" + (f"; context window {window}" if window else ""))
    print(format_summary_table(summary))
    if compare:
        print()
        print(format_compare_table([summary] + compare, labels))
    totals = summary["totals"]
    if totals.get("cost_usd") is not None:
        print(f"\ncost: {totals['cost_usd']:.4f} USD for {totals['prompt_tokens']} prompt + "
              f"{totals['completion_tokens']} completion tokens")
    print(f"\nwrote {args.out}/summary.json and {args.out}/report.html")
    if totals["errors"]:
        shown = sorted({r.split(": ", 1)[-1] for r in result.error_reasons})[:3]
        print(f"{totals['errors']} episode(s) ended in errors (not counted above; run the same command "
              f"again to retry them)" + (": " + " | ".join(shown) if shown else ""), file=sys.stderr)
        return 1
    return 0
