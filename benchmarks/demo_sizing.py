"""Sizing the demo's RL phase (issue 14): StarPO-S from a saved SFT model, evaluated like the demo.

    python benchmarks/demo_sizing.py sft --out runs/sizing/sft1400 [--steps 1400]
    python benchmarks/demo_sizing.py rl --sft runs/sizing/sft1400/sft/model --out runs/sizing/rl_a \
        --set steps=60 --set actor_lr=2e-5 [--set advantage=grpo ...] [--seed 1] [--preset starpo]

``sft`` runs the demo's steps 1-3 (build, SFT, evaluation) with ``DEMO`` settings (``--steps``
overrides the SFT steps); ``rl`` runs steps 4-5 from an SFT model with ``DEMO["rl"]`` plus the
``--set`` overrides and prints the paired comparison with the SFT evaluation (same 256
EVAL_SEEDS, same sampling stream: exact McNemar p-value). Wall and CPU seconds are recorded
in ``OUT/sizing.json``.
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
    parser.add_argument("phase", choices=("sft", "rl"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--sft", help="the SFT model directory (rl)")
    parser.add_argument("--steps", type=int, help="SFT steps (sft)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--sft-set", action="append", default=[], metavar="KEY=VALUE", help="SFT setting (sft)")
    parser.add_argument("--seed", type=int, help="training seed (default: the demo's, 0)")
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


def _cli() -> int:
    try:
        return main()
    except (ValueError, TypeError, FileNotFoundError) as exc:  # bad --set keys/values, a missing --sft model
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_cli())
