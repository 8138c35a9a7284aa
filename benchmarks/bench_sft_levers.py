"""Two candidate speed levers for the demo's SFT step, each against the demo's own step (issue 23 goal 2).

    python benchmarks/bench_sft_levers.py [--rounds 3] [--steps 22]

Every measurement is a fresh process timing ``--steps`` SFT steps (after 2 warm-up steps) on the
demo's batches of 1,024 expert episodes with the demo's model (``DEMO["tiny_model"]`` plus
``--model-set``), the median seconds a step (``bench_omp_wait.py``'s timing process). Rows, interleaved
in every round:

- ``flash``: one process, 2 threads, OpenMP's default policy (what ``make demo`` runs on an idle CPU);
- ``math``: the same with ``torch.nn.attention.sdpa_kernel([SDPBackend.MATH])`` around the forward
  (torch's composite attention instead of the CPU flash kernel);
- ``halves``: two processes at once, 1 thread and PASSIVE each, each taking every other episode of
  every batch: the compute of a 2-rank data-parallel SFT step, *before* its gradient all-reduce
  (which this does not time). The slower of the two is the step.

The ratios are against ``flash`` of the same rounds. ``math`` learns the same up to float rounding; the
halves would need a multi-process SFT (not built): see benchmarks/results/2026-12-06-demo-issue23.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_common import child_args, cli, start_timing, timing_result  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=22)
    parser.add_argument("--model-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be >= 1")
    args.threads = 2
    rows: dict[str, list[float]] = {"flash": [], "math": [], "halves": []}
    with tempfile.TemporaryDirectory() as tmp:
        settings, child = child_args(parser, args, Path(tmp))
        for r in range(args.rounds):
            rows["flash"].append(timing_result(start_timing("default", child))["step_s"])
            rows["math"].append(timing_result(start_timing("default", {**child, "attention": "math"}))["step_s"])
            pair = [start_timing("PASSIVE", {**child, "threads": 1, "half": h}) for h in (0, 1)]
            rows["halves"].append(max(timing_result(p)["step_s"] for p in pair))
            print(f"round {r + 1}: flash {rows['flash'][-1]:.3f} s, math {rows['math'][-1]:.3f} s, "
                  f"two 1-thread halves {rows['halves'][-1]:.3f} s a step", flush=True)
    base = statistics.median(rows["flash"])
    print(f"\nshape {settings['tiny_model']}, median of {args.rounds} rounds (speed against flash, 2 threads):")
    for name, values in rows.items():
        med = statistics.median(values)
        per_round = ", ".join(f"{f / v:.2f}x" for f, v in zip(rows["flash"], values))
        print(f"  {name:>6}: {med:.3f} s a step ({base / med:.2f}x; per round {per_round})")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "settings": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    cli(main)
