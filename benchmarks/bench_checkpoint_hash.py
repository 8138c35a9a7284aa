"""sha256 of checkpoint files: seconds per GiB, one file and several at once (BENCHMARKS.md#checkpoint-digests).

    PYTHONPATH=. python benchmarks/bench_checkpoint_hash.py [--gib 1] [--files 3]

Writes ``--files`` files of ``--gib`` GiB each under a temporary directory (in the page
cache, as right after a checkpoint is written), then times plain reading, one file's
digest, and the checkpoint's parallel digests (``ragen_envs.starpo.checkpoint``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from ragen_envs.starpo import checkpoint as C


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=3)
    args = parser.parse_args()
    size = int(args.gib * (1 << 30))
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
        paths = []
        block = os.urandom(1 << 24)
        for i in range(args.files):
            p = Path(d) / f"f{i}.bin"
            with open(p, "wb") as f:
                for _ in range(size // len(block)):
                    f.write(block)
            paths.append(p)
        gib = size / (1 << 30)

        t = time.perf_counter()
        with open(paths[0], "rb", buffering=0) as f:
            buf = bytearray(1 << 20)
            while f.readinto(buf):
                pass
        print(f"read only:                 {(time.perf_counter() - t) / gib:.2f} s/GiB")
        t = time.perf_counter()
        C.sha256_file(paths[0])
        print(f"sha256, one file:          {(time.perf_counter() - t) / gib:.2f} s/GiB")
        t = time.perf_counter()
        C._digests(paths)
        total = gib * len(paths)
        print(f"sha256, {len(paths)} files in parallel: {(time.perf_counter() - t) / total:.2f} s/GiB "
              f"({total:.1f} GiB in {time.perf_counter() - t:.1f} s, {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
