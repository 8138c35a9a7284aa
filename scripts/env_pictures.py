"""The README's environment pictures: every registered ``ragen/*`` id's first state at the first
evaluation seed (123), drawn by its own ``rgb_array`` renderer and shrunk to a thumbnail.

    python scripts/env_pictures.py            # (re)writes docs/img/env-<id>.png
    python scripts/env_pictures.py --check    # exit 1 if a picture is missing or out of date

``tests/test_readme.py`` runs the check, so a renderer change or a new id without its picture
fails the suite instead of leaving the front page stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"
SEED = 123
HEIGHT = 96  # thumbnail height in pixels; the width keeps the frame's aspect ratio


def picture_name(env_id: str) -> str:
    """``ragen/Sokoban-v0`` -> ``env-sokoban-v0.png`` (lower case, one file per id)."""
    return "env-" + env_id.split("/", 1)[1].lower() + ".png"


def registered_ids() -> list[str]:
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ids)

    return [env_id for env_id in gym.registry if env_id.startswith("ragen/")]


def thumbnail(env_id: str) -> np.ndarray:
    """The id's first frame at seed 123, resized to HEIGHT rows with Pillow's LANCZOS filter."""
    import gymnasium as gym
    from PIL import Image

    env = gym.make(env_id, render_mode="rgb_array")
    try:
        env.reset(seed=SEED)
        frame = env.render()
    finally:
        env.close()
    height, width = frame.shape[:2]
    size = (max(1, round(width * HEIGHT / height)), HEIGHT)
    return np.asarray(Image.fromarray(frame).resize(size, Image.LANCZOS))


def stale(env_id: str) -> str | None:
    """Why the stored picture of ``env_id`` is not its current thumbnail, or None if it is.

    Pixels are compared, not bytes (PNG encoders differ between Pillow versions), with a mean
    absolute difference of up to 2 levels allowed for resampling differences across builds."""
    from PIL import Image

    path = OUT / picture_name(env_id)
    if not path.exists():
        return f"{path.relative_to(ROOT)} is missing"
    stored = np.asarray(Image.open(path).convert("RGB")).astype(np.int16)
    fresh = thumbnail(env_id).astype(np.int16)
    if stored.shape != fresh.shape:
        return f"{path.relative_to(ROOT)} is {stored.shape[1]}x{stored.shape[0]}, the renderer now draws {fresh.shape[1]}x{fresh.shape[0]}"
    diff = float(np.abs(stored - fresh).mean())
    if diff > 2.0:
        return f"{path.relative_to(ROOT)} differs from the renderer's frame (mean abs diff {diff:.1f})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if a picture is missing or stale")
    args = parser.parse_args(argv)
    if args.check:
        problems = [p for p in (stale(env_id) for env_id in registered_ids()) if p]
        for problem in problems:
            print(f"env_pictures: {problem} (run: python scripts/env_pictures.py)", file=sys.stderr)
        return 1 if problems else 0
    from PIL import Image

    OUT.mkdir(parents=True, exist_ok=True)
    for env_id in registered_ids():
        path = OUT / picture_name(env_id)
        Image.fromarray(thumbnail(env_id)).save(path, optimize=True)
        print(f"{env_id} -> {path.relative_to(ROOT)} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
