"""ragen-envs: the RAGEN paper's environments on one multi-turn text protocol.

``import ragen_envs`` registers the ``ragen/*`` ids with Gymnasium and loads only gymnasium
and numpy::

    import gymnasium as gym
    import ragen_envs

    env = gym.make("ragen/Sokoban-v0")
    obs, info = env.reset(seed=ragen_envs.EVAL_SEEDS[0])
    obs, reward, terminated, truncated, info = env.step("<think>...</think><answer>Down</answer>")
"""

from .protocol import PROTOCOL_VERSION, parse_answer
from .registration import ENV_SPECS, EVAL_SEEDS, register_all
from .vector import make_vec

__version__ = "0.1.0"
__all__ = ["ENV_SPECS", "EVAL_SEEDS", "PROTOCOL_VERSION", "make_vec", "parse_answer", "__version__"]

register_all()
