"""`ragen eval --agent hf:DIR` vs the trainer's own evaluation of the same model, side by side.

    python benchmarks/bench_hf_eval.py [--model DIR] [--episodes 64] [--repeats 3]

Same model, same EVAL_SEEDS, same reply cap and temperature (the checkpoint's
ragen_protocol.json). Without --model a demo-shaped tiny model is built and given a short SFT
(so replies have realistic lengths). Timed alternately ``--repeats`` times; medians and the
ratio are printed and written to benchmarks/results/hf_eval.json. Three figures for ragen eval:
playing the episodes, the whole ``evaluate()`` call (summary, report with 16 rendered episodes),
and the ``ragen eval`` command in a fresh process (model loading included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import torch  # noqa: E402

import ragen_envs  # noqa: E402
from ragen_envs.agents.hf import HFAgent  # noqa: E402
from ragen_envs.eval.harness import evaluate  # noqa: E402
from ragen_envs.lm.settings import load_settings  # noqa: E402
from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer  # noqa: E402
from ragen_envs.starpo.trainer import evaluate_policy  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import build_sokoban_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a model folder with ragen_protocol.json (default: build one)")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/hf_eval.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_hf_eval_"))
    model_dir = Path(args.model) if args.model else build_sokoban_model(tmp)
    st = load_settings(model_dir)
    if st is None:
        sys.exit(f"{model_dir} has no ragen_protocol.json")
    seeds = ragen_envs.EVAL_SEEDS[: args.episodes]
    tok = load_tokenizer(model_dir)
    model = load_policy(model_dir)
    fmt = ChatFormat(tok, st.reply_prefix)
    agent = HFAgent(str(model_dir))
    times: dict[str, list[float]] = {"trainer_eval": [], "ragen_eval_play": [], "ragen_eval_total": [], "ragen_eval_cli": []}
    success: dict[str, list[float]] = {"trainer_eval": [], "ragen_eval": []}
    for r in range(args.repeats):
        t = time.perf_counter()
        with torch.no_grad():
            trajs = evaluate_policy(model, fmt, tok.pad_token_id, st.env_id, episodes=args.episodes,
                                    temperature=st.temperature, seed=r, max_new_tokens=st.max_new_tokens,
                                    env_kwargs=st.env_kwargs)
        times["trainer_eval"].append(time.perf_counter() - t)
        success["trainer_eval"].append(sum(x.success for x in trajs) / len(trajs))
        res = evaluate(agent, [st.env_id], seeds, tmp / f"run{r}", concurrency=64, env_kwargs=st.env_kwargs,
                       progress=False)
        times["ragen_eval_play"].append(res.play_s)
        times["ragen_eval_total"].append(res.elapsed_s)
        success["ragen_eval"].append(res.summary["totals"]["successes"] / args.episodes)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ragen_envs.cli", "eval", st.env_id, "--agent", f"hf:{model_dir}",
                        "--out", str(tmp / f"cli{r}"), "--seeds", str(args.episodes), "--quiet"],
                       check=True, capture_output=True)
        times["ragen_eval_cli"].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "model": str(model_dir) if args.model else "demo-shaped tiny model, 150 SFT steps (built by the script)",
        "episodes": args.episodes, "repeats": args.repeats, "reply_cap": st.max_new_tokens,
        "temperature": st.temperature, "median_s": med, "runs_s": times,
        "ratio_play_vs_trainer": med["ragen_eval_play"] / med["trainer_eval"],
        "ratio_total_vs_trainer": med["ragen_eval_total"] / med["trainer_eval"],
        "ratio_cli_vs_trainer": med["ragen_eval_cli"] / med["trainer_eval"],
        "success": success, "torch_threads": torch.get_num_threads(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_s", "ratio_play_vs_trainer", "ratio_total_vs_trainer",
                                              "ratio_cli_vs_trainer", "success")}, indent=2))


if __name__ == "__main__":
    main()
