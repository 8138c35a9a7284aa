"""How a trained model talks to the environments: the protocol settings saved beside it.

``ragen sft``, ``ragen train`` and the demo write ``ragen_protocol.json`` into every model
folder they save (the final ``DIR/model`` and each checkpoint's ``actor/``); ``ragen eval
--agent hf:DIR`` and ``ragen serve hf:DIR`` read it, so a model is evaluated as it was
trained (flags still override). Without the file a folder is an ordinary chat model.

Fields:

- ``env_id``, ``env_kwargs``: the environment and constructor kwargs of training (``think``,
  ``max_actions_per_turn``, ...); ``think`` is ``env_kwargs.get("think", True)``; never an
  operator-only keyword (``ragen_envs.envs.limits.OPERATOR_ONLY``: a remote backend, a render
  mode): those are left out when saved and refused when read;
- ``reply_prefix``: the text forced at the start of every reply (``"<think>"``, or
  ``"<answer>"`` with think off; ``""`` when nothing was forced): it ends the prompt and is
  put back in front of the decoded reply;
- ``max_new_tokens``: the reply cap per turn;
- ``eot_token``: the token that ends a reply (the chat format's end of turn);
- ``temperature``: the sampling temperature of the trainer's evaluation;
- ``history``: ``"tokens"`` — earlier turns are fed back as the exact tokens sampled
  (token-in/token-out, as the trainer plays), or ``"messages"`` — the chat history re-rendered
  from text with replies rewritten as the reference does;
- ``context_window_mode``, ``max_context_window``: what each turn's prompt held in training
  (the trainer's RAGEN-2 context modes, :mod:`ragen_envs.protocol.context`; ``"full"`` / -1 in
  files written before they were recorded), so that ``ragen eval`` plays the model the same way.

Plain JSON, no torch needed to read it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..envs.limits import OPERATOR_ONLY, validate_env_kwargs
from ..protocol.jsonsafe import loads_untrusted

__all__ = ["SETTINGS_FILE", "HISTORY_MODES", "ProtocolSettings", "save_settings", "load_settings"]

SETTINGS_FILE = "ragen_protocol.json"
HISTORY_MODES = ("tokens", "messages")
_FORMAT = "ragen-envs/protocol-settings"
_VERSION = 1


@dataclass(frozen=True)
class ProtocolSettings:
    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    reply_prefix: str = ""
    max_new_tokens: int = 400
    eot_token: str | None = None
    temperature: float = 0.5
    history: str = "tokens"
    written_by: str = ""
    context_window_mode: str = "full"
    max_context_window: int = -1

    def __post_init__(self) -> None:
        if not isinstance(self.env_id, str) or not self.env_id:
            raise ValueError(f"env_id must be a non-empty string, got {self.env_id!r}")
        if not isinstance(self.env_kwargs, dict):
            raise ValueError(f"env_kwargs must be an object, got {self.env_kwargs!r}")
        if not isinstance(self.reply_prefix, str):
            raise ValueError(f"reply_prefix must be a string, got {self.reply_prefix!r}")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.eot_token is not None and not isinstance(self.eot_token, str):
            raise ValueError(f"eot_token must be a string or null, got {self.eot_token!r}")
        if (isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float))
                or not math.isfinite(self.temperature) or self.temperature < 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.history not in HISTORY_MODES:
            raise ValueError(f"history must be one of {HISTORY_MODES}, got {self.history!r}")
        from ..protocol.context import check_context_window

        check_context_window(self.context_window_mode, self.max_context_window)

    @property
    def think(self) -> bool:
        return bool(self.env_kwargs.get("think", True))

    def to_dict(self) -> dict[str, Any]:
        return {"format": _FORMAT, "version": _VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ProtocolSettings":
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        if data.get("format") != _FORMAT:
            raise ValueError(f"not a protocol-settings file (format {data.get('format')!r})")
        version = data.get("version")
        if not isinstance(version, int) or version > _VERSION:
            raise ValueError(f"version {version!r} is newer than this ragen-envs reads ({_VERSION}); upgrade ragen-envs")
        known = {f for f in cls.__dataclass_fields__}
        if "env_id" not in data:
            raise ValueError("env_id is missing")
        # a model folder is a file from elsewhere: its env kwargs pass the gate every file's do
        # (no operator-only keyword such as a remote backend's base_url; docs/protocol.md)
        validate_env_kwargs(data["env_id"], data.get("env_kwargs", {}), source="env_kwargs")
        return cls(**{k: v for k, v in data.items() if k in known})

    def describe(self) -> str:
        """One line for the console: what an evaluation of this model uses."""
        kw = ", ".join(f"{k}={v!r}" for k, v in sorted(self.env_kwargs.items()))
        return (f"trained on {self.env_id}" + (f" ({kw})" if kw else "")
                + f"; reply prefix {self.reply_prefix!r}, reply cap {self.max_new_tokens} tokens, "
                  f"temperature {self.temperature:g}, history {self.history}"
                + ("" if self.context_window_mode == "full" else
                   f", context window {self.context_window_mode} (max_context_window {self.max_context_window})"))


def save_settings(model_dir: str | Path, settings: ProtocolSettings) -> Path:
    """Write ``model_dir/ragen_protocol.json`` (atomically: a reader never sees half a file)."""
    path = Path(model_dir) / SETTINGS_FILE
    # the operator's own settings (a remote backend, a render mode) are not the model's: a folder
    # never carries them, and a reader refuses a folder that does (from_dict)
    kept = {k: v for k, v in settings.env_kwargs.items() if k not in OPERATOR_ONLY}
    if kept != settings.env_kwargs:
        settings = replace(settings, env_kwargs=kept)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(settings.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load_settings(model_dir: str | Path) -> ProtocolSettings | None:
    """The settings saved in ``model_dir``, or None when the folder has none (or is a hub id).

    Raises ValueError with one readable line for a file that exists but cannot be used.
    """
    path = Path(str(model_dir)).expanduser() / SETTINGS_FILE
    if not path.is_file():
        return None
    try:
        return ProtocolSettings.from_dict(loads_untrusted(path.read_bytes()))
    except (TypeError, ValueError) as exc:  # UntrustedJSONError is a ValueError
        raise ValueError(f"{path}: unreadable protocol settings ({exc})") from None
