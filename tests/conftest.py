"""Test-wide setup: pygame runs headless (no window, no sound card) before anything imports it."""

from __future__ import annotations

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

# Under pytest-xdist (`make test` runs the main suite with `-n 2`) each worker gets its share of
# the cores for torch's threads (and the processes it starts), set before anything imports torch:
# torch's default, a thread per core in every worker, puts 2 x 2 threads on 2 cores, and a thread
# that waits for a descheduled partner slows both workers down. Without xdist nothing changes.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    _share = _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))

# tests/verl/ runs in its own venv (.venv-verl: verl pins an older transformers than this
# project); `make test` runs it there with RAGEN_VERL_TESTS=1 (see the Makefile).
# tests/verifiers/ likewise (.venv-verifiers: verifiers pins mcp==2.0.0 and openai<3), with
# RAGEN_VERIFIERS_TESTS=1.
collect_ignore = [] if os.environ.get("RAGEN_VERL_TESTS") == "1" else ["verl"]
if os.environ.get("RAGEN_VERIFIERS_TESTS") != "1":
    collect_ignore.append("verifiers")
