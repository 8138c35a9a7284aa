"""Pure game mechanics: integer actions, numpy state, no text, no gymnasium.

``bandit`` (two-armed bandit), ``sokoban`` (generator, dynamics, BFS solver),
``sokoban_pomdp`` (the player's window onto a Sokoban state), ``frozenlake`` (map generator,
slippery dynamics, finite-horizon policy), ``frozenlake_planner`` (optimal play under the turn
protocol's open-loop action sequences), ``lightsout`` (the reference's boards, GF(2) solver)
and ``countdown`` (instances from a seed, a safe exact evaluator, an exhaustive solver).
"""
