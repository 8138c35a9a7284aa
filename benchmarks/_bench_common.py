"""What the benchmarks share, so that no benchmark imports another (each ``benchmarks/*.py``
is one command). A script puts this folder on ``sys.path`` and imports what it needs from here
(the name differs from labs/_labs_common.py's, so that a test process can load both):

- ``ragen`` server processes and HTTP clients (``bench_servers.py``, ``bench_kill_resume.py``,
  ``bench_serve_batching.py``, ``bench_serve_independent.py``): :class:`Server`,
  :func:`request`, :func:`run_clients`, :func:`percentiles`, :func:`supports`;
- the demo's SFT step timed in a fresh process per measurement (``bench_omp_wait.py``,
  ``bench_sft_levers.py``): :func:`child_args`, :func:`start_timing`, :func:`timing_result`,
  :func:`cli`;
- OpenEnv's floor, a constant env on its own ``create_app`` (``bench_openenv_turn.py``,
  ``bench_openenv_threads.py``, ``prof_openenv_server.py``): :func:`floor_app`,
  :func:`start_url_process`;
- a trained tiny Sokoban model to evaluate (``bench_hf_eval.py``, ``bench_eval_omp.py``):
  :func:`build_sokoban_model`;
- one Sokoban turn timed by side (``bench_sokoban_turn.py``, ``bench_sokoban_ids.py``): :class:`Side`,
  :func:`episodes_for`, :func:`summary`.

Only the standard library loads with it; torch, transformers and OpenEnv load inside the
functions that need them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ============================================================================= server processes and HTTP clients
CLI = "import sys; from ragen_envs.cli import main; sys.exit(main())"
MESSAGES = [{"role": "system", "content": "You're a helpful assistant. "},
            {"role": "user", "content": "Turn 1:\nState:\n#P_O#\n"}]


class Server:
    """A ``ragen`` server subprocess; ``address`` from the URL it prints."""

    def __init__(self, args: list[str], src: str | None) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        if src:
            env["PYTHONPATH"] = src
        self.proc = subprocess.Popen([sys.executable, "-c", CLI, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, cwd=src or None)
        line = self.proc.stdout.readline()
        if "http://" not in line:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()[-2000:]}")
        url = line[line.index("http://"):].split()[0]
        host_port = url[len("http://"):].split("/")[0]
        host, port = host_port.rsplit(":", 1)
        self.address = (host, int(port))
        self.stderr_lines = 0

    def proc_status(self) -> dict[str, int]:
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) // 1024  # MiB
            elif key == "Threads":
                out[key] = int(value)
        return out

    def stop(self) -> str:
        self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


def supports(flag: str, command: str, src: str | None) -> bool:
    env = dict(os.environ, PYTHONPATH=src) if src else None
    out = subprocess.run([sys.executable, "-c", CLI, command, "--help"], capture_output=True, text=True, env=env,
                         cwd=src or None)
    return flag in out.stdout


# ---------------------------------------------------------------------- HTTP helpers
def request(address, method: str, path: str, body=None, raw: bytes | None = None, timeout: float = 15.0,
            conn: http.client.HTTPConnection | None = None):
    """(status or an error word, parsed body or None, seconds)."""
    start = time.monotonic()
    own = conn is None
    conn = conn or http.client.HTTPConnection(*address, timeout=timeout)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read()
        try:
            parsed = json.loads(payload) if payload else None
        except ValueError:
            parsed = payload[:200]
        return resp.status, parsed, time.monotonic() - start
    except (socket.timeout, TimeoutError):
        return "timeout", None, time.monotonic() - start
    except (ConnectionError, http.client.HTTPException, OSError) as exc:
        if own:
            conn.close()
        return type(exc).__name__, None, time.monotonic() - start
    finally:
        if own:
            conn.close()


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "max": float("nan")}
    q = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return {"p50": q[49], "p90": q[89], "p99": q[98], "max": max(values)}


def run_clients(n: int, work) -> tuple[list[float], list[str], float]:
    """Start ``n`` threads together on ``work(i) -> [(status, seconds), ...]``."""
    barrier = threading.Barrier(n)
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def body(i: int) -> None:
        barrier.wait()
        for status, seconds in work(i):
            with lock:
                if status == 200:
                    latencies.append(seconds)
                else:
                    errors.append(str(status))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors, time.monotonic() - start


# ============================================================================= the SFT step timed in fresh processes
TIMING_CHILD = r"""
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


def start_timing(policy: str, args: dict) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    return subprocess.Popen([sys.executable, "-c", TIMING_CHILD, str(ROOT), json.dumps(args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class TimingFailed(RuntimeError):
    """A timing process exited with an error; the message is its last line of stderr."""


def timing_result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        last = next((line.strip() for line in reversed(err.splitlines()) if line.strip()), "no output")
        raise TimingFailed(f"a timing process failed (exit {proc.returncode}): {last}")
    return json.loads(out.strip().splitlines()[-1])


def cli(main) -> None:
    """Run a benchmark's ``main`` as a command: a timing process (:func:`start_timing`) that fails ends it with one
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
    from ragen_envs.starpo.demo import DEMO, override_settings
    from ragen_envs.starpo.tiny import build_tiny_policy

    settings = json.loads(json.dumps(DEMO))
    try:
        override_settings(settings, model_set=args.model_set)
    except ValueError as exc:
        parser.error(str(exc))
    tokdir = build_tiny_policy(tmp / "m", settings["env_id"], settings["env_kwargs"], seed=0, **settings["tokenizer"],
                               hidden_size=16, num_layers=1, num_heads=2, intermediate_size=16)  # only its tokenizer
    return settings, {"tokenizer": str(tokdir), "shape": settings["tiny_model"], "steps": args.steps,
                      "threads": args.threads}


# ============================================================================= OpenEnv's floor
def floor_app(env_id: str):
    """OpenEnv's create_app serving the constant env (the floor)."""
    from openenv.core.env_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import ConcurrencyConfig

    from ragen_envs.integrations.openenv import RagenAction, RagenObservation, RagenState

    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ids)

    text = gym.make(env_id).reset(seed=0)[0]

    class ConstantEnv(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self._state = RagenState(env_id="constant")

        def reset(self, seed=None, episode_id=None, **kwargs):
            return RagenObservation(observation=text, reward=None, done=False)

        def step(self, action, timeout_s=None, **kwargs):
            return RagenObservation(observation=text, reward=0.0, done=False)

        @property
        def state(self):
            return self._state

    return create_app(ConstantEnv, RagenAction, RagenObservation, env_name="constant",
                      concurrency_config=ConcurrencyConfig(max_concurrent_envs=4), state_cls=RagenState)


def start_url_process(cmd: list[str]) -> tuple[subprocess.Popen, str]:
    """Start a server process that prints ``... on http://HOST:PORT`` as its first line; returns
    it and that URL. It runs from the tree this process imported ragen_envs from (``python -m``
    puts the current directory first on sys.path, so a PYTHONPATH A/B would otherwise serve the
    cwd's tree, not the one measured)."""
    import ragen_envs

    tree = os.path.dirname(os.path.dirname(os.path.abspath(ragen_envs.__file__)))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tree)
    return proc, re.search(r"on (http://\S+)$", proc.stdout.readline().strip()).group(1)


# ============================================================================= a trained tiny model to evaluate
def build_sokoban_model(root: Path) -> Path:
    """A demo-shaped tiny Sokoban model (hidden 128, 4 layers, 8 heads) after a short SFT (400
    expert episodes, 150 steps), so replies have realistic lengths; built under ``root``."""
    from ragen_envs.starpo.sft import run_sft
    from ragen_envs.starpo.tiny import build_tiny_policy

    kw = {"think": False}
    init = build_tiny_policy(root / "init", "ragen/Sokoban-v0", kw, hidden_size=128, num_layers=4,
                             intermediate_size=384, num_heads=8)
    return run_sft("ragen/Sokoban-v0", str(root / "sft"), model=str(init), env_kwargs=kw, episodes=400, steps=150,
                   batch_size=16, lr=2e-3, max_new_tokens=12, log=lambda *a: None)


# ============================================================================= one Sokoban text turn, timed
# (bench_sokoban_turn.py against the peers, bench_sokoban_ids.py across our Sokoban ids)
THINK = "The box is below me and the target is to my left, so I push it down first."
MOVES = ("up", "down", "left", "right")
STEPS_PER_EPISODE = 5


class Side:
    """One env behind two callables: ``reset(seed)`` and ``step(move) -> done``."""

    def __init__(self, name: str, reset, step) -> None:
        self.name, self.reset, self.step = name, reset, step
        self.reset_ns: list[int] = []
        self.step_ns: list[int] = []
        self.steps = 0  # steps played, timed or not

    def play(self, episodes, timed: bool = True, steps: bool = True) -> None:
        clock = time.perf_counter_ns
        reset, step = self.reset, self.step
        for seed, moves in episodes:
            t0 = clock()
            reset(seed)
            t1 = clock()
            if timed:
                self.reset_ns.append(t1 - t0)
            if not steps:
                continue
            for move in moves:
                t0 = clock()
                done = step(move)
                t1 = clock()
                self.steps += 1
                if timed:
                    self.step_ns.append(t1 - t0)
                if done:
                    break


def episodes_for(n: int, seed: int, first_seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    draws = rng.integers(0, 4, size=(n, STEPS_PER_EPISODE))
    return [(first_seed + i, [MOVES[a] for a in row]) for i, row in enumerate(draws)]


def summary(ns: list[int]) -> dict[str, float]:
    import numpy as np

    us = np.asarray(ns) / 1e3
    return {"median": float(np.median(us)), "p95": float(np.percentile(us, 95)), "n": len(us)}
