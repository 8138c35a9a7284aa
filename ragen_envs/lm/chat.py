"""Chat formatting for token-in/token-out multi-turn play, shared by the trainer and the
``hf:`` agent: the tokenizer as saved, and :class:`ChatFormat` (the token ids a chat template
appends for each new message, so a history is never decoded and tokenized again)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ChatFormat", "load_tokenizer"]


def load_tokenizer(path: str | Path):
    """The tokenizer saved at ``path`` (a folder or a hub id), checked for a chat template,
    with a pad token (the eos token when it has none).

    A directory with a ``tokenizer.json`` is loaded exactly as saved
    (``PreTrainedTokenizerFast``): ``AutoTokenizer`` may rebuild the tokenizer class of the
    model type (e.g. Qwen2's) with that class's own pre-tokenizer, which would tokenize
    differently from what a custom tokenizer was trained and used with. Raises ValueError
    with one readable line when nothing loads or there is no chat template.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    local = Path(path).expanduser()
    try:
        if (local / "tokenizer.json").is_file():
            tok = PreTrainedTokenizerFast.from_pretrained(str(local))
        else:
            tok = AutoTokenizer.from_pretrained(str(local) if local.exists() else str(path))
    except (OSError, ValueError) as exc:
        lines = str(exc).strip().splitlines()
        raise ValueError(f"cannot load a tokenizer from {str(path)!r}: {lines[0] if lines else type(exc).__name__}") from None
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"the tokenizer at {str(path)!r} has no chat template; a chat model is needed")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


class ChatFormat:
    """Incremental chat-template tokenisation for token-in/token-out rollouts.

    The sequence of a trajectory is ``first(system, obs_1)`` + reply_1 + ``append(...)`` +
    reply_2 + ... where each reply is the *sampled ids* ending with the end-of-turn token.
    :meth:`append` returns the ids of the text the template adds after reply k:
    ``template(messages + [user obs], gen) - template(messages[:-1], gen) - content - eot``,
    after checking that the template renders an assistant message as generation prompt +
    content + end-of-turn token + tail, and that adding a message only appends text.

    ``prefix`` is the forced start of every reply (``"<think>"`` as the reference, or ""):
    it is part of the prompt (never trained on) and of the reply text the env receives.
    """

    def __init__(self, tokenizer, prefix: str = "", eot_token: str | None = None) -> None:
        self.tok = tokenizer
        self.prefix = prefix
        self.eot_token = eot_token or tokenizer.eos_token
        if self.eot_token is None:
            raise ValueError("the tokenizer has no eos token; pass eot_token= (e.g. '<|im_end|>')")
        self.eot_id = tokenizer.convert_tokens_to_ids(self.eot_token)
        if self.eot_id is None or self.eot_id == getattr(tokenizer, "unk_token_id", -1):
            raise ValueError(f"end-of-turn token {self.eot_token!r} is not in the vocabulary")
        self.prefix_ids = self.encode(prefix) if prefix else []

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def first(self, system: str, observation: str) -> list[int]:
        """Ids of ``[system, user(observation)]`` with the generation prompt and the prefix."""
        text = self.render(self._start(system, observation), True)
        return self.encode(text) + self.prefix_ids

    def append(self, messages: list[dict[str, str]], observation: str) -> list[int]:
        """Ids the template adds after the last assistant message of ``messages`` (whose
        content is prefix + decoded reply) for a new user ``observation``, generation prompt
        and prefix included. Raises ValueError when the template is not append-only."""
        if not messages or messages[-1]["role"] != "assistant":
            raise ValueError("append() expects the conversation to end with the assistant reply")
        before_reply = self.render(messages[:-1], True) + messages[-1]["content"] + self.eot_token
        with_reply = self.render(messages, False)
        after = self.render(messages + [{"role": "user", "content": observation}], True)
        if not with_reply.startswith(before_reply) or not after.startswith(with_reply):
            raise ValueError(
                "the chat template is not append-only (it rewrites earlier messages or does not end an "
                "assistant message with the end-of-turn token); token-in/token-out rollouts need one "
                "(ChatML / Qwen2.5 style templates are)"
            )
        return self.encode(after[len(before_reply):]) + self.prefix_ids

    @staticmethod
    def _start(system: str, observation: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": system}] if system else []
        return msgs + [{"role": "user", "content": observation}]
