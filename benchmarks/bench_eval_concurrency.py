"""Episodes per second of ``ragen eval`` at --concurrency 1 and 16 against a slow API.

A separate process runs an OpenAI-compatible server (``ragen_envs.serve``'s HTTP layer) whose
every reply takes ``--latency`` seconds (default 0.1) and plays one move per turn, so each
Sokoban episode makes 5 requests. The evaluation uses the official ``openai`` async client,
exactly as ``ragen eval --agent openai:MODEL --base-url ...`` does. Goal: the speed-up from
1 to 16 in-flight requests is at least 0.8 x 16.

Run: ``python benchmarks/bench_eval_concurrency.py [--latency 0.1] [--episodes-c1 32]
[--episodes-c16 256] [--out benchmarks/results/issue4.md]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPLY = "<think>I keep pushing up.</think><answer>Up</answer>"


class SlowBackend:
    model_name = "slow-fixed"

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def complete(self, request):
        from ragen_envs.serve import Completion

        time.sleep(self.latency)
        return sum(len(m["content"].split()) for m in request.messages), [Completion(REPLY, "stop", 9)]


def serve(latency: float) -> None:
    from ragen_envs.serve import make_server

    server = make_server(SlowBackend(latency), "127.0.0.1", 0)
    print(server.server_port, flush=True)
    server.serve_forever()


def run(concurrency: int, n: int, url: str, seeds) -> dict:
    from ragen_envs.agents import make_agent
    from ragen_envs.eval import evaluate

    os.environ.setdefault("RAGEN_BENCH_KEY", "none")
    agent = make_agent("openai:slow-fixed", base_url=url, api_key_env="RAGEN_BENCH_KEY")
    with tempfile.TemporaryDirectory() as out:
        result = evaluate(agent, ["ragen/Sokoban-v0"], list(seeds[:n]), out, concurrency=concurrency,
                          progress=False, frame_episodes=0)
    s = result.summary["envs"]["ragen/Sokoban-v0"]
    requests = int(s["requests"])
    return {"concurrency": concurrency, "episodes": s["episodes"], "requests": requests, "play_s": result.play_s,
            "episodes_per_s": s["episodes"] / result.play_s, "requests_per_s": requests / result.play_s,
            "total_s": result.elapsed_s}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--episodes-c1", type=int, default=32)
    parser.add_argument("--episodes-c16", type=int, default=256)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "issue4.md"))
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.latency)
        return 0

    import ragen_envs

    server = subprocess.Popen([sys.executable, __file__, "--serve", "--latency", str(args.latency)],
                              stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/v1"
        run(4, 8, url, ragen_envs.EVAL_SEEDS)  # warm-up: imports, connections
        rows = [run(1, args.episodes_c1, url, ragen_envs.EVAL_SEEDS),
                run(16, args.episodes_c16, url, ragen_envs.EVAL_SEEDS)]
    finally:
        server.terminate()
        server.wait(timeout=30)
    speedup = rows[1]["episodes_per_s"] / rows[0]["episodes_per_s"]
    lines = [
        "| --concurrency | episodes | requests | time (s) | episodes/s | requests/s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['concurrency']} | {r['episodes']} | {r['requests']} | {r['play_s']:.2f} | "
                     f"{r['episodes_per_s']:.2f} | {r['requests_per_s']:.1f} |")
    verdict = "meets" if speedup >= 0.8 * 16 else "misses"
    table = "\n".join(lines)
    print(table)
    print(f"speed-up 16 vs 1: {speedup:.2f}x ({speedup / 16:.2f} of 16; goal >= 0.8: {verdict})")
    cpu = f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, Python {platform.python_version()}"
    text = f"""# Issue 4: evaluation concurrency benchmark

`ragen eval` against an OpenAI-compatible server that adds {args.latency * 1000:.0f} ms to every reply
(a separate process on 127.0.0.1; one move per turn, so each ragen/Sokoban-v0 episode makes 5 requests).
The client is the official `openai` async client, as in `ragen eval --agent openai:MODEL --base-url URL`.
Time = playing the episodes (the summary and report.html are written afterwards and not counted).

{table}

Speed-up from 1 to 16 in-flight requests: **{speedup:.2f}x** = {speedup / 16:.2f} x the concurrency
(goal >= 0.8 x: {verdict} it). Ideal at {args.latency * 1000:.0f} ms/request: {1 / (5 * args.latency):.2f} episodes/s
per in-flight request.

Machine: {cpu}; shared with other jobs while measured.

Command:

```bash
python benchmarks/bench_eval_concurrency.py --latency {args.latency} --episodes-c1 {args.episodes_c1} --episodes-c16 {args.episodes_c16}
```
"""
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
