"""What an OpenEnv client can make ``ragen openenv-server`` do (issue 20, item 3).

Starts ``ragen openenv-server ragen/Sokoban-v0 --port 0 [EXTRA ARGS]`` (from this checkout, or
from ``PYTHONPATH``), then over OpenEnv's WebSocket:

1. a reset with ``search_depth`` 10^7 and ``max_turns`` 10^9: accepted or refused?
2. a reset with ``dim_room`` [60, 60] and ``num_boxes`` 20: the answer within 15 s, if any;
3. the client leaves; 1 s later, the largest share of 2 s of samples in which one thread of the
   server is runnable (1.00: a computation still running; thread states, not CPU time, so a
   loaded machine does not hide it);
4. SIGTERM: how long until the process exits (10 s at most).

Run: ``python benchmarks/bench_openenv_limits.py [-- server args]``; e.g. against a checkout
without the bounds: ``PYTHONPATH=/work/main python benchmarks/bench_openenv_limits.py``, and on
this one with the bounds widened so that step 2 reaches the generator: ``python
benchmarks/bench_openenv_limits.py --kwarg-limit dim_room=60 --kwarg-limit num_boxes=20
--reset-timeout 600`` (or ``--reset-timeout 5``).
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time


def busiest_thread(pid: int, seconds: float = 2.0) -> float:
    samples, hits = 0, {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for path in glob.glob(f"/proc/{pid}/task/*/stat"):
            try:
                state = open(path).read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            hits[path] = hits.get(path, 0) + (state == "R")
        samples += 1
        time.sleep(0.05)
    return max(hits.values(), default=0) / samples


def main(argv: list[str]) -> int:
    import websockets.sync.client as wsc

    import ragen_envs

    src = os.path.dirname(os.path.dirname(os.path.abspath(ragen_envs.__file__)))  # the checkout PYTHONPATH picks
    print(f"server code: {src}")
    p = subprocess.Popen([sys.executable, "-m", "ragen_envs.cli", "openenv-server", "ragen/Sokoban-v0", "--port", "0",
                          *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=src,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = p.stdout.readline()
        m = re.search(r"http://(\S+)$", line.strip())
        if not m:
            print("the server did not start:", line, p.stderr.read()[-500:])
            return 1
        url = f"ws://{m.group(1)}/ws"
        with wsc.connect(url, open_timeout=30) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 1, "search_depth": 10**7, "max_turns": 10**9}}))
            reply = json.loads(ws.recv(timeout=30))
            print(f"search_depth 1e7, max_turns 1e9: {'accepted' if reply['type'] == 'observation' else 'refused'}"
                  + (f" ({reply['data']['message'][:100]})" if reply["type"] == "error" else ""))
            start = time.monotonic()
            ws.send(json.dumps({"type": "reset", "data": {"seed": 1, "dim_room": [60, 60], "num_boxes": 20}}))
            try:
                reply = json.loads(ws.recv(timeout=15))
                print(f"dim_room [60, 60], num_boxes 20: {reply['type']} in {time.monotonic() - start:.1f} s"
                      + (f" ({reply['data']['message'][:100]})" if reply["type"] == "error" else ""))
            except TimeoutError:
                print("dim_room [60, 60], num_boxes 20: no answer in 15 s")
        time.sleep(1.0)
        print(f"after the client left: busiest thread runnable in {busiest_thread(p.pid):.2f} of the samples")
        start = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
            print(f"SIGTERM: exited in {time.monotonic() - start:.2f} s")
        except subprocess.TimeoutExpired:
            print("SIGTERM: still running after 10 s")
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
