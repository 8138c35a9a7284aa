"""Transfer across envs (paper Table 3): trained models evaluated on other envs through `ragen eval`.

    python labs/transfer.py --out runs/transfer \
        --model NoThink=runs/demo/starpo/model --model Think=runs/demo-think/starpo/model \
        --envs ragen/Sokoban-v0 ragen/FrozenLake-v0 ragen/LargeSokoban-v0 ragen/SokobanNewVocab-v0

Each ``--model LABEL=DIR[,DIR...]`` is evaluated on every env of ``--envs`` with
``ragen eval ENV... --agent hf:DIR --out OUT/LABEL/k`` (the user's command: the model's own
``ragen_protocol.json`` decides think mode, reply prefix, reply cap and temperature; finished
evaluations are reused). Several folders under one label (e.g. the lab's training seeds) are
pooled. The table: success per (env, label) with a 95 % Wilson CI over all episodes, and for
two labels the paired difference (same seeds; exact McNemar p over the discordant episodes).
Writes ``OUT/transfer.json`` and ``OUT/transfer.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# paper Table 3 (Qwen2.5-0.5B): (trained on, evaluated on) -> (StarPO-S with think, NoThink)
PAPER = {
    ("ragen/Bandit-v0", "ragen/Bandit-v0"): (100.00, 81.25),
    ("ragen/Bandit-v0", "ragen/BanditRev-v0"): (67.58, 56.25),
    ("ragen/Sokoban-v0", "ragen/FrozenLake-v0"): (19.92, 19.53),
    ("ragen/Sokoban-v0", "ragen/LargeSokoban-v0"): (2.34, 2.73),
    ("ragen/Sokoban-v0", "ragen/Sokoban-v0"): (21.48, 20.73),
    ("ragen/Sokoban-v0", "ragen/SokobanNewVocab-v0"): (18.75, 26.17),
}


def parse_models(items: list[str]) -> dict[str, list[str]]:
    """``LABEL=DIR[,DIR...]`` -> {label: [dirs]} (labels in the given order)."""
    models: dict[str, list[str]] = {}
    for item in items:
        label, sep, dirs = item.partition("=")
        if not sep or not label or not dirs:
            raise ValueError(f"--model wants LABEL=DIR[,DIR...], got {item!r}")
        if label in models:
            raise ValueError(f"--model label {label!r} given twice")
        paths = [d for d in dirs.split(",") if d]
        for d in paths:
            if not (Path(d) / "config.json").exists():
                raise FileNotFoundError(f"--model {label}: {d} is not a model folder (no config.json)")
        models[label] = paths
    return models


def outcomes(run_dir: Path, env_id: str) -> dict[int, bool]:
    """seed -> success of one ``ragen eval`` run on ``env_id`` (from its episodes.jsonl)."""
    out = {}
    for line in (run_dir / "episodes.jsonl").read_text().splitlines():
        ep = json.loads(line)
        if ep["env_id"] == env_id:
            out[int(ep["seed"])] = bool(ep["success"])
    return out


def table(results: dict[str, list[dict[int, bool]]], envs: list[str], trained_on: str | None) -> tuple[list[str], dict]:
    """Markdown rows and the numbers: per env, each label's pooled success with its Wilson CI,
    and (two labels) the paired difference with the exact McNemar p."""
    from ragen_envs.eval.metrics import wilson_interval
    from ragen_envs.starpo.stats import mcnemar_exact

    labels = list(results)
    head = "| trained on → evaluated on | " + " | ".join(f"{lab} | 95 % CI" for lab in labels)
    pair = len(labels) == 2
    head += (f" | {labels[0]} − {labels[1]} (only {labels[0]} / only {labels[1]}, McNemar p)" if pair else "")
    head += " | paper: StarPO-S / NoThink (0.5B) |"
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    numbers: dict = {}
    for env_id in envs:
        cells, per = [], {}
        for lab in labels:
            wins = [ok for run in results[lab] for ok in run[env_id].values()]
            k, n = sum(wins), len(wins)
            lo, hi = wilson_interval(k, n)
            per[lab] = {"success": k / n, "n": n, "ci": [lo, hi]}
            cells.append(f"{100 * k / n:.1f} % ({k}/{n}) | {100 * lo:.1f}-{100 * hi:.1f}")
        row = f"| {(trained_on or '?').removeprefix('ragen/')} → {env_id.removeprefix('ragen/')} | " + " | ".join(cells)
        if pair:
            a_runs, b_runs = results[labels[0]], results[labels[1]]
            only_a = only_b = 0
            for ra, rb in zip(a_runs, b_runs):  # pooled runs pair up in the given order
                for seed, ok in ra[env_id].items():
                    other = rb[env_id].get(seed)
                    if other is None:
                        continue
                    only_a += ok and not other
                    only_b += other and not ok
            p = mcnemar_exact(only_a, only_b)
            diff = per[labels[0]]["success"] - per[labels[1]]["success"]
            per["paired"] = {"only_a": only_a, "only_b": only_b, "mcnemar_p": p, "diff": diff}
            row += f" | {100 * diff:+.1f} pts ({only_a} / {only_b}, p = {p:.2g})"
        paper = PAPER.get((trained_on or "", env_id))
        row += f" | {paper[0]:.2f} / {paper[1]:.2f} |" if paper else " | – |"
        rows.append(row)
        numbers[env_id] = per
    return rows, numbers


def _trained_on(model_dir: str) -> str | None:
    from ragen_envs.lm.settings import load_settings

    settings = load_settings(model_dir)
    return settings.env_id if settings is not None else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", action="append", required=True, metavar="LABEL=DIR[,DIR...]")
    parser.add_argument("--envs", nargs="+", required=True, metavar="ENV_ID")
    parser.add_argument("--seeds", default="256", help="ragen eval --seeds (default: the 256 EVAL_SEEDS)")
    args = parser.parse_args(argv)
    try:
        models = parse_models(args.model)
        trained = {_trained_on(d) for dirs in models.values() for d in dirs}
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    results: dict[str, list[dict[str, dict[int, bool]]]] = {}
    for label, dirs in models.items():
        results[label] = []
        for k, model_dir in enumerate(dirs):
            run = out / label / str(k)
            cmd = [sys.executable, "-m", "ragen_envs.cli", "eval", *args.envs, "--agent", f"hf:{model_dir}",
                   "--out", str(run), "--seeds", args.seeds, "--quiet"]
            print("$ " + " ".join(cmd[2:]), file=sys.stderr)
            code = subprocess.run(cmd, env=env).returncode
            if code != 0:  # ragen eval said why (one line); finished episodes stay in the run folder
                print(f"error: ragen eval of {label} ({model_dir}) failed with exit code {code}; "
                      f"rerun to resume from {run}", file=sys.stderr)
                return code
            results[label].append({e: outcomes(run, e) for e in args.envs})
    trained_on = trained.pop() if len(trained) == 1 else None
    rows, numbers = table(results, args.envs, trained_on)
    (out / "transfer.json").write_text(json.dumps({"models": models, "envs": args.envs, "trained_on": trained_on,
                                                   "results": numbers}, indent=1))
    (out / "transfer.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
