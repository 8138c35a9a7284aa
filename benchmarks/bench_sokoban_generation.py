"""Sokoban level generation: ``ragen_envs.games.sokoban.generate_level`` vs gym-sokoban.

Both generators run side by side in one process, on the same seeds, room size, box count,
topology walk length (``int(1.7 * (rows + cols))``), direction-change probability (0.35) and
number of tries (4). Calls alternate per seed (ours first on even seeds, the peer first on odd
ones) so drifts in machine load hit both sides alike.

What each side does for one seed (the timed region is exactly this):

* ours: ``generate_level(seed, rows, cols, num_boxes, search_depth)``: builds its private
  ``random.Random(seed)`` / ``numpy.random.RandomState(seed)``, then topology walk, placement,
  a pull-only depth-first reverse play (4 actions; a pull also moves the player when no box
  is behind it) with a time-to-live of ``search_depth`` per path and at most 300,000 explored
  states, then RAGEN's short random player walk. This is the RAGEN reference generator.
* peer: ``random.seed(seed); numpy.random.seed(seed); room_utils.generate_room(...)``
  (gym-sokoban seeds nothing itself; it draws from the process-global generators). Its
  reverse play explores 8 actions (4 pulls + 4 plain moves) through recursive calls on numpy
  arrays, with a hard-coded time-to-live (300 in 0.0.6: ``reverse_playing``'s
  ``search_depth`` argument is unused) and at most 300,000 explored states.

"Same search depth" therefore means ours at ``search_depth`` = the peer's fixed ttl. For
8x8/2 boxes the script also times ours at depth 10, the ``ragen/LargeSokoban-v0`` default,
as an extra row (the peer cannot be run at depth 10).

A failed seed (too little floor, or no box moved in 4 tries) is timed like any other call and
counted under ``fail``; ``ms/level`` is the total time divided by the levels actually produced.

gym-sokoban's package ``__init__`` imports the old ``gym`` package, so only its
``envs/room_utils.py`` is loaded, straight from the installed file. It is looked up, in
order, at ``--gym-sokoban PATH`` (the file, or the ``gym_sokoban`` package folder) or
``$GYM_SOKOBAN_PATH`` (only there when given), else an installed ``gym_sokoban`` in this
interpreter, then ``/tmp/bench-venv/lib/python*/site-packages``. Set it up with::

    python -m venv /tmp/bench-venv
    /tmp/bench-venv/bin/pip install --no-deps gym-sokoban==0.0.6 numpy

A second table gives our own absolute reset figures (no peer): ``reset(seed=s)`` of
``ragen/Sokoban-v0`` and ``ragen/LargeSokoban-v0`` on the 256 eval seeds (``--resets N``).
It runs even when gym-sokoban is missing.

Run: ``python benchmarks/bench_sokoban_generation.py [--levels N] [--resets N]``.
"""

from __future__ import annotations

import argparse
import gc
import glob
import importlib.util
import inspect
import os
import platform
import random
import re
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from ragen_envs.games.sokoban import SokobanGenerationError, generate_level

DEFAULT_CONFIGS = "6x6/1,7x7/2,8x8/2"
# Extra rows: ours at an env's own default depth when it differs from the peer's ttl.
ENV_DEFAULT_DEPTHS = {(8, 8, 2): ("LargeSokoban-v0", 10)}
FALLBACK_GLOBS = ("/tmp/bench-venv/lib/python*/site-packages/gym_sokoban/envs/room_utils.py",)


# ------------------------------------------------------------------------------ the peer
def _candidate_paths(explicit: str | None) -> list[Path]:
    given = explicit or os.environ.get("GYM_SOKOBAN_PATH")
    if given:  # a path the user named is the only candidate
        path = Path(given)
        return [path / "envs" / "room_utils.py" if path.is_dir() else path]
    paths: list[Path] = []
    # find_spec on a top-level package locates it without running its __init__ (which needs gym).
    try:
        spec = importlib.util.find_spec("gym_sokoban")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            paths.append(Path(folder) / "envs" / "room_utils.py")
    for pattern in FALLBACK_GLOBS:
        paths.extend(Path(p) for p in sorted(glob.glob(pattern)))
    return paths


def load_peer(explicit: str | None) -> tuple[ModuleType | None, str]:
    """gym-sokoban's ``room_utils`` module and where it came from, or (None, why not)."""
    tried = []
    for path in _candidate_paths(explicit):
        tried.append(str(path))
        if not path.is_file():
            continue
        spec = importlib.util.spec_from_file_location("_peer_gym_sokoban_room_utils", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # a broken copy: say so and try the next one
            tried[-1] += f" (failed to load: {exc!r})"
            continue
        if not callable(getattr(module, "generate_room", None)):
            tried[-1] += " (no generate_room)"
            continue
        return module, str(path)
    return None, "looked at: " + (", ".join(tried) if tried else "nothing")


def peer_version(room_utils_path: str) -> str:
    site = Path(room_utils_path).resolve().parents[2]
    for meta in sorted(site.glob("gym_sokoban-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return "unknown version"


def describe_peer(module: ModuleType) -> tuple[int | None, str]:
    """Read the peer's reverse-play settings from its source (they vary between versions)."""
    source = inspect.getsource(module.reverse_playing)
    ttl = re.search(r"depth_first_search\(.*?\bttl\s*=\s*(\d+)", source)  # one line: the call
    fixed_ttl = int(ttl.group(1)) if ttl else None
    n_actions = len(getattr(module, "ACTION_LOOKUP", {})) or None
    if fixed_ttl is not None:
        depth = f"ttl fixed at {fixed_ttl} in reverse_playing (its search_depth argument is unused)"
    else:
        depth = "ttl taken from reverse_playing's search_depth"
    return fixed_ttl, f"{n_actions} reverse actions (pulls + plain moves), recursive DFS, {depth}"


# ------------------------------------------------------------------------------ timing
def time_ours(seed: int, rows: int, cols: int, boxes: int, depth: int) -> tuple[int, bool]:
    start = time.perf_counter_ns()
    try:
        generate_level(seed, rows, cols, boxes, search_depth=depth, num_steps=int(1.7 * (rows + cols)))
        ok = True
    except SokobanGenerationError:
        ok = False
    return time.perf_counter_ns() - start, ok


def time_peer(module: ModuleType, seed: int, rows: int, cols: int, boxes: int) -> tuple[int, bool]:
    start = time.perf_counter_ns()
    # The peer reads the global generators: seeding them is part of "the level of this seed".
    random.seed(seed)
    np.random.seed(seed)
    try:
        module.generate_room(
            dim=(rows, cols),
            p_change_directions=0.35,
            num_steps=int(1.7 * (rows + cols)),
            num_boxes=boxes,
            tries=4,
            second_player=False,
        )
        ok = True
    except (RuntimeError, RuntimeWarning):  # what gym-sokoban's own reset() catches and retries
        ok = False
    return time.perf_counter_ns() - start, ok


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def summarise(times_ns: list[int], oks: list[bool]) -> dict[str, float]:
    ms = [t / 1e6 for t in times_ns]
    made = sum(oks)
    return {
        "median": statistics.median(ms),
        "p95": percentile(ms, 95),
        "mean": statistics.fmean(ms),
        "fail": len(oks) - made,
        "per_level": sum(ms) / made if made else float("nan"),
    }


def run_config(module, rows, cols, boxes, depth, levels, first_seed, extra_depth):
    """Time every seed on each side; returns {label: summary}."""
    sides = {"ours": ([], []), "peer": ([], [])}
    if extra_depth is not None:
        sides["ours_env"] = ([], [])
    calls = {
        "ours": lambda s: time_ours(s, rows, cols, boxes, depth),
        "peer": lambda s: time_peer(module, s, rows, cols, boxes),
    }
    if extra_depth is not None:
        calls["ours_env"] = lambda s: time_ours(s, rows, cols, boxes, extra_depth)
    order = list(calls)
    for seed in range(first_seed + 10**6, first_seed + 10**6 + 3):  # warm-up, other seeds
        for name in order:
            calls[name](seed)
    for i in range(levels):
        seed = first_seed + i
        gc.collect()
        for name in order if i % 2 == 0 else order[::-1]:
            elapsed, ok = calls[name](seed)
            sides[name][0].append(elapsed)
            sides[name][1].append(ok)
    return {name: summarise(*data) for name, data in sides.items()}


# ------------------------------------------------------------------------------ main
def parse_configs(text: str) -> list[tuple[int, int, int]]:
    configs = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)x(\d+)/(\d+)\s*", item)
        if not match:
            raise SystemExit(f"bad --configs item {item!r}: use ROWSxCOLS/BOXES, e.g. 8x8/2")
        configs.append(tuple(int(g) for g in match.groups()))
    return configs


def compare_generators(args) -> None:
    module, where = load_peer(args.gym_sokoban)
    if module is None:
        print(
            "SKIPPED the generator comparison: gym-sokoban is not importable, so there is nothing to compare.\n"
            "  Install it apart (its package __init__ needs the old `gym`; only room_utils.py is loaded):\n"
            "    python -m venv /tmp/bench-venv && /tmp/bench-venv/bin/pip install --no-deps gym-sokoban==0.0.6 numpy\n"
            "  or pass --gym-sokoban PATH / set GYM_SOKOBAN_PATH.\n"
            f"  ({where})"
        )
        return
    fixed_ttl, peer_does = describe_peer(module)
    depth = fixed_ttl if fixed_ttl is not None else 300
    configs = parse_configs(args.configs)
    last_seed = args.first_seed + args.levels - 1

    print(f"Sokoban level generation, {args.levels} seeds per room ({args.first_seed}..{last_seed})")
    print(f"  CPython {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    print(f"  peer: gym-sokoban {peer_version(where)} room_utils.generate_room ({where})")
    print(f"        {peer_does}; timed with random.seed + np.random.seed")
    print(f"  ours: ragen_envs generate_level, pull-only DFS (4 actions), search_depth = {depth} (the peer's ttl)")
    print("  both: topology walk int(1.7*(rows+cols)) steps, p_change 0.35, 4 tries, 300,000 explored states max")
    print()
    header = (
        f"{'room':<8}{'side':<34}{'median ms':>10}{'p95 ms':>9}{'mean ms':>9}{'fail':>6}{'ms/level':>10}"
        f"{'peer/ours med':>15}{'peer/ours p95':>15}"
    )
    print(header)
    print("-" * len(header))
    results = []
    for rows, cols, boxes in configs:
        env_default = ENV_DEFAULT_DEPTHS.get((rows, cols, boxes))
        extra = env_default[1] if env_default and env_default[1] != depth else None
        stats = run_config(module, rows, cols, boxes, depth, args.levels, args.first_seed, extra)
        peer = stats["peer"]
        labels = {"peer": f"gym-sokoban (ttl {depth})", "ours": f"ours (depth {depth})"}
        if extra is not None:
            labels["ours_env"] = f"ours (depth {extra}, {env_default[0]})"
        room = f"{rows}x{cols}/{boxes}"
        for name in ("peer", "ours", "ours_env"):
            if name not in stats:
                continue
            st = stats[name]
            ratios = ("", "")
            if name != "peer":
                ratios = (f"{peer['median'] / st['median']:.1f}x", f"{peer['p95'] / st['p95']:.1f}x")
            print(
                f"{room:<8}{labels[name]:<34}{st['median']:>10.3f}{st['p95']:>9.3f}{st['mean']:>9.3f}"
                f"{st['fail']:>6d}{st['per_level']:>10.3f}{ratios[0]:>15}{ratios[1]:>15}"
            )
            room = ""
        results.append(((rows, cols, boxes), peer["median"] / stats["ours"]["median"]))
    print()
    verdict = ", ".join(f"{r}x{c}/{b}: {ratio:.1f}x" for (r, c, b), ratio in results)
    goal = all(ratio >= 10 for _, ratio in results)
    print(f"goal: ours >= 10x faster at the same depth (median) -> {verdict} -> {'met' if goal else 'NOT met'}")


def time_resets(n: int) -> None:
    """Our own absolute figures: ``reset(seed=s)`` of the two registered Sokoban envs."""
    import gymnasium as gym

    import ragen_envs

    ids = ("ragen/Sokoban-v0", "ragen/LargeSokoban-v0")
    envs = {env_id: gym.make(env_id) for env_id in ids}
    seeds = [ragen_envs.EVAL_SEEDS[0] + i for i in range(n)]  # the 256 eval seeds first
    for env in envs.values():  # warm-up, on seeds outside the timed ones
        for seed in range(10**6, 10**6 + 3):
            env.reset(seed=seed)
    times = {env_id: [] for env_id in ids}
    retried = dict.fromkeys(ids, 0)
    for i, seed in enumerate(seeds):
        gc.collect()
        for env_id in ids if i % 2 == 0 else ids[::-1]:
            env = envs[env_id]
            start = time.perf_counter_ns()
            env.reset(seed=seed)
            times[env_id].append((time.perf_counter_ns() - start) / 1e6)
            retried[env_id] += env.unwrapped.level.seed != seed
    print(f"Reset, ours only (absolute figures, no peer): reset(seed=s) for s = {seeds[0]}..{seeds[-1]}")
    print("  includes level generation (with the retry rule for failed seeds) and the first observation text")
    print()
    header = f"{'env':<24}{'median ms':>10}{'p95 ms':>9}{'mean ms':>9}{'max ms':>9}{'retried seeds':>15}"
    print(header)
    print("-" * len(header))
    for env_id in ids:
        ms = times[env_id]
        print(
            f"{env_id:<24}{statistics.median(ms):>10.3f}{percentile(ms, 95):>9.3f}{statistics.fmean(ms):>9.3f}"
            f"{max(ms):>9.3f}{retried[env_id]:>15d}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, default=100, help="seeds per room configuration (default 100)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed of the comparison (default 0)")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"rooms to compare (default {DEFAULT_CONFIGS})")
    parser.add_argument("--gym-sokoban", default=None, help="path to gym_sokoban/ or its envs/room_utils.py")
    parser.add_argument("--resets", type=int, default=256, help="seeds for the reset table (default 256; 0: none)")
    args = parser.parse_args(argv)
    if args.levels < 1:
        parser.error("--levels must be >= 1")
    if args.resets < 0:
        parser.error("--resets must be >= 0")
    compare_generators(args)
    if args.resets:
        print()
        time_resets(args.resets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
