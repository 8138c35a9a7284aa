"""``ragen eval --agent hf:`` on a busy CPU, before and after it sets ``OMP_WAIT_POLICY=PASSIVE``
(issue 43), beside the trainer's own evaluation of the same model under the same load.

    python benchmarks/bench_eval_omp.py --before /work/main [--model DIR] [--episodes 64] [--repeats 3] [--busy 1]

``--busy N`` processes spin (``while True: pass``) for the whole run, as another job on a
shared machine would. Each repeat runs, one after another in fresh processes with no
``OMP_WAIT_POLICY`` in their environment: the ``ragen eval`` command from the ``--before``
checkout, the same command from this one, and the trainer's ``evaluate_policy`` (under
``OMP_WAIT_POLICY=PASSIVE``, as ``ragen train`` runs it). Printed: medians of the whole command
(wall), of ``evaluate()`` (the seconds the command prints) and of the trainer's evaluation, and
the ratios. Without --model the demo-shaped tiny model of ``bench_hf_eval.py`` is built.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent

TRAINER_EVAL = """
import json, os, sys, time
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
import torch
from ragen_envs.lm.settings import load_settings
from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
from ragen_envs.starpo.trainer import evaluate_policy
model_dir, episodes = sys.argv[1], int(sys.argv[2])
st = load_settings(model_dir)
tok = load_tokenizer(model_dir)
model = load_policy(model_dir)
fmt = ChatFormat(tok, st.reply_prefix)
t = time.perf_counter()
with torch.no_grad():
    trajs = evaluate_policy(model, fmt, tok.pad_token_id, st.env_id, episodes=episodes, temperature=st.temperature,
                            seed=0, max_new_tokens=st.max_new_tokens, env_kwargs=st.env_kwargs)
print(json.dumps({"s": time.perf_counter() - t, "success": sum(x.success for x in trajs) / len(trajs)}))
"""


def clean_env(pythonpath: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    env["PYTHONPATH"] = pythonpath
    return env


def ragen_eval(tree: str, model: Path, env_id: str, episodes: int, out: Path) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ragen_envs.cli", "eval", env_id, "--agent", f"hf:{model}",
                           "--seeds", str(episodes), "--out", str(out), "--quiet"],
                          capture_output=True, text=True, env=clean_env(tree), cwd=tree)
    wall = time.perf_counter() - start
    found = re.search(r"episodes played now, \d+ resumed, ([\d.]+)s", proc.stdout)
    success = re.search(r"successes\D+(\d+)", proc.stdout)
    if proc.returncode not in (0, 1) or not found:
        raise RuntimeError(f"ragen eval from {tree} failed: {proc.stdout[-800:]} {proc.stderr[-800:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"wall": wall, "evaluate": float(found.group(1)), "successes": summary["totals"]["successes"],
            "success_line": success.group(0) if success else None}


def trainer_eval(model: Path, episodes: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", TRAINER_EVAL, str(model), str(episodes)], capture_output=True,
                          text=True, env=clean_env(str(TREE)), check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the checkout whose ragen eval sets no wait policy")
    ap.add_argument("--model", help="a model folder with ragen_protocol.json (default: build one)")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--busy", type=int, default=1, help="spinning processes beside the runs (default 1)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_eval_omp_"))
    if args.model:
        model = Path(args.model)
    else:
        sys.path.insert(0, str(HERE))
        from _bench_common import build_sokoban_model

        model = build_sokoban_model(tmp)
    from ragen_envs.lm.settings import load_settings

    env_id = load_settings(model).env_id
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    runs: dict[str, list[dict]] = {"before": [], "after": [], "trainer": []}
    try:
        time.sleep(1.0)
        for r in range(args.repeats):
            runs["before"].append(ragen_eval(args.before, model, env_id, args.episodes, tmp / f"before{r}"))
            runs["after"].append(ragen_eval(str(TREE), model, env_id, args.episodes, tmp / f"after{r}"))
            runs["trainer"].append(trainer_eval(model, args.episodes))
            print(json.dumps({k: v[-1] for k, v in runs.items()}), flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    med = {
        "before_wall": statistics.median(x["wall"] for x in runs["before"]),
        "before_evaluate": statistics.median(x["evaluate"] for x in runs["before"]),
        "after_wall": statistics.median(x["wall"] for x in runs["after"]),
        "after_evaluate": statistics.median(x["evaluate"] for x in runs["after"]),
        "trainer_eval": statistics.median(x["s"] for x in runs["trainer"]),
    }
    result = {
        "model": str(model) if args.model else "demo-shaped tiny model, 150 SFT steps (built by bench_hf_eval)",
        "episodes": args.episodes, "busy_processes": args.busy, "cpus": os.cpu_count(), "median_s": med,
        "before_vs_after_evaluate": med["before_evaluate"] / med["after_evaluate"],
        "after_evaluate_vs_trainer": med["after_evaluate"] / med["trainer_eval"],
        "before_evaluate_vs_trainer": med["before_evaluate"] / med["trainer_eval"],
        "after_wall_vs_trainer": med["after_wall"] / med["trainer_eval"],
        "successes": {k: [x.get("successes", x.get("success")) for x in v] for k, v in runs.items()},
        "runs": runs,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
