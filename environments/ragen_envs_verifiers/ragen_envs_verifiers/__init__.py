"""The verifiers plugin package of ragen-envs: ``vf-eval ragen-envs-verifiers`` imports it by
id and takes the taskset, env and harness from ``__all__``. The code lives in
:mod:`ragen_envs.integrations.verifiers`."""

from ragen_envs.integrations.verifiers import RagenChatHarness, RagenEnv, RagenTaskset, load_environment

__all__ = ["RagenTaskset", "RagenEnv", "RagenChatHarness", "load_environment"]
