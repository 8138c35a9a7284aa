"""Test-wide setup: pygame runs headless (no window, no sound card) before anything imports it."""

from __future__ import annotations

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

# tests/verl/ runs in its own venv (.venv-verl: verl pins an older transformers than this
# project); `make test` runs it there with RAGEN_VERL_TESTS=1 (see the Makefile).
# tests/verifiers/ likewise (.venv-verifiers: verifiers pins mcp==2.0.0 and openai<3), with
# RAGEN_VERIFIERS_TESTS=1.
collect_ignore = [] if os.environ.get("RAGEN_VERL_TESTS") == "1" else ["verl"]
if os.environ.get("RAGEN_VERIFIERS_TESTS") != "1":
    collect_ignore.append("verifiers")
