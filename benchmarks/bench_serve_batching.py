"""``ragen serve`` with continuous batching vs a previous checkout, interleaved in one run.

Both servers (this checkout and ``--base DIR``, e.g. a worktree of the previous release) run
as ``ragen serve hf:TINY`` processes on loopback at the same time, serving the same tiny
checkpoint of ``ragen_envs.models`` (built locally); the clients are threads of this script.

- **load**: for each round and each client count in ``--clients`` (default 1, 16, 64), both
  sides in turn (the order alternates by round): N keep-alive clients released together, each
  making ``--requests`` chat completions (``max_tokens`` 16, temperature 1; a single client
  makes ``--single-requests``): requests per second (ok requests / wall time) and p50 / p99
  latency; the table has the medians over rounds, and the ratio ours / base round by round.
- **short request under load** (the issue's case): the idle latency of a ``max_tokens`` 8
  greedy request (median of ``--short`` requests one after another), then the same requests
  while two clients loop ``max_tokens`` 4000 greedy requests (which run to the cap), one after
  another with a pause of 0.2 s: median and worst latency.

Run: ``python benchmarks/bench_serve_batching.py --base /work/wt/serve-base [--rounds 5]
[--clients 1,16,64] [--out FILE]``; ``--base`` again for more checkouts (ratios are then to
the first one), e.g. to find which commit changed the requests per second.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import MESSAGES, Server, percentiles, request, run_clients, supports  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[1])
CHAT = "/v1/chat/completions"


def serve_args(model: Path, src: str) -> list[str]:
    args = ["serve", f"hf:{model}", "--port", "0", "--max-tokens", "16", "--device", "cpu"]
    return args + (["--idle-timeout", "30"] if supports("--idle-timeout", "serve", src) else [])


def load(server: Server, clients: int, requests: int) -> dict:
    def work(i: int):
        conn = http.client.HTTPConnection(*server.address, timeout=300)
        out = []
        for _ in range(requests):
            body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 16, "temperature": 1.0}
            status, _, seconds = request(server.address, "POST", CHAT, body, conn=conn)
            if status != 200:
                conn.close()
                conn = http.client.HTTPConnection(*server.address, timeout=300)
            out.append((status, seconds))
        conn.close()
        return out

    cpu0 = os.times()
    latencies, errors, wall = run_clients(clients, work)
    return {"latencies": latencies, "errors": len(errors), "wall": wall, "rps": len(latencies) / wall,
            "client_cpu": (os.times().user + os.times().system) - (cpu0.user + cpu0.system)}


def short_request(server: Server, conn: http.client.HTTPConnection) -> float:
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 8, "temperature": 0}
    status, _, seconds = request(server.address, "POST", CHAT, body, conn=conn, timeout=300)
    if status != 200:
        raise RuntimeError(f"short request failed: {status}")
    return seconds


def short_under_load(server: Server, n: int, long_tokens: int) -> dict:
    conn = http.client.HTTPConnection(*server.address, timeout=300)
    short_request(server, conn)  # warm-up
    idle = [short_request(server, conn) for _ in range(n)]
    stop = threading.Event()
    conns: list[http.client.HTTPConnection] = []
    longs = {"done": 0}

    def loop() -> None:
        c = http.client.HTTPConnection(*server.address, timeout=600)
        conns.append(c)
        body = {"model": "tiny", "messages": MESSAGES, "max_tokens": long_tokens, "temperature": 0}
        while not stop.is_set():
            status, _, _ = request(server.address, "POST", CHAT, body, conn=c, timeout=600)
            if status == 200:
                longs["done"] += 1
            elif not stop.is_set():
                longs["failed"] = longs.get("failed", 0) + 1
                c.close()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    loaded = []
    for _ in range(n):
        loaded.append(short_request(server, conn))
        time.sleep(0.2)
    stop.set()
    for c in conns:  # the server sees the clients leave and cancels their rows
        try:
            c.sock.shutdown(2)
        except (OSError, AttributeError):
            pass
    for t in threads:
        t.join(timeout=30)
    conn.close()
    return {"idle": statistics.median(idle), "median": statistics.median(loaded), "worst": max(loaded),
            "loaded": loaded, "longs_done": longs["done"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, action="append",
                        help="a checkout to compare with (its ragen serve); repeat for several (load rows only)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--requests", type=int, default=5, help="requests per client (default 5)")
    parser.add_argument("--single-requests", type=int, default=40, help="requests of the single client (default 40)")
    parser.add_argument("--short", type=int, default=5, help="short requests, idle and under load (default 5)")
    parser.add_argument("--long-tokens", type=int, default=1000,
                        help="max_tokens of the two looping clients' requests (default 1000; the issue's 4000 makes "
                             "the old server's short requests wait minutes on a loaded machine)")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--skip-short", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    bases = [str(Path(b).resolve()) for b in args.base]
    counts = [int(c) for c in args.clients.split(",")]
    from ragen_envs.models import build_tiny_checkpoint

    sides = {("base" if len(bases) == 1 else Path(b).name): b for b in bases}
    sides["ours"] = ROOT
    names = list(sides)
    others = ", ".join(f"{k} ({v})" for k, v in sides.items() if k != "ours")
    lines = [f"# bench_serve_batching: ours ({ROOT}) vs {others}", "",
             f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
             f"load average at start {os.getloadavg()[0]:.1f}", ""]
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_checkpoint(Path(tmp) / "tiny")
        servers = {name: Server(serve_args(model, src), src) for name, src in sides.items()}
        try:
            if not args.skip_load:
                results: dict[tuple[str, int], list[dict]] = {}
                for r in range(args.rounds):
                    order = names if r % 2 == 0 else names[::-1]
                    for c in counts:
                        for name in order:
                            req = args.single_requests if c == 1 else args.requests
                            res = load(servers[name], c, req)
                            results.setdefault((name, c), []).append(res)
                            print(f"round {r} {name} {c} clients: {res['rps']:.1f} req/s, errors {res['errors']}",
                                  file=sys.stderr, flush=True)
                lines += [f"Load: {args.rounds} rounds, interleaved (order alternating by round); medians over rounds "
                          "of each round's p50 / p99 / requests per second.", "",
                          "| clients | side | requests a round | p50 ms | p99 ms | ok req/s | errors (all rounds) | "
                          f"req/s / {names[0]}'s, round by round | median ratio |",
                          "|---:|---|---:|---:|---:|---:|---:|---|---:|"]
                ref = names[0]
                for c in counts:
                    for name in names:
                        ratios = [o["rps"] / b["rps"] for o, b in zip(results[(name, c)], results[(ref, c)])]
                        rs = results[(name, c)]
                        p50 = statistics.median(percentiles(x["latencies"])["p50"] for x in rs)
                        p99 = statistics.median(percentiles(x["latencies"])["p99"] for x in rs)
                        rps = statistics.median(x["rps"] for x in rs)
                        n = len(rs[0]["latencies"]) + rs[0]["errors"]
                        extra = (f" {', '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.2f}x"
                                 if name != ref else " | ")
                        lines.append(f"| {c} | {name} | {n} | {1000 * p50:.0f} | {1000 * p99:.0f} | {rps:.1f} | "
                                     f"{sum(x['errors'] for x in rs)} |{extra} |")
                lines.append("")
                if args.out:  # the load rows are kept even if the next part fails
                    Path(args.out).write_text("\n".join(lines) + "\n")
            if not args.skip_short:
                lines += [f"Short request (`max_tokens` 8, greedy) idle, then while two clients loop `max_tokens` "
                          f"{args.long_tokens} (greedy: they run to the cap):",
                          "", "| side | idle median ms | under load: median ms | worst ms | median / idle | "
                          "all under load (ms) |", "|---|---:|---:|---:|---:|---|"]
                for name in names:
                    s = short_under_load(servers[name], args.short, args.long_tokens)
                    lines.append(f"| {name} | {1000 * s['idle']:.0f} | {1000 * s['median']:.0f} | "
                                 f"{1000 * s['worst']:.0f} | {s['median'] / s['idle']:.1f} | "
                                 f"{', '.join(f'{1000 * x:.0f}' for x in s['loaded'])} |")
                lines.append("")
        finally:
            for s in servers.values():
                s.stop()
    lines.append(f"load average at the end {os.getloadavg()[0]:.1f}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
