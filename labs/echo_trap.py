"""The Echo Trap lab (RAGEN §4.1-4.2, issue 14): vanilla StarPO against StarPO-S on one tiny model.

    python labs/echo_trap.py --out runs/echo_trap --variants starpo-grpo starpo-s-grpo \
        starpo-ppo starpo-s-ppo --seeds 0 1 2 --keep-sweep --sweep-advantage grpo --jobs 2

1. Build a tiny Qwen2-architecture model and tokenizer for the env (think on; Bandit-v0 by
   default) and give it a *prior* by SFT on scripted replies: varied think texts (three
   random sentence templates) and actions that are the expert's with probability
   ``expert_prob`` (0 by default), else uniformly random. The prior stands in for a
   pretrained model: well-formed replies, diverse reasoning, no preference yet.
2. From that prior, run each variant for several seeds (same prior, same training seeds):

   - ``starpo-ppo`` / ``starpo-grpo``: vanilla StarPO (no filter, KL loss 0.001, symmetric
     clip 0.2), PPO with a critic / GRPO;
   - ``starpo-s-ppo`` / ``starpo-s-grpo``: StarPO-S (top-25 % groups by return std, no KL,
     Clip-Higher 0.2 / 0.28);
   - ``starpo-s-ppo-ragen2`` / ``starpo-s-grpo-ragen2``: StarPO-S with RAGEN-2's filter
     (``--preset ragen2``: linear top_p 0.9 over the groups' return variance, zero-variance
     groups dropped, the run stopped after 5 steps that keep nothing) instead of the top 25 %;
   - ``--keep-sweep``: StarPO-S (``--sweep-advantage`` gae = PPO, or grpo) keeping 25 / 50 /
     75 / 100 % of the groups (§5); ``--ragen2-sweep P ...``: the same with RAGEN-2's filter at
     each top_p value p (``ragen2-p<100 p>``); a run whose config equals another's is not repeated.

   The reference's filter side by side with ours, on the same seeds (issue 45)::

       python labs/echo_trap.py --out runs/ragen2_filter --variants starpo-grpo starpo-s-grpo \
           starpo-s-grpo-ragen2 --seeds 0 1 2 --keep-sweep --sweep-advantage grpo \
           --ragen2-sweep 0.25 0.5 0.9 1.0 --jobs 2

3. Per run: the trainer's ``metrics.jsonl`` (Echo Trap monitor events included), the
   evaluation on the 256 ``EVAL_SEEDS`` (T = 0.5) every ``eval_every`` steps and at the end.
4. Summary (``OUT/echo_trap.json``, ``OUT/echo_trap.png``, ``OUT/echo_trap_keep.png``):
   curves with bands (min-max over seeds) of success, return, in-group return std, actor
   grad norm, think diversity (probe distinct bigrams), entropy, reply length, KL; per run
   the first step of each monitor warning (the trainer's thresholds, and replayed with
   looser ones, :data:`SENSITIVE_MONITOR`) and the collapse step (:func:`collapse_step`);
   final success per variant with a Wilson 95 % CI over all (seed, episode) pairs and,
   against its vanilla baseline (:func:`baseline_of`), the paired McNemar exact p-value and
   a seed-stratified bootstrap CI of the difference (same eval seeds and sampling stream
   for the same training seed).

Finished runs under ``OUT/runs`` are reused (delete the folder to start over), so adding
variants to a finished lab only trains the new ones. Everything is seeded; ``--jobs`` runs
that many training processes at once, one thread each. The runner and the analysis live in
``labs/_labs_common.py`` (the multi-turn lab and the monitor corpus reuse them).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):  # the checkout (ragen_envs) and this folder (_labs_common)
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _labs_common import BANDIT_SETTINGS, BANDIT_SMOKE, VARIANTS, run_lab  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/echo_trap")
    parser.add_argument("--env", default=None, help="env id (default ragen/Bandit-v0)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=["starpo-grpo", "starpo-s-grpo"], choices=sorted(VARIANTS))
    parser.add_argument("--keep-sweep", action="store_true", help="also StarPO-S PPO keeping 25/50/75/100 %% of groups")
    parser.add_argument("--sweep-advantage", default="gae", choices=("gae", "grpo"),
                        help="advantage of the keep-ratio sweep's StarPO-S runs (gae = PPO)")
    parser.add_argument("--ragen2-sweep", type=float, nargs="+", default=[], metavar="P",
                        help="also StarPO-S with RAGEN-2's linear top_p filter at these p in (0, 1]")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--actor-lr", type=float, default=None)
    parser.add_argument("--group-size", type=int, default=None)
    parser.add_argument("--num-groups", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--expert-prob", type=float, default=None, help="the prior's share of expert actions")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="any rl setting, e.g. kl_coef=0.01")
    parser.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON",
                        help="an env constructor kwarg, e.g. think=false (prior and training)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--prior", default=None, help="reuse this prior model directory (e.g. OTHER_OUT/prior/model)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps (the test)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    settings = json.loads(json.dumps(BANDIT_SMOKE if args.smoke else BANDIT_SETTINGS))
    if args.env:
        settings["env_id"] = args.env
    for key, value in (("steps", args.steps), ("actor_lr", args.actor_lr), ("group_size", args.group_size),
                       ("num_groups", args.num_groups), ("max_new_tokens", args.max_new_tokens)):
        if value is not None:
            settings["rl"][key] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set needs KEY=VALUE, got {item!r}")
        try:
            settings["rl"][key] = json.loads(value)
        except json.JSONDecodeError:
            settings["rl"][key] = value
    for item in args.env_kwarg:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--env-kwarg needs KEY=VALUE, got {item!r}")
        try:
            settings["env_kwargs"][key] = json.loads(value)
        except json.JSONDecodeError:
            settings["env_kwargs"][key] = value
    if args.expert_prob is not None:
        settings["prior"]["expert_prob"] = args.expert_prob
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    bad = [p for p in args.ragen2_sweep if not 0.0 < p <= 1.0]
    if bad:
        parser.error(f"--ragen2-sweep values must be in (0, 1], got {bad[0]}")
    try:
        run_lab(Path(args.out), settings, args.variants, args.seeds, keep_sweep=args.keep_sweep, jobs=args.jobs,
                sweep_advantage=args.sweep_advantage, prior=Path(args.prior) if args.prior else None,
                ragen2_sweep=args.ragen2_sweep)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
