"""``ragen list``: the registered ids with a one-line description and their defaults."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("list", help="list environment ids", description=__doc__)
    p.set_defaults(run=run)


def run(args) -> int:
    import gymnasium as gym

    import ragen_envs

    for spec in ragen_envs.ENV_SPECS:
        env = gym.make(spec.id).unwrapped
        budget = env.budget
        defaults = ", ".join(f"{k}={v}" for k, v in spec.kwargs.items())
        print(f"{spec.id:26s} {spec.description}")
        print(f"{'':26s} budgets: {budget.max_turns} turns, {budget.max_actions} actions, "
              f"{budget.max_actions_per_turn} per turn; kwargs: {defaults}")
        env.close()
    return 0
