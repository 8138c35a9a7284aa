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
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import POLICIES, child_args, cli, start_timing, timing_result  # noqa: E402


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
                res = timing_result(start_timing(policy, child))
                rows[policy]["alone"].append(res["step_s"])
                digests.add(res["digest"])
                pair = [start_timing(policy, child), start_timing(policy, child)]
                for res in map(timing_result, pair):
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
