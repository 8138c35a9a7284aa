"""The demo's SFT step under OpenMP's wait policies, alone and with a second copy beside it.

    python benchmarks/bench_omp_wait.py [--rounds 3] [--steps 20] [--threads 2] [--model-set num_heads=4 ...]

Each measurement is a fresh process (the policy is read when torch's OpenMP runtime loads)
that builds the demo's tiny model (``DEMO["tiny_model"]`` plus ``--model-set``), makes the
demo's SFT batches from 1,024 expert episodes and times ``--steps`` SFT steps (forward,
backward, clip, AdamW) after 2 warm-up steps: the median wall seconds a step. Policies:
``PASSIVE`` (idle threads sleep: what ``cpu_threads`` sets on a shared CPU), ``default``
(OpenMP's own: a short spin, then sleep; what the demo keeps on an idle CPU) and ``ACTIVE``
(spin). "alone" runs one process; "shared" runs two at once with the same policy (two
torch jobs on the same cores), both reported. The rounds interleave the policies. Every
process also prints a digest of its final weights: it must be the same under every policy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import contextlib, hashlib, json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from ragen_envs.models import build_tiny_model
from ragen_envs.starpo.policy import ChatFormat, load_tokenizer
from ragen_envs.starpo.sft import expert_trajectories, make_batches, sft_loss
args = json.loads(sys.argv[2])
torch.set_num_threads(args["threads"])
tok = load_tokenizer(args["tokenizer"])
data = expert_trajectories("ragen/Sokoban-v0", ChatFormat(tok, "<answer>"), range(10_000, 11_024), actions_per_turn=2,
                           env_kwargs={"think": False})
batches = make_batches([len(t.token_ids) for t in data], 32, torch.Generator().manual_seed(0))
model = build_tiny_model(tok, seed=0, **args["shape"])
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
half = args.get("half")  # 0 / 1: this process takes every other episode of each batch (one rank of two)
attention = (lambda: sdpa_kernel([SDPBackend.MATH])) if args.get("attention") == "math" else contextlib.nullcontext
times = []
for k, idx in enumerate(batches[: args["steps"] + 2]):
    group = [data[i] for i in (idx if half is None else idx[half::2])]
    n_rep = sum(t.num_reply_tokens for t in group)
    n_ctx = sum(len(t.token_ids) - 1 - t.num_reply_tokens for t in group)
    t0 = time.perf_counter()
    with attention():
        loss, _ = sft_loss(model, group, tok.pad_token_id, n_rep, 0.5, n_ctx)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if k >= 2:
        times.append(time.perf_counter() - t0)
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().numpy().tobytes())
print(json.dumps({"step_s": statistics.median(times), "digest": h.hexdigest()[:16]}))
"""

POLICIES = ("PASSIVE", "default", "ACTIVE")


def _start(policy: str, args: dict) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    return subprocess.Popen([sys.executable, "-c", CHILD, str(ROOT), json.dumps(args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class TimingFailed(RuntimeError):
    """A timing process exited with an error; the message is its last line of stderr."""


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        last = next((line.strip() for line in reversed(err.splitlines()) if line.strip()), "no output")
        raise TimingFailed(f"a timing process failed (exit {proc.returncode}): {last}")
    return json.loads(out.strip().splitlines()[-1])


def cli(main) -> None:
    """Run a benchmark's ``main`` as a command: a timing process that fails ends it with one
    line naming the child's error (exit 1), not a traceback."""
    try:
        code = main()
    except TimingFailed as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        code = 1
    sys.exit(code)


def child_args(parser: argparse.ArgumentParser, args: argparse.Namespace, tmp: Path) -> tuple[dict, dict]:
    """The demo's settings (``--model-set`` applied) and a timing process's arguments: the demo's tokenizer, built
    in ``tmp``, the model shape, ``args.steps`` and ``args.threads``."""
    sys.path.insert(0, str(ROOT))
    from demo_sizing import apply_overrides

    from ragen_envs.starpo.demo import DEMO
    from ragen_envs.starpo.tiny import build_tiny_policy

    settings = json.loads(json.dumps(DEMO))
    apply_overrides(parser, settings, model_set=args.model_set)
    tokdir = build_tiny_policy(tmp / "m", settings["env_id"], settings["env_kwargs"], seed=0, **settings["tokenizer"],
                               hidden_size=16, num_layers=1, num_heads=2, intermediate_size=16)  # only its tokenizer
    return settings, {"tokenizer": str(tokdir), "shape": settings["tiny_model"], "steps": args.steps,
                      "threads": args.threads}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1 or args.threads < 1:
        parser.error("--rounds, --steps and --threads must be >= 1")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        settings, child = child_args(parser, args, Path(tmp))
        rows: dict[str, dict[str, list[float]]] = {p: {"alone": [], "shared": []} for p in POLICIES}
        digests = set()
        for r in range(args.rounds):
            for policy in POLICIES:
                res = _result(_start(policy, child))
                rows[policy]["alone"].append(res["step_s"])
                digests.add(res["digest"])
                pair = [_start(policy, child), _start(policy, child)]
                for res in map(_result, pair):
                    rows[policy]["shared"].append(res["step_s"])
                    digests.add(res["digest"])
                print(f"round {r + 1} {policy:>8}: alone {rows[policy]['alone'][-1]:.3f} s a step, two at once "
                      f"{rows[policy]['shared'][-2]:.3f} / {rows[policy]['shared'][-1]:.3f} s", flush=True)
    base = statistics.median(rows["PASSIVE"]["alone"])
    print(f"\n{args.threads} threads, shape {settings['tiny_model']}, median of {args.rounds} rounds:")
    for policy in POLICIES:
        alone, shared = statistics.median(rows[policy]["alone"]), statistics.median(rows[policy]["shared"])
        print(f"  {policy:>8}: alone {alone:.3f} s ({base / alone:.2f}x PASSIVE's speed), two at once {shared:.3f} s")
    print(f"  final weights: {'the same under every policy' if len(digests) == 1 else 'DIFFERENT: ' + str(digests)}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "digests": sorted(digests), "settings": vars(args)}, indent=1))
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    cli(main)
