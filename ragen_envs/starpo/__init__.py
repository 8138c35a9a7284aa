"""StarPO / StarPO-S: the RAGEN paper's multi-turn RL trainer, lean and readable.

- :mod:`.core` — the math (advantages, losses, KL, entropy, the uncertainty filter);
- :mod:`.policy` — model, tokenizer, value head; sampling and scoring;
- :mod:`.rollout` — token-in/token-out multi-turn rollouts through ``ragen_envs.make_vec``;
- :mod:`.sft` — supervised fine-tuning on expert trajectories;
- :mod:`.diagnostics` — Echo Trap signals, logging, plots;
- :mod:`.config` — one dataclass with the paper's defaults and the presets;
- :mod:`.trainer` — the loop; :mod:`.checkpoint` — save / resume;
- :mod:`.demo` — the README's demo (SFT + StarPO-S + evaluation on a CPU).

Needs the ``train`` extra (torch, transformers). ``python -m ragen_envs.starpo ENV_ID`` or
``ragen train ENV_ID`` runs training; see ``docs/training.md``.
"""

from .config import PRESETS, StarPOConfig, make_config

__all__ = ["PRESETS", "StarPOConfig", "make_config"]
