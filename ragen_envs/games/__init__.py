"""Pure game mechanics: integer actions, numpy state, no text, no gymnasium.

``bandit`` (two-armed bandit), ``sokoban`` (generator, dynamics, BFS solver),
``sokoban_pomdp`` (the player's window onto a Sokoban state), ``frozenlake`` (map generator,
slippery dynamics, finite-horizon policy), ``frozenlake_planner`` (optimal play under the turn
protocol's open-loop action sequences), ``lightsout`` (the reference's boards, GF(2) solver),
``countdown`` (instances from a seed, a safe exact evaluator, an exhaustive solver),
``rubikscube`` (the 2x2 cube, the reference's scrambles, an optimal distance table),
``game2048`` (the reference's spawns and rewards, an expectimax player) and ``sudoku`` (the
reference's puzzles and rewards, an exact solver).
"""
