"""``python -m ragen_envs.starpo ENV_ID [options]`` = ``ragen train ENV_ID [options]`` (the
entry ``torchrun ... -m ragen_envs.starpo`` starts), ``--resume`` included: ``python -m
ragen_envs.starpo --out DIR --resume`` continues the saved run under the same rules."""

import sys

from ..cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
