"""The registered Gymnasium environments: a game + its vocabulary + the protocol."""

from .bandit import BanditEnv
from .base import CHARSET, TextGameEnv
from .frozenlake import FrozenLakeEnv
from .sokoban import SokobanEnv
from .space import UnicodeText

__all__ = ["BanditEnv", "CHARSET", "FrozenLakeEnv", "SokobanEnv", "TextGameEnv", "UnicodeText"]
