"""Load and hostile-input test of the two HTTP servers: ``ragen serve`` and ``ragen webshop-server``.

Each server runs as its own process (the ``ragen`` command, started with ``--port 0``) on
loopback; this process is the clients. Measured:

- **load**: ``--clients`` concurrent clients released together, each making ``--requests``
  requests (``ragen serve``: a chat completion of up to 16 tokens from the tiny checkpoint of
  ``ragen_envs.models``, keep-alive connection per client; WebShop: create, reset, search,
  available actions, close, a new connection per request): latency percentiles, errors,
  requests per second, the server's thread count and resident memory afterwards;
- **hostile cases**, each on a fresh server: ``max_tokens`` 10^6, 16 stop strings of 100 KB, a
  100 KB prompt, JSON nested 100,000 deep, NUL / lone-surrogate content, a client that leaves
  in the middle of a long generation, 2,000 silent (half-open) connections, 40 searches of
  900 KB, ``--session-ttl nan``, and ``--slow-clients`` (default 1,500) connections that send
  a request's headers and one byte of its body and then wait (issue 20: the goal is a victim
  answered within 1 s). For each: what the client got, how long it took, and whether an
  ordinary request sent alongside (the *victim*) was served and how fast.

``--src DIR`` runs the servers from another checkout (e.g. ``/work/main`` before the fixes) for
a side-by-side table; options that checkout lacks are left out. Every client call has a
timeout, so a server that hangs shows as ``timeout``.

Run: ``python benchmarks/bench_servers.py [--clients 64] [--requests 5] [--webshop-clients 500]
[--hostile all|connections|none] [--slow-clients 1500] [--src DIR] [--out FILE]``
(``--hostile connections``: only the silent and slow connection rows).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import CLI, MESSAGES, Server, percentiles, request, run_clients, supports  # noqa: E402


def error_summary(errors: list[str]) -> str:
    if not errors:
        return "0"
    counts: dict[str, int] = {}
    for e in errors:
        counts[e] = counts.get(e, 0) + 1
    return f"{len(errors)} (" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + ")"


# ---------------------------------------------------------------------- ragen serve
def serve_args(model: Path, src: str | None) -> list[str]:
    args = ["serve", f"hf:{model}", "--port", "0", "--max-tokens", "16", "--device", "cpu"]
    if supports("--idle-timeout", "serve", src):
        args += ["--idle-timeout", "2"]
    return args


def serve_load(model: Path, src: str | None, clients: int, requests: int) -> dict:
    server = Server(serve_args(model, src), src)
    try:
        def work(i: int):
            conn = http.client.HTTPConnection(*server.address, timeout=120)
            out = []
            for k in range(requests):
                body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 16, "temperature": 1.0}
                status, _, seconds = request(server.address, "POST", "/v1/chat/completions", body, conn=conn)
                if status != 200:
                    conn.close()
                    conn = http.client.HTTPConnection(*server.address, timeout=120)
                out.append((status, seconds))
            conn.close()
            return out

        latencies, errors, wall = run_clients(clients, work)
        return {"latencies": latencies, "errors": errors, "wall": wall, "status": server.proc_status(),
                "tracebacks": server.stop().count("Traceback")}
    finally:
        if server.proc.poll() is None:
            server.stop()


def victim(address, delay: float, result: dict, path="/v1/chat/completions", body=None, method="POST") -> threading.Thread:
    """After ``delay`` s, one ordinary request; its outcome lands in ``result``."""
    def go():
        time.sleep(delay)
        b = body if body is not None else {"model": "tiny", "messages": MESSAGES, "max_tokens": 4}
        status, _, seconds = request(address, method, path, b if method == "POST" else None, timeout=20)
        result.update(status=status, seconds=seconds)
    t = threading.Thread(target=go)
    t.start()
    return t


def describe(status, answer, seconds) -> str:
    msg = ""
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        msg = answer["error"].get("message", "")[:70]
    elif isinstance(answer, dict) and isinstance(answer.get("error"), str):
        msg = answer["error"][:70]
    elif isinstance(answer, dict) and "choices" in answer:
        msg = f"{answer['usage']['completion_tokens']} tokens" if "usage" in answer else "reply"
    return f"{status} in {seconds:.2f} s" + (f" ({msg})" if msg else "")


def serve_connections(model: Path, src: str | None, slow: int) -> list[tuple[str, str, str, str]]:
    args = serve_args(model, src)
    return [half_open(args, src, "GET", "/health"),
            slow_bodies(args, src, slow_head("/v1/chat/completions"), "POST", "/v1/chat/completions", slow,
                        {"model": "tiny", "messages": MESSAGES, "max_tokens": 4})]


def webshop_connections(src: str | None, slow: int) -> list[tuple[str, str, str, str]]:
    return [half_open(webshop_args(src), src, "GET", "/"),
            slow_bodies(webshop_args(src), src, slow_head("/create"), "GET", "/", slow)]


def serve_hostile(model: Path, src: str | None) -> list[tuple[str, str, str, str]]:
    """Rows: case, what the client got, victim request, server memory / threads."""
    rows = []
    path = "/v1/chat/completions"
    cases = [
        ("max_tokens 10^6", {"max_tokens": 10**6, "temperature": 0}),
        ("16 stop strings x 100 KB", {"stop": ["x" * 100_000 + str(i) for i in range(16)], "max_tokens": 8}),
        ("prompt of 100 KB", {"messages": [{"role": "user", "content": "push the box " * 8_000}], "max_tokens": 8}),
        ("JSON nested 100,000 deep", None),
        ("NUL in content", {"messages": [{"role": "user", "content": "a\x00b"}], "max_tokens": 4}),
        ("lone surrogate in content", {"messages": [{"role": "user", "content": "a\ud800b"}], "max_tokens": 4}),
        ("logprobs=true", {"logprobs": True, "max_tokens": 4}),
    ]
    for name, extra in cases:
        server = Server(serve_args(model, src), src)
        try:
            before = server.proc_status()
            v: dict = {}
            t = victim(server.address, 0.5, v)
            if extra is None:
                raw = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
                status, answer, seconds = request(server.address, "POST", path, raw=raw, timeout=20)
            else:
                body = {"model": "tiny", "messages": MESSAGES, **extra}
                status, answer, seconds = request(server.address, "POST", path, body, timeout=20)
            t.join()
            after = server.proc_status()
            rows.append((name, describe(status, answer, seconds), f"{v.get('status')} in {v.get('seconds', 0):.2f} s",
                         f"peak RSS +{after['VmHWM'] - before['VmHWM']} MiB"))
        finally:
            server.stop()
    # a client that leaves during a long generation
    server = Server(serve_args(model, src), src)
    try:
        data = json.dumps({"model": "tiny", "messages": MESSAGES, "max_tokens": 4000, "temperature": 0}).encode()
        s = socket.create_connection(server.address, timeout=10)
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
                  f"\r\n\r\n".encode() + data)
        time.sleep(0.5)
        s.close()
        time.sleep(0.3)
        status, _, seconds = request(server.address, "POST", path,
                                     {"model": "tiny", "messages": MESSAGES, "max_tokens": 4}, timeout=30)
    finally:
        err = server.stop()
    rows.append(("client leaves during max_tokens 4000", "closed after 0.5 s", f"{status} in {seconds:.2f} s",
                 f"{err.count('Traceback')} tracebacks logged"))
    return rows


def raise_fd_limit(n: int) -> int:
    """Raise this process's soft file-descriptor limit to hold ``n`` client sockets; the limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, n + 512))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def slow_bodies(args: list[str], src: str | None, head: bytes, method: str, path: str,
                n: int = 1500, body=None) -> tuple[str, str, str, str]:
    """``n`` connections that send ``head`` (headers and one byte of a 50-byte body) and wait;
    then victim requests: the goal is each answered within 1 s."""
    raise_fd_limit(2 * n)
    if "--idle-timeout" in args:  # the servers' default (30 s), so the slow connections stay open throughout
        args = list(args)
        args[args.index("--idle-timeout") + 1] = "30"
    server = Server(args, src)
    socks = []
    try:
        connected = 0
        for _ in range(n):
            s = socket.socket()
            s.settimeout(1.0)
            try:
                s.connect(server.address)
                s.sendall(head)
                connected += 1
            except OSError:
                pass
            socks.append(s)
        time.sleep(1.0)
        threads = server.proc_status()["Threads"]
        victims = [request(server.address, method, path, body, timeout=20) for _ in range(3)]
        seconds = [v[2] for v in victims]
        statuses = sorted({str(v[0]) for v in victims})
        open_after = 0
        for s in socks:
            s.setblocking(False)
            try:
                open_after += s.recv(1) != b""
            except BlockingIOError:
                open_after += 1
            except OSError:
                pass
    finally:
        for s in socks:
            s.close()
        err = server.stop()
    return (f"{n} slow bodies (headers + 1 byte, then wait)",
            f"{connected} connected; {open_after} still open when the victims were answered; server threads {threads}",
            f"{'/'.join(statuses)}; worst of 3 in {max(seconds):.2f} s", f"{err.count('Traceback')} tracebacks logged")


def slow_head(path: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{{"
            .encode())


def half_open(args: list[str], src: str | None, method: str, path: str, n: int = 2000) -> tuple[str, str, str, str]:
    """``n`` connections that send nothing; a victim request meanwhile; are they closed later?"""
    raise_fd_limit(2 * n)
    server = Server(args, src)
    socks = []
    try:
        connected = 0
        for _ in range(n):  # a server with a small backlog makes connects wait: 1 s each at most
            s = socket.socket()
            s.settimeout(1.0)
            try:
                s.connect(server.address)
                connected += 1
            except OSError:
                pass
            socks.append(s)
        time.sleep(1.0)
        threads = server.proc_status()["Threads"]
        status, _, seconds = request(server.address, method, path, timeout=20)
        time.sleep(4.0)  # the idle timeout of the bench's servers is 2 s
        closed = 0
        for s in socks:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        err = ""
    finally:
        for s in socks:
            s.close()
        err = server.stop()
    return (f"{n} silent connections", f"{connected} connected; server threads {threads}; {closed} closed by the server "
            "after 5 s",
            f"{status} in {seconds:.2f} s", f"{err.count('Traceback')} tracebacks logged")


# ---------------------------------------------------------------------- WebShop server
def webshop_args(src: str | None, *extra: str) -> list[str]:
    args = ["webshop-server", "--backend", "mini", "--port", "0", *extra]
    if supports("--idle-timeout", "webshop-server", src):
        args += ["--idle-timeout", "2"]
    return args


def webshop_load(src: str | None, clients: int) -> dict:
    server = Server(webshop_args(src), src)
    try:
        def work(i: int):
            out = []
            status, idx, s = request(server.address, "POST", "/create", timeout=60)
            out.append((status, s))
            if status != 200:
                return out
            for method, path, body in [("POST", "/reset", {"env_idx": idx, "session_id": i % 500}),
                                       ("POST", "/step", {"env_idx": idx, "action": "search[tea for women]"}),
                                       ("GET", f"/available_actions?env_idx={idx}", None),
                                       ("POST", "/close", {"env_idx": idx})]:
                status, _, s = request(server.address, method, path, body, timeout=60)
                out.append((status, s))
            return out

        latencies, errors, wall = run_clients(clients, work)
        return {"latencies": latencies, "errors": errors, "wall": wall, "status": server.proc_status(),
                "tracebacks": server.stop().count("Traceback")}
    finally:
        if server.proc.poll() is None:
            server.stop()


SEARCH_MEMORY = """
import gc, sys, tracemalloc
from ragen_envs.webshop.server import WebShopServer
srv = WebShopServer()
gc.collect(); tracemalloc.start(); base = tracemalloc.get_traced_memory()[0]
idx = srv.create()
srv.handle("POST", "/reset", {}, {"env_idx": idx, "session_id": 0})
for i in range(int(sys.argv[1])):
    q = " ".join(f"w{i}x{j}" for j in range(100_000))[:900_000]
    srv.handle("POST", "/step", {}, {"env_idx": idx, "action": "click[back to search]"})
    srv.handle("POST", "/step", {}, {"env_idx": idx, "action": f"search[{q}]"})
gc.collect(); held = tracemalloc.get_traced_memory()[0] - base
srv.close(idx); gc.collect(); after = tracemalloc.get_traced_memory()[0] - base
print(held / 2**20, after / 2**20)
"""


def search_memory(src: str | None, n: int = 40) -> tuple[str, str, str, str]:
    """Python memory held by the server's objects (tracemalloc) after ``n`` searches of 900 KB
    on one session, and after ``/close``; the server's code in-process, from ``src`` if given."""
    env = dict(os.environ, PYTHONPATH=src) if src else None
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", SEARCH_MEMORY, str(n)], capture_output=True, text=True, env=env,
                         cwd=src or None, timeout=600)
    if out.returncode != 0:
        return (f"{n} searches of 900 KB", f"failed: {out.stderr.strip().splitlines()[-1:]}", "", "")
    held, after = (float(x) for x in out.stdout.split())
    return (f"{n} searches of 900 KB, then /close", f"{time.monotonic() - start:.1f} s", "",
            f"held {held:.1f} MiB, after /close {after:.1f} MiB (tracemalloc)")


def webshop_hostile(src: str | None) -> list[tuple[str, str, str, str]]:
    rows = [search_memory(src)]
    server = Server(webshop_args(src), src)
    try:
        raw = b"[" * 100_000 + b"]" * 100_000
        status, answer, seconds = request(server.address, "POST", "/step", raw=raw, timeout=20)
        v = {}
        victim(server.address, 0.0, v, path="/", method="GET").join()
        rows.append(("JSON nested 100,000 deep", describe(status, answer, seconds), f"{v['status']} in {v['seconds']:.2f} s", ""))
    finally:
        server.stop()
    env = dict(os.environ, PYTHONPATH=src) if src else None
    nan = subprocess.Popen([sys.executable, "-c", CLI, "webshop-server", "--port", "0", "--session-ttl", "nan"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=src or None)
    try:
        _, err = nan.communicate(timeout=20)
        outcome = f"exit {nan.returncode}, {len(err.strip().splitlines())} stderr line(s)"
    except subprocess.TimeoutExpired:  # it took nan and serves
        nan.kill()
        nan.communicate()
        outcome = "accepted: the server started"
    rows.append(("--session-ttl nan", outcome, "", ""))
    return rows


# ---------------------------------------------------------------------- engine vs generate
def engine_vs_generate(model: Path, repeats: int) -> list[str]:
    """In one process, interleaved: 16 conversations x 64 tokens at temperature 1 through
    ``HFAgent.generate`` (transformers' ``generate``, what ``ragen serve`` used before) and
    through :class:`ragen_envs.lm.token_engine.TokenEngine` (``HFBackend.complete`` with n=16), with and
    without a stop string that never occurs. Median wall time and tokens per second."""
    from ragen_envs.agents import make_agent
    from ragen_envs.agents.hf import SamplingParams
    from ragen_envs.serve import HFBackend, parse_chat_request

    agent = make_agent(f"hf:{model}", max_tokens=64, temperature=1.0, device="cpu")
    backend = HFBackend(agent, "tiny", batch_wait_s=0.0)
    rows = []
    for stop in ((), ("zzzz",)):
        params = SamplingParams(1.0, 1.0, 64, stop)
        req = parse_chat_request({"messages": MESSAGES, "max_tokens": 64, "temperature": 1.0, "n": 16,
                                  "stop": list(stop) or None})
        sides = {"HFAgent.generate": lambda: agent.generate([MESSAGES] * 16, params),
                 "TokenEngine": lambda: backend.complete(req)[1]}
        times: dict[str, list[float]] = {k: [] for k in sides}
        tokens: dict[str, list[int]] = {k: [] for k in sides}
        for fn in sides.values():
            fn()  # warm-up
        for _ in range(repeats):
            for name, fn in sides.items():
                start = time.perf_counter()
                out = fn()
                times[name].append(time.perf_counter() - start)
                tokens[name].append(sum(g.completion_tokens for g in out))
        med = {k: statistics.median(v) for k, v in times.items()}
        tps = {k: statistics.median(t / s for t, s in zip(tokens[k], times[k])) for k in sides}
        rows.append(f"| {'with' if stop else 'no'} stop string | {1000 * med['HFAgent.generate']:.0f} | "
                    f"{tps['HFAgent.generate']:.0f} | {1000 * med['TokenEngine']:.0f} | {tps['TokenEngine']:.0f} | "
                    f"{tps['TokenEngine'] / tps['HFAgent.generate']:.2f} |")
    backend.close()
    return rows


# ---------------------------------------------------------------------- report
def load_row(name: str, r: dict, clients: int) -> str:
    p = percentiles(r["latencies"])
    done = len(r["latencies"])
    return (f"| {name} | {clients} | {done + len(r['errors'])} | {1000 * p['p50']:.0f} | {1000 * p['p90']:.0f} | "
            f"{1000 * p['p99']:.0f} | {1000 * p['max']:.0f} | {done / r['wall']:.1f} | {error_summary(r['errors'])} | "
            f"{r['status']['Threads']} | {r['status']['VmRSS']} | {r['tracebacks']} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64, help="concurrent ragen serve clients (default 64)")
    parser.add_argument("--requests", type=int, default=5, help="requests per ragen serve client (default 5)")
    parser.add_argument("--webshop-clients", type=int, default=500, help="concurrent WebShop clients (default 500)")
    parser.add_argument("--src", help="run the servers from this checkout instead (e.g. /work/main)")
    parser.add_argument("--skip-hostile", action="store_true", help="the same as --hostile none")
    parser.add_argument("--hostile", choices=("all", "connections", "none"), default="all",
                        help="hostile cases to run (connections: only the silent and slow connection rows)")
    parser.add_argument("--slow-clients", type=int, default=1500, help="connections in the slow-body case (default 1500)")
    parser.add_argument("--skip-load", action="store_true", help="no load rows")
    parser.add_argument("--engine-repeats", type=int, default=0,
                        help="also time TokenEngine vs HFAgent.generate in this process, N interleaved repeats")
    parser.add_argument("--out", help="also write the Markdown here")
    args = parser.parse_args(argv)
    src = str(Path(args.src).resolve()) if args.src else None

    from ragen_envs.models import build_tiny_checkpoint

    lines = [f"# bench_servers ({'checkout ' + src if src else 'this checkout'})", "",
             f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}", ""]
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_checkpoint(Path(tmp) / "tiny")
        if not args.skip_load:
            serve = serve_load(model, src, args.clients, args.requests)
            web = webshop_load(src, args.webshop_clients)
            lines += ["| server | clients | requests | p50 ms | p90 ms | p99 ms | max ms | ok req/s | errors | "
                      "threads after | RSS MiB | tracebacks |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
                      load_row("ragen serve (tiny, 16 tokens)", serve, args.clients),
                      load_row("ragen webshop-server (5 calls each)", web, args.webshop_clients), ""]
        if args.engine_repeats:
            lines += [f"16 conversations x 64 tokens, temperature 1, tiny model on CPU, medians of "
                      f"{args.engine_repeats} interleaved repeats:", "",
                      "| case | generate ms | generate tok/s | engine ms | engine tok/s | engine / generate |",
                      "|---|---:|---:|---:|---:|---:|", *engine_vs_generate(model, args.engine_repeats), ""]
        hostile = "none" if args.skip_hostile else args.hostile
        if hostile != "none":
            lines += ["| server | case | client got | victim request | server |", "|---|---|---|---|---|"]
            serve_rows = (serve_hostile(model, src) if hostile == "all" else []) + serve_connections(
                model, src, args.slow_clients)
            for row in serve_rows:
                lines.append("| ragen serve | " + " | ".join(row) + " |")
            web_rows = (webshop_hostile(src) if hostile == "all" else []) + webshop_connections(src, args.slow_clients)
            for row in web_rows:
                lines.append("| webshop-server | " + " | ".join(row) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
