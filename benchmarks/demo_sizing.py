"""Sizing the demo's RL phase (issue 14): StarPO-S from a saved SFT model, evaluated like the demo.

    python benchmarks/demo_sizing.py sft --out runs/sizing/sft1400 [--steps 1400]
    python benchmarks/demo_sizing.py rl --sft runs/sizing/sft1400/sft/model --out runs/sizing/rl_a \
        --set steps=60 --set actor_lr=2e-5 [--set advantage=grpo ...] [--seed 1] [--preset starpo]

    python benchmarks/demo_sizing.py streams --out runs/sz/streams --a runs/sz/I/sft/model \
        --b runs/sz/J5e-5/starpo/model --streams 1 2 3 4 5
    python benchmarks/demo_sizing.py sft-speed --out runs/sz/sft_speed [--repeats 3 --time-steps 20]

``sft`` runs the demo's steps 1-3 (build, SFT, evaluation) with ``DEMO`` settings (``--steps``
overrides the SFT steps); ``rl`` runs steps 4-5 from an SFT model with ``DEMO["rl"]`` plus the
``--set`` overrides and prints the paired comparison with the SFT evaluation (same 256
EVAL_SEEDS, same sampling stream: exact McNemar p-value). Wall and CPU seconds are recorded
in ``OUT/sizing.json``. ``streams`` evaluates two models (``--a`` = before, ``--b`` = after)
like the demo under several sampling streams and prints the paired comparison of each and
pooled (how much one evaluation's p-value owes to its stream). ``sft-speed`` times the
demo's SFT step with the context loss off and on (``context_coef`` 0 vs the demo's),
interleaved, ``--repeats`` times ``--time-steps`` steps from the same initial model: medians
and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("sft", "rl", "streams", "sft-speed"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--sft", help="the SFT model directory (rl)")
    parser.add_argument("--steps", type=int, help="SFT steps (sft)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--sft-set", action="append", default=[], metavar="KEY=VALUE", help="SFT setting (sft)")
    parser.add_argument("--seed", type=int, help="training seed (default: the demo's, 0)")
    parser.add_argument("--a", help="streams: the model before (e.g. the SFT model)")
    parser.add_argument("--b", help="streams: the model after (e.g. the StarPO-S model)")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2, 3, 4, 5],
                        help="streams: evaluation sampling seeds (the demo's is 1)")
    parser.add_argument("--repeats", type=int, default=3, help="sft-speed: interleaved repeats")
    parser.add_argument("--time-steps", type=int, default=20, help="sft-speed: SFT steps timed per repeat")
    parser.add_argument("--preset", default="starpo-s", help="trainer preset of the RL phase (default starpo-s; "
                                                             "starpo = vanilla: no filter, KL 0.001, clip 0.2 / 0.2)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    from ragen_envs.starpo.demo import DEMO, _evaluate, _success, build_demo_model
    from ragen_envs.starpo.stats import mcnemar_exact, paired_counts

    settings = json.loads(json.dumps(DEMO))
    for item in args.set:
        k, _, v = item.partition("=")
        settings["rl"][k] = _value(v)
    for item in args.sft_set:
        k, _, v = item.partition("=")
        settings["sft"][k] = _value(v)
    if args.steps:
        settings["sft"]["steps"] = args.steps
    if args.seed is not None:
        settings["seed"] = args.seed
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.monotonic(), time.process_time()
    if args.phase == "streams":
        return _streams(args, settings, out)
    if args.phase == "sft-speed":
        return _sft_speed(args, settings, out)
    if args.phase == "sft":
        from ragen_envs.starpo.sft import run_sft

        init = build_demo_model(out / "model_init", settings)
        model = run_sft(settings["env_id"], str(out / "sft"), model=str(init), env_kwargs=settings["env_kwargs"],
                        seed=settings["seed"], think_style="grounded", log=print,
                        max_new_tokens=settings["rl"]["max_new_tokens"], **settings["sft"])
        t_train = time.monotonic() - t0
        with torch.no_grad():
            ev = _evaluate(model, settings, seed=1)
        success = [bool(t.success) for t in ev]
        print(f"SFT {settings['sft']['steps']} steps: success {_success(ev):.3f}")
    else:
        from ragen_envs.starpo.config import make_config
        from ragen_envs.starpo.trainer import StarPOTrainer

        if not args.sft or not (Path(args.sft) / "config.json").exists():
            raise FileNotFoundError(f"--sft must name an SFT model directory (with config.json), got {args.sft!r}")
        sft_model = Path(args.sft)
        base = json.loads((sft_model.parent.parent / "sizing.json").read_text())
        cfg = make_config(args.preset, env_id=settings["env_id"], env_kwargs=settings["env_kwargs"], model=str(sft_model),
                          out_dir=str(out / "starpo"), seed=settings["seed"], eval_episodes=settings["eval_episodes"],
                          **settings["rl"])
        StarPOTrainer(cfg, log=print).train()
        t_train = time.monotonic() - t0
        with torch.no_grad():
            ev = _evaluate(out / "starpo" / "model", settings, seed=1)
        success = [bool(t.success) for t in ev]
        counts = paired_counts(base["success"], success)
        p = mcnemar_exact(counts["only_a"], counts["only_b"])
        print(f"SFT {sum(base['success']) / len(base['success']):.3f} -> RL {_success(ev):.3f}; only SFT "
              f"{counts['only_a']}, only RL {counts['only_b']}, McNemar p = {p:.3g}")
    report = {"phase": args.phase, "settings": settings, "success": success, "rate": sum(success) / len(success),
              "train_wall_s": t_train, "wall_s": time.monotonic() - t0, "cpu_s": time.process_time() - c0}
    (out / "sizing.json").write_text(json.dumps(report, indent=1))
    print(f"wall {report['wall_s']:.0f}s (train {t_train:.0f}s), cpu {report['cpu_s']:.0f}s")
    return 0


def _streams(args, settings: dict, out: Path) -> int:
    """Both models under each evaluation stream: success, discordant counts, exact McNemar p."""
    import torch

    from ragen_envs.starpo.demo import _evaluate
    from ragen_envs.starpo.stats import mcnemar_exact, paired_counts

    for name in ("a", "b"):
        path = getattr(args, name)
        if not path or not (Path(path) / "config.json").exists():
            raise FileNotFoundError(f"--{name} must name a model directory (with config.json), got {path!r}")
    rows, only_a, only_b = [], 0, 0
    t0 = time.monotonic()
    for stream in args.streams:
        with torch.no_grad():
            a = [bool(t.success) for t in _evaluate(Path(args.a), settings, seed=stream)]
            b = [bool(t.success) for t in _evaluate(Path(args.b), settings, seed=stream)]
        c = paired_counts(a, b)
        only_a, only_b = only_a + c["only_a"], only_b + c["only_b"]
        row = {"stream": stream, "a": sum(a) / len(a), "b": sum(b) / len(b), "only_a": c["only_a"],
               "only_b": c["only_b"], "p": mcnemar_exact(c["only_a"], c["only_b"])}
        rows.append(row)
        print(f"stream {stream}: a {row['a']:.3f}, b {row['b']:.3f}; only a {row['only_a']}, only b {row['only_b']}, "
              f"McNemar p = {row['p']:.3g}")
    pooled = {"only_a": only_a, "only_b": only_b, "p": mcnemar_exact(only_a, only_b)}
    print(f"pooled over {len(rows)} streams: only a {only_a}, only b {only_b}, McNemar p = {pooled['p']:.3g}; "
          f"{time.monotonic() - t0:.0f}s")
    (out / "streams.json").write_text(json.dumps({"a": args.a, "b": args.b, "rows": rows, "pooled": pooled}, indent=1))
    return 0


def _sft_speed(args, settings: dict, out: Path) -> int:
    """Median wall seconds per SFT step with context_coef 0 and the demo's value, interleaved."""
    import statistics

    import torch

    from ragen_envs.starpo.demo import build_demo_model
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories, train_sft

    sft = settings["sft"]
    coefs = (0.0, float(sft["context_coef"]))
    init = build_demo_model(out / "model_init", settings)
    tok = load_tokenizer(init)
    fmt = ChatFormat(tok, "<think>" if settings["env_kwargs"].get("think", True) else "<answer>")
    data = expert_trajectories(settings["env_id"], fmt, range(sft["seed_start"], sft["seed_start"] + 2000),
                               actions_per_turn=sft["actions_per_turn"], env_kwargs=settings["env_kwargs"])
    times: dict[float, list[float]] = {c: [] for c in coefs}
    for rep in range(args.repeats):
        for coef in coefs:
            model = load_policy(init)
            t = time.monotonic()
            train_sft(model, data, pad_id=tok.pad_token_id, steps=args.time_steps, batch_size=sft["batch_size"],
                      lr=sft["lr"], warmup=sft["warmup"], seed=rep, context_coef=coef)
            times[coef].append((time.monotonic() - t) / args.time_steps)
    med = {c: statistics.median(v) for c, v in times.items()}
    ratio = med[coefs[1]] / med[coefs[0]]
    print(f"SFT step, median of {args.repeats} x {args.time_steps} steps (torch threads {torch.get_num_threads()}): "
          f"context_coef 0 {med[coefs[0]]:.3f}s, {coefs[1]} {med[coefs[1]]:.3f}s, ratio {ratio:.3f}")
    (out / "sft_speed.json").write_text(json.dumps({"seconds_per_step": {str(c): v for c, v in times.items()},
                                                    "median": {str(c): v for c, v in med.items()}, "ratio": ratio}))
    return 0


def _cli() -> int:
    try:
        return main()
    except (ValueError, TypeError, FileNotFoundError) as exc:  # bad --set keys/values, a missing --sft model
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_cli())
