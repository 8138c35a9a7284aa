"""Issue 43, item 2: can one ``ragen serve`` request fail or starve the others? Each case runs on
a fresh ``ragen serve`` process (the tiny checkpoint of ``ragen_envs.models``, CPU), this
process being the clients:

- ``tiny-temperature``: one request at ``temperature`` 5e-324 sent together with six ordinary
  ones (temperature 1): the status each got;
- ``huge-int``: ``max_tokens`` written with 5,000 digits: the status, and tracebacks logged;
- ``long-prompt``: a prompt of 7.9 MB (``"push the box "`` x 600,000) alone, then 8 at once
  (``--copies``): seconds to the answer, the server's resident memory after vs before and its peak;
- ``starve``: four streaming requests of ``n=16, max_tokens=4000`` (greedy: the untrained model
  runs all 4,000 tokens), then 2 s later a 4-token request (the *victim*): its latency.

``--src DIR`` runs the server from another checkout (e.g. ``/work/main`` before the fixes).

    python benchmarks/bench_serve_independent.py [--cases all|NAME,...] [--src DIR] [--repeats 1]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import MESSAGES, Server, request  # noqa: E402

PATH = "/v1/chat/completions"
CASES = ("tiny-temperature", "huge-int", "long-prompt", "starve")


def serve(model: Path, src: str | None) -> Server:
    return Server(["serve", f"hf:{model}", "--port", "0", "--device", "cpu"], src)


def tiny_temperature(model: Path, src: str | None) -> dict:
    server = serve(model, src)
    try:
        out: dict[int, object] = {}

        def send(i: int) -> None:
            body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 30, "seed": i,
                    "temperature": 5e-324 if i == 0 else 1.0}
            out[i] = request(server.address, "POST", PATH, body, timeout=60)[0]

        threads = [threading.Thread(target=send, args=(i,)) for i in range(7)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        err = server.stop()
    return {"tiny": out[0], "others": [out[i] for i in range(1, 7)], "tracebacks": err.count("Traceback")}


def huge_int(model: Path, src: str | None) -> dict:
    server = serve(model, src)
    try:
        raw = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": ' + b"9" * 5000 + b"}"
        status, answer, seconds = request(server.address, "POST", PATH, raw=raw, timeout=20)
        after = request(server.address, "POST", PATH, {"model": "tiny", "messages": MESSAGES, "max_tokens": 4},
                        timeout=20)[0]
    finally:
        err = server.stop()
    message = answer.get("error", {}).get("message") if isinstance(answer, dict) else None
    return {"status": status, "seconds": round(seconds, 3), "message": message, "next_request": after,
            "tracebacks": err.count("Traceback")}


def long_prompt(model: Path, src: str | None, copies: int) -> dict:
    server = serve(model, src)
    try:
        request(server.address, "POST", PATH, {"model": "tiny", "messages": MESSAGES, "max_tokens": 2}, timeout=30)
        before = server.proc_status()
        body = {"model": "tiny", "messages": [{"role": "user", "content": "push the box " * 600_000}],
                "max_tokens": 4}
        raw = json.dumps(body).encode()
        results: list = [None] * copies

        def send(i: int) -> None:
            results[i] = request(server.address, "POST", PATH, raw=raw, timeout=300)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(copies)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
        time.sleep(1.0)
        after = server.proc_status()
    finally:
        err = server.stop()
    return {"copies": copies, "body_mb": round(len(raw) / 1e6, 2), "statuses": [r[0] for r in results],
            "seconds": [round(r[2], 2) for r in results], "wall_s": round(wall, 2),
            "rss_before_mib": before["VmRSS"], "rss_after_mib": after["VmRSS"],
            "rss_growth_mib": after["VmRSS"] - before["VmRSS"], "peak_growth_mib": after["VmHWM"] - before["VmHWM"],
            "tracebacks": err.count("Traceback")}


def starve(model: Path, src: str | None, delay: float = 2.0, timeout: float = 300.0) -> dict:
    server = serve(model, src)
    conns: list[http.client.HTTPConnection] = []
    stop = threading.Event()
    chunks = [0] * 4
    try:
        def long_stream(i: int) -> None:
            conn = http.client.HTTPConnection(*server.address, timeout=timeout)
            conns.append(conn)
            body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 4000, "n": 16, "temperature": 0,
                    "stream": True}
            try:
                conn.request("POST", PATH, body=json.dumps(body), headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                while not stop.is_set():
                    if not resp.fp.readline():
                        break
                    chunks[i] += 1
            except (OSError, http.client.HTTPException, AttributeError, ValueError):
                pass

        threads = [threading.Thread(target=long_stream, args=(i,), daemon=True) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(delay)
        status, answer, seconds = request(server.address, "POST", PATH,
                                          {"model": "tiny", "messages": MESSAGES, "max_tokens": 4, "temperature": 0},
                                          timeout=timeout)
        streaming = [c for c in chunks]
    finally:
        stop.set()
        for c in conns:
            try:
                c.sock and c.sock.close()
            except OSError:
                pass
        err = server.stop()
    return {"victim_status": status, "victim_s": round(seconds, 2), "long_stream_lines_at_victim_end": streaming,
            "tracebacks": err.count("Traceback")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="all", help=f"all or a comma list of {', '.join(CASES)}")
    ap.add_argument("--src", help="run the server from this checkout")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each case (the timing medians are printed)")
    ap.add_argument("--model", help="a model folder (default: build the tiny checkpoint)")
    ap.add_argument("--copies", default="1,8", help="long-prompt: how many at once, a comma list (default 1,8; "
                                                     "8 copies took 12 GiB on the code before the fix)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    copies = [int(c) for c in args.copies.split(",")]
    cases = CASES if args.cases == "all" else tuple(args.cases.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            model = Path(args.model)
        else:
            from ragen_envs.models import build_tiny_checkpoint

            model = build_tiny_checkpoint(Path(tmp) / "tiny")
        results: dict[str, list] = {}
        for _ in range(args.repeats):
            for case in cases:
                if case == "tiny-temperature":
                    r = tiny_temperature(model, args.src)
                elif case == "huge-int":
                    r = huge_int(model, args.src)
                elif case == "long-prompt":
                    r = {str(c): long_prompt(model, args.src, c) for c in copies}
                elif case == "starve":
                    r = starve(model, args.src)
                else:
                    raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
                results.setdefault(case, []).append(r)
                print(case, json.dumps(r), flush=True)
    summary = {"src": args.src or "this checkout", "results": results}
    if "starve" in results:
        summary["victim_s_median"] = statistics.median(r["victim_s"] for r in results["starve"])
    if "long-prompt" in results:
        summary["long_prompt_s_median"] = {c: statistics.median(statistics.median(r[c]["seconds"])
                                                                for r in results["long-prompt"]) for c in map(str, copies)}
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
