"""Which SFT weights to hand to StarPO-S (issue 23 goal 1): the last step's, a weight average, or
the snapshot that does best on a held-out split.

    python labs/sft_selection.py --out runs/sel/s0 --seed 0 --threads 1 \
        [--snapshot-from 700 --snapshot-every 100 --ema 0.99 0.995 --ema-from 500]

Runs the demo's SFT phase (``DEMO`` settings, the same draws as ``make demo``'s SFT: the
per-step hook only reads the weights) and, along the way, keeps exponential moving averages
of the weights (EMA_t = d EMA_{t-1} + (1 - d) theta_t, started at step ``--ema-from`` with
EMA = theta) and saves the raw and averaged weights every ``--snapshot-every`` steps from
``--snapshot-from`` on (and at the last step). Then every snapshot is evaluated like the demo
evaluates (temperature 0.5, the demo's reply cap) on two disjoint seed sets:

* a validation split: ``--val-episodes`` layouts from seed ``--val-seed`` (30,000: disjoint
  from the SFT data's 10,000-25,999, the RL training seeds 50,000+ and ``EVAL_SEEDS``
  123-378), one sampling stream: what a selection rule may look at;
* the demo's 256 ``EVAL_SEEDS`` under the demo's 4 streams: what the selection is judged on.

``OUT/selection.json`` holds every snapshot's two figures and the three rules' picks (last
raw step, last EMA of each decay, best validation snapshot).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0, help="training seed (the demo's --seed)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--steps", type=int, help="SFT steps (default: the demo's)")
    parser.add_argument("--snapshot-from", type=int, default=700)
    parser.add_argument("--snapshot-every", type=int, default=100)
    parser.add_argument("--ema", type=float, nargs="*", default=[0.99, 0.995], help="EMA decays")
    parser.add_argument("--ema-from", type=int, default=500, help="the step the averages start at")
    parser.add_argument("--val-seed", type=int, default=30_000)
    parser.add_argument("--val-episodes", type=int, default=256)
    parser.add_argument("--sft-set", action="append", default=[], metavar="KEY=VALUE",
                        help="an SFT setting of run_sft, e.g. lr_schedule=wsd or lr=3e-3")
    parser.add_argument("--eval-only", action="store_true", help="evaluate the snapshots already in OUT")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.snapshot_every < 1 or args.val_episodes < 1 or args.snapshot_from < 1:
        parser.error("--threads, --snapshot-every, --snapshot-from and --val-episodes must be >= 1")
    if any(not 0.0 < d < 1.0 for d in args.ema):
        parser.error("--ema decays must lie in (0, 1)")
    from ragen_envs.starpo.demo import DEMO, build_demo_model, cpu_threads

    cpu_threads(args.threads)
    import torch

    settings = json.loads(json.dumps(DEMO))
    settings["seed"] = args.seed
    settings["sft"]["stop_at_success"] = None  # the snapshots span the whole run (--sft-set stop_at_success=0.8 stops it)
    import inspect

    from ragen_envs.starpo.sft import run_sft

    known = set(inspect.signature(run_sft).parameters) - {"env_id", "out_dir", "model", "log", "env_kwargs", "seed",
                                                          "think_style", "max_new_tokens", "on_step", "steps"}
    for item in args.sft_set:
        key, eq, value = item.partition("=")
        if not eq or key not in known:
            parser.error(f"--sft-set {item!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(known))}")
        try:
            settings["sft"][key] = json.loads(value)
        except json.JSONDecodeError:
            settings["sft"][key] = value
    if args.steps:
        settings["sft"]["steps"] = args.steps
    steps = settings["sft"]["steps"]
    out = Path(args.out)
    snaps = out / "snapshots"
    snaps.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.monotonic(), time.process_time()
    if not args.eval_only:
        emas: dict[float, dict[str, torch.Tensor]] = {}

        def on_step(step: int, model) -> None:
            done = step + 1  # optimiser steps taken
            with torch.no_grad():
                params = {k: v.detach() for k, v in model.state_dict().items()}
                if done == args.ema_from:
                    for d in args.ema:
                        emas[d] = {k: v.clone().float() for k, v in params.items()}
                elif done > args.ema_from:
                    for d, avg in emas.items():
                        for k, v in params.items():
                            avg[k].lerp_(v.float(), 1.0 - d)
            if done == steps or (done >= args.snapshot_from and (done - args.snapshot_from) % args.snapshot_every == 0):
                torch.save({k: v.clone() for k, v in params.items()}, snaps / f"raw_{done}.pt")
                for d, avg in emas.items():
                    torch.save({k: v.clone() for k, v in avg.items()}, snaps / f"ema{d}_{done}.pt")

        from ragen_envs.starpo.sft import check_schedule

        sft = settings["sft"]
        try:  # a bad schedule setting fails here, before the model, the data or any step
            check_schedule(steps, sft.get("warmup", 50), sft.get("min_lr_ratio", 0.1), sft.get("lr_schedule", "cosine"),
                           sft.get("decay_frac", 0.2), sft.get("ema_decay", 0.0), sft.get("ema_from", 0))
        except (TypeError, ValueError) as e:
            parser.error(f"--sft-set: {e}")
        init = build_demo_model(out / "model_init", settings)
        run_sft(settings["env_id"], str(out / "sft"), model=str(init), env_kwargs=settings["env_kwargs"],
                seed=settings["seed"], think_style="grounded", log=print,
                max_new_tokens=settings["rl"]["max_new_tokens"], on_step=on_step, **settings["sft"])
    train_s = time.monotonic() - t0
    model_dir = out / "sft" / "model"
    if not (model_dir / "config.json").exists():
        parser.error(f"{model_dir} holds no SFT model: run without --eval-only first")
    rows = _evaluate_snapshots(model_dir, sorted(snaps.glob("*.pt")), settings, args)
    picks = _picks(rows, steps, args.ema)
    report = {"settings": settings, "args": vars(args), "torch_threads": torch.get_num_threads(), "rows": rows,
              "picks": picks, "train_wall_s": train_s, "wall_s": time.monotonic() - t0, "cpu_s": time.process_time() - c0}
    (out / "selection.json").write_text(json.dumps(report, indent=1))
    for name, row in picks.items():
        print(f"{name:>12}: {row['name']:>14}  validation {row['val']:.3f}  eval (4 streams) {row['eval']:.4f}")
    return 0


def _evaluate_snapshots(model_dir: Path, paths: list[Path], settings: dict, args) -> list[dict]:
    import torch

    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import validation_success
    from ragen_envs.starpo.trainer import evaluate_policy

    tok = load_tokenizer(model_dir)
    fmt = ChatFormat(tok, "<answer>" if not settings["env_kwargs"].get("think", True) else "<think>")
    model = load_policy(model_dir)
    cap = settings["rl"]["max_new_tokens"]
    rows = []
    for path in paths:
        model.load_state_dict(torch.load(path))
        model.eval()
        with torch.no_grad():
            val = validation_success(model, fmt, tok.pad_token_id, settings["env_id"], seed_start=args.val_seed,
                                     episodes=args.val_episodes, max_new_tokens=cap, env_kwargs=settings["env_kwargs"])
            streams = [[bool(t.success) for t in evaluate_policy(
                model, fmt, tok.pad_token_id, settings["env_id"], episodes=settings["eval_episodes"], temperature=0.5,
                seed=s, max_new_tokens=cap, env_kwargs=settings["env_kwargs"])] for s in settings["eval_streams"]]
        kind, _, step = path.stem.rpartition("_")
        row = {"name": path.stem, "kind": kind, "step": int(step), "val": val,
               "eval": sum(map(sum, streams)) / sum(map(len, streams)), "eval_streams": streams}
        rows.append(row)
        print(f"{path.stem:>14}: validation {row['val']:.3f}, eval over {len(streams)} streams {row['eval']:.4f}")
    return rows


def _picks(rows: list[dict], steps: int, decays: list[float]) -> dict:
    """The rules' choices: the last raw weights, each EMA at the last step, and the snapshot
    (raw or averaged) with the best validation success (ties: the later step)."""
    by = {r["name"]: r for r in rows}
    picks = {"last": by.get(f"raw_{steps}")}
    for d in decays:
        picks[f"ema{d}"] = by.get(f"ema{d}_{steps}")
    picks["best_val"] = max(rows, key=lambda r: (r["val"], r["step"]))
    picks["best_val_raw"] = max((r for r in rows if r["kind"] == "raw"), key=lambda r: (r["val"], r["step"]))
    return {k: {kk: vv for kk, vv in v.items() if kk != "eval_streams"} for k, v in picks.items() if v is not None}


if __name__ == "__main__":
    sys.exit(main())
