"""``python -m ragen_envs.starpo ENV_ID [options]`` = ``ragen train ENV_ID [options]``."""

import sys

from ..cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
