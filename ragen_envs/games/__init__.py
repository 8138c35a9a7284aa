"""Pure game mechanics: integer actions, numpy state, no text, no gymnasium.

``bandit`` (two-armed bandit), ``sokoban`` (generator, dynamics, BFS solver), ``frozenlake``
(map generator, slippery dynamics, finite-horizon policy) and ``frozenlake_planner`` (optimal
play under the turn protocol's open-loop action sequences).
"""
