"""kill -9 then resume, for ``ragen eval`` (through ``ragen serve``) and ``ragen train``.

For each command: one uninterrupted reference run, then ``--trials`` runs that are each killed
with SIGKILL ``--kills-per-trial`` times at a random moment and resumed each time with the same
command, the last resume running to the end. The moment is tied to the run's progress (from
``random.Random(--seed)``): after a uniform number of finished items still to come (episodes,
metric rows) plus a uniform fraction of one item's time, so kills land inside the run whatever
the machine's load. Checked after every trial:

- ``ragen eval ragen/Sokoban-v0 --agent openai:tiny --base-url <ragen serve> --seeds 1..N
  --concurrency 4 --extra-body '{"seed": 3}'``: the server (this checkout's ``ragen serve`` on
  the tiny checkpoint, continuous batching) answers a seeded request with the same tokens
  whatever else it is decoding, so every episode's replies are fixed; after the kills and
  resumes every (env, seed) is in ``episodes.jsonl`` exactly once and its replies equal the
  reference's (nothing lost, nothing duplicated, resumed exactly);
- ``ragen train ragen/Sokoban-v0 --steps S`` (tiny local model, small batches, a checkpoint
  every step): the final ``metrics.jsonl`` rows, without the ``time/`` and ``perf/`` columns,
  equal the reference's, and so do the final model's weights.

Run: ``python benchmarks/bench_kill_resume.py [--trials 10] [--kills-per-trial 2]
[--only eval|train] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import CLI, Server  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[1])
ENV = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", RAGEN_BENCH_KEY="none")
TRAIN_SET = ["num_groups=2", "group_size=4", "max_new_tokens=10", "eval_every=0", "probe_every=0",
             "mini_batch_size=4", "micro_batch_size=2", "plots=false", "log_samples=0", "save_every=1"]
VOLATILE = ("time/", "perf/")


def run(args: list[str], kill_at: "KillPoint | None", out: Path | None = None) -> tuple[int, float]:
    """Run ``ragen ARGS``; SIGKILL it at ``kill_at`` (None: let it finish). (returncode, seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", CLI, *args], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    if kill_at is not None:
        deadline = None
        while proc.poll() is None:
            if deadline is None and kill_at.progress(out) >= kill_at.after_items:
                deadline = time.monotonic() + kill_at.then_s
            if deadline is not None and time.monotonic() >= deadline:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
    err = proc.communicate()[1]
    if kill_at is None and proc.returncode != 0:
        raise RuntimeError(f"ragen {' '.join(args[:2])} failed: {err[-1500:]}")
    return proc.returncode, time.monotonic() - start


class KillPoint:
    """When to SIGKILL a run: once its output holds ``after_items`` finished items (episodes in
    ``episodes.jsonl``, rows in ``metrics.jsonl``), ``then_s`` seconds later. Tied to the run's own
    progress, not to a wall time measured once, so the kills land inside the run whatever the
    machine's load (a fixed wall time measured on a loaded reference run let every later run finish
    first)."""

    def __init__(self, file: str, after_items: int, then_s: float):
        self.file, self.after_items, self.then_s = file, after_items, then_s

    def progress(self, out: Path) -> int:
        try:
            with open(out / self.file, "rb") as fh:
                return fh.read().count(b"\n")
        except OSError:
            return 0


def eval_records(out: Path) -> dict:
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    keys = [(r["env_id"], r["seed"]) for r in rows]
    return {"n": len(rows), "unique": len(set(keys)),
            "replies": {k: [t["response"] for t in r["turns"]] for k, r in zip(keys, rows)}}


def train_state(out: Path) -> dict:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]
    digest = hashlib.sha256()
    for f in sorted((out / "model").glob("*.safetensors")):
        digest.update(f.read_bytes())
    return {"rows": rows, "weights": digest.hexdigest()}


def campaign(name: str, args_for, check, trials: int, kills: int, rng: random.Random, tmp: Path,
             file: str, items: int) -> list[str]:
    """``trials`` runs of ``items`` items, each killed ``kills`` times and resumed: every kill after a
    uniformly drawn number of finished items (0 .. items - 1) plus a uniform 0 .. 1 item-time (the
    reference run's mean seconds per item), so it can land in a write as well as between two."""
    ref_out = tmp / f"{name}-ref"
    _, ref_s = run(args_for(ref_out, False), None)
    ref = check(ref_out)
    per_item = ref_s / items
    killed = lost = wrong = died_before = 0
    failed: list[str] = []
    for t in range(trials):
        out = tmp / f"{name}-{t}"
        for k in range(kills):
            done = KillPoint(file, 0, 0).progress(out)
            point = KillPoint(file, rng.randrange(done, items) if done < items else items,
                              rng.uniform(0.0, 1.0) * per_item)
            rc, _ = run(args_for(out, out.exists()), point, out)
            if rc == -signal.SIGKILL:
                killed += 1
            else:
                died_before += 1  # it finished before the kill
        try:
            run(args_for(out, out.exists()), None)
        except RuntimeError as exc:  # a resume that does not go through is a result too
            failed.append(f"trial {t}: {str(exc).strip().splitlines()[-1]}")
            print(failed[-1], file=sys.stderr, flush=True)
            continue
        got = check(out)
        if name == "eval":
            lost += ref["n"] - got["unique"] + (got["n"] - got["unique"])
            wrong += sum(got["replies"].get(k) != v for k, v in ref["replies"].items())
        else:
            lost += len(ref["rows"]) != len(got["rows"])
            wrong += (got["rows"] != ref["rows"]) + (got["weights"] != ref["weights"])
        shutil.rmtree(out, ignore_errors=True)
        print(f"{name} trial {t}: kills so far {killed}, lost {lost}, differing {wrong}", file=sys.stderr, flush=True)
    return [f"| `ragen {name}` | {ref_s:.1f} s | {trials} | {killed} | {died_before} | {lost} | {wrong} | "
            f"{len(failed)}{': ' + '; '.join(failed) if failed else ''} |"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--kills-per-trial", type=int, default=2)
    parser.add_argument("--train-trials", type=int, help="trials for ragen train (default --trials)")
    parser.add_argument("--seeds", type=int, default=16, help="eval seeds 1..N (default 16)")
    parser.add_argument("--steps", type=int, default=4, help="train steps (default 4)")
    parser.add_argument("--only", choices=("eval", "train"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    from ragen_envs.models import build_tiny_checkpoint

    lines = ["| command | reference run | trials | SIGKILLs | runs that ended before their kill | "
             "episodes / rows lost or duplicated | results differing from the reference | resumes that failed |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.only in (None, "eval"):
            model = build_tiny_checkpoint(tmp / "tiny")
            server = Server(["serve", f"hf:{model}", "--port", "0", "--device", "cpu", "--max-tokens", "24"], ROOT)
            url = f"http://{server.address[0]}:{server.address[1]}/v1"
            try:
                def eval_args(out: Path, resume: bool) -> list[str]:
                    return ["eval", "ragen/Sokoban-v0", "--agent", "openai:tiny", "--base-url", url,
                            "--api-key-env", "RAGEN_BENCH_KEY", "--seeds", f"1..{args.seeds}", "--concurrency", "4",
                            "--temperature", "1.0", "--max-tokens", "24", "--extra-body", '{"seed": 3}',
                            "--out", str(out)]
                lines += campaign("eval", eval_args, eval_records, args.trials, args.kills_per_trial, rng, tmp,
                                  "episodes.jsonl", args.seeds)
            finally:
                server.stop()
        if args.only in (None, "train"):
            def train_args(out: Path, resume: bool) -> list[str]:
                flags = ["--resume"] if resume else []
                return ["train", "ragen/Sokoban-v0", "--steps", str(args.steps), "--out", str(out), *flags,
                        *[x for s in TRAIN_SET for x in ("--set", s)]]
            lines += campaign("train", train_args, train_state, args.train_trials or args.trials,
                              args.kills_per_trial, rng, tmp, "metrics.jsonl", args.steps)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
