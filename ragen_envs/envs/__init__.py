"""The registered Gymnasium environments: a game + its vocabulary + the protocol."""

from .bandit import BanditEnv
from .base import CHARSET, TextGameEnv
from .countdown import CountdownEnv
from .frozenlake import FrozenLakeEnv
from .lightsout import LightsOutEnv
from .sokoban import SokobanEnv
from .sokoban_pomdp import SokobanPOMDPEnv
from .space import UnicodeText

__all__ = ["BanditEnv", "CHARSET", "CountdownEnv", "FrozenLakeEnv", "LightsOutEnv", "SokobanEnv", "SokobanPOMDPEnv", "TextGameEnv",
           "UnicodeText"]
