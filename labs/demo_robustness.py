"""The demo's result over training seeds and torch thread counts (issue 23, goal 1).

    python labs/demo_robustness.py --out runs/rob/s0_t1 --seed 0 --threads 1
    python labs/demo_robustness.py --out runs/rob/h64 --seed 0 --threads 1 --model-set num_heads=4
    python labs/demo_robustness.py --out runs/rob/x --threads 1 --checkpoints-of runs/sz/rl_dir \
        --sft-model runs/sz/sft_dir/sft/model

With ``--checkpoints-of`` (a ``demo_sizing.py rl`` output run with ``--set keep_checkpoints=9``)
no demo is run: only its checkpoints and final model are evaluated against ``--sft-model``.
Each ``--average 20,25,30,35,40`` also evaluates the uniform weight average of those
iterations' actors (:func:`~ragen_envs.starpo.checkpoint.average_actors`, written to
``OUT/average_20-40``) against the SFT model and, paired, against the newest of those
checkpoints (iteration 40 here: the last iterate of a 40-iteration run).

Runs the whole demo (``DEMO`` settings in the demo's worker processes, ``run_processes``, or with
``--processes 1`` ``run_demo`` in this process; the given training seed and torch threads), keeping every 5th StarPO-S checkpoint, then evaluates each kept checkpoint's actor
like the demo (256 EVAL_SEEDS x the demo's sampling streams, T = 0.5) against the SFT model:
how the result would read with fewer RL iterations, from the same run (the actor lr is
constant, so iteration k of a 40-iteration run is a k-iteration run's model). Writes
``OUT/robustness.json``: the demo's report fields, wall and CPU seconds, and one row per
checkpoint. ``--model-set`` / ``--sft-set`` / ``--rl-set`` change the demo run's tiny model / SFT / StarPO-S settings
(``demo_sizing.py``'s flags), e.g. to test a candidate ``DEMO`` before it is adopted; ``--eval-streams K`` evaluates
under streams 1..K; ``--final-only`` keeps and evaluates no checkpoint (the demo's own result only).
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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per process (default: 1 with the demo's 2 processes, 2 with --processes 1)")
    parser.add_argument("--processes", type=int, default=None,
                        help="demo processes (default: the demo's, DEMO['processes']; 1 runs it in this process)")
    parser.add_argument("--model-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a tiny-model setting of the demo run (e.g. num_heads=4), as demo_sizing.py's")
    parser.add_argument("--sft-set", action="append", default=[], metavar="KEY=VALUE",
                        help="an SFT setting of the demo run, as demo_sizing.py's")
    parser.add_argument("--rl-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a StarPO-S setting of the demo run (e.g. steps=40)")
    parser.add_argument("--eval-streams", type=int, default=None, metavar="K",
                        help="evaluate under sampling streams 1..K (default: the demo's eval_streams)")
    parser.add_argument("--final-only", action="store_true",
                        help="only the demo's own result: no checkpoints kept or evaluated")
    parser.add_argument("--checkpoints-of", help="evaluate this RL run's checkpoints instead of running the demo")
    parser.add_argument("--sft-model", help="with --checkpoints-of: the SFT model it started from")
    parser.add_argument("--average", action="append", default=[], metavar="I,J,...",
                        help="also evaluate the weight average of these iterations' checkpoints (repeatable)")
    args = parser.parse_args(argv)
    try:
        averages = [sorted({int(x) for x in spec.split(",")}) for spec in args.average]
    except ValueError:
        parser.error(f"--average takes comma-separated iteration numbers, got {args.average!r}")
    for name in ("threads", "processes"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.checkpoints_of and not args.sft_model:
        parser.error("--checkpoints-of needs --sft-model (the SFT model the RL run started from)")
    if args.checkpoints_of and (args.model_set or args.sft_set or args.rl_set):
        parser.error("--model-set / --sft-set / --rl-set change the demo run; with --checkpoints-of no demo is run")
    if args.sft_model and not args.checkpoints_of:
        parser.error("--sft-model is for --checkpoints-of (without it the demo trains its own SFT model)")
    from ragen_envs.starpo.checkpoint import average_actors, step_checkpoints

    rl_steps = None
    if args.checkpoints_of:  # checked before anything is written or evaluated
        rl_dir = Path(args.checkpoints_of) / "starpo"
        if not (rl_dir / "model").is_dir():
            parser.error(f"--checkpoints-of: {rl_dir / 'model'} does not exist (expected a demo_sizing.py rl output)")
        if not Path(args.sft_model).is_dir():
            parser.error(f"--sft-model: {args.sft_model} does not exist")
        if averages and not step_checkpoints(rl_dir):
            parser.error(f"--average: {rl_dir / 'checkpoints'} holds no step_* checkpoints "
                         "(run the RL phase with --set keep_checkpoints=N)")
        sized = Path(args.checkpoints_of) / "sizing.json"
        if sized.exists():
            try:
                rl_steps = int(json.loads(sized.read_text())["settings"]["rl"]["steps"])
            except (ValueError, KeyError, TypeError) as e:
                parser.error(f"--checkpoints-of: {sized} has no settings.rl.steps ({type(e).__name__}: {e})")
    from ragen_envs.starpo.demo import DEMO, _evaluate, cpu_threads, run_demo, run_processes, stream_comparison

    processes = args.processes or DEMO.get("processes", 1)
    if args.threads is None:
        args.threads = 1 if processes > 1 else 2
    cpu_threads(args.threads)
    import torch

    settings = json.loads(json.dumps(DEMO))
    settings["seed"], settings["processes"] = args.seed, processes
    from ragen_envs.starpo.demo import override_settings

    try:
        override_settings(settings, sft_set=args.sft_set, model_set=args.model_set, rl_set=args.rl_set)
    except ValueError as exc:
        parser.error(str(exc))
    if args.eval_streams is not None:
        if args.eval_streams < 1:
            parser.error(f"--eval-streams must be >= 1, got {args.eval_streams}")
        settings["eval_streams"] = list(range(1, args.eval_streams + 1))
    if args.final_only and (args.checkpoints_of or averages):
        parser.error("--final-only evaluates no checkpoint: not with --checkpoints-of or --average")
    if not args.final_only:
        settings["rl"]["keep_checkpoints"] = settings["rl"]["steps"] // settings["rl"]["save_every"] + 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if args.checkpoints_of:
        report, rl_dir, sft_model = None, Path(args.checkpoints_of) / "starpo", Path(args.sft_model)
        if rl_steps is not None:  # the RL run's own iteration count (e.g. --set steps=60), not the demo's
            settings["rl"]["steps"] = rl_steps
    else:
        if processes > 1:  # make demo's way: worker processes; their report is demo.json
            code = run_processes(out, settings, processes, args.threads)
            if code:
                return code
            report = json.loads((out / "demo.json").read_text())
        else:
            report = run_demo(out, settings)
        rl_dir, sft_model = out / "starpo", out / "sft" / "model"
    if args.final_only:
        slim = {k: report[k] for k in ("paired_seeds", "over_streams", "torch_threads", "seconds", "sft_run", "machine")}
        result = {"seed": args.seed, "threads": args.threads, "processes": processes, "settings": settings, **slim,
                  "sft_success": report["sft"]["success"], "starpo_s_success": report["starpo_s"]["success"],
                  "wall_s": time.monotonic() - t0}
        (out / "robustness.json").write_text(json.dumps(result, indent=1))
        return 0
    # the models to evaluate, checked before the (long) SFT evaluation
    models = [(int(c.name.split("_")[1]), c / "actor") for c in step_checkpoints(rl_dir)]
    if not models or models[-1][0] != settings["rl"]["steps"]:  # the final model, unless its checkpoint is there
        models.append((settings["rl"]["steps"], rl_dir / "model"))
    by_step = dict(models)
    missing = sorted({i for a in averages for i in a} - set(by_step))
    if missing:
        parser.error(f"--average: no checkpoint for iterations {missing} (kept: {sorted(by_step)})")
    streams = settings["eval_streams"]
    with torch.no_grad():
        sft = [[bool(t.success) for t in _evaluate(sft_model, settings, seed=k)] for k in streams]
    rows = []
    outcomes = {}
    for step, model in models:
        with torch.no_grad():
            rl = [[bool(t.success) for t in _evaluate(model, settings, seed=k)] for k in streams]
        outcomes[step] = rl
        row = {"iterations": step, **stream_comparison(sft, rl, seed=args.seed)}
        rows.append(row)
        print(f"iteration {step}: SFT {row['sft_success']:.3f} -> {row['starpo_s_success']:.3f} over {len(streams)} "
              f"streams, sign-flip p = {row['sign_flip_p']:.3g}", flush=True)
    averaged = []
    for its in averages:
        last = outcomes[its[-1]]
        dest = average_actors([by_step[i] for i in its], out / f"average_{its[0]}-{its[-1]}")
        with torch.no_grad():
            rl = [[bool(t.success) for t in _evaluate(dest, settings, seed=k)] for k in streams]
        vs_last = stream_comparison(last, rl, seed=args.seed)
        row = {"average_of": its, "model": str(dest), **stream_comparison(sft, rl, seed=args.seed),
               "vs_newest": {"iterations": its[-1], "newest_success": vs_last["sft_success"], "seeds_better": vs_last["seeds_better"],
                           "seeds_worse": vs_last["seeds_worse"], "sign_flip_p": vs_last["sign_flip_p"]}}
        averaged.append(row)
        print(f"average of {its}: SFT {row['sft_success']:.3f} -> {row['starpo_s_success']:.3f}, sign-flip p = "
              f"{row['sign_flip_p']:.3g}; vs iteration {its[-1]} ({vs_last['sft_success']:.3f}): better on "
              f"{vs_last['seeds_better']}, worse on {vs_last['seeds_worse']}, p = {vs_last['sign_flip_p']:.3g}", flush=True)
    slim = {}
    if report is not None:
        slim = {k: report[k] for k in ("paired_seeds", "over_streams", "torch_threads", "seconds")}
        slim["sft_success"], slim["starpo_s_success"] = report["sft"]["success"], report["starpo_s"]["success"]
    result = {"seed": args.seed, "threads": args.threads, "processes": processes, "settings": settings, **slim, "checkpoints": rows,
              "averages": averaged, "wall_s": time.monotonic() - t0}
    (out / "robustness.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
