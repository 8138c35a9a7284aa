"""Whole multi-turn episodes inside TRL's ``GRPOTrainer`` (the ``trl`` extra, trl 1.16), by
either of TRL's two multi-turn paths: a ``rollout_func`` (token-in/token-out, the protocol's
own chat layout; below) or an ``environment_factory`` (TRL's tool-calling loop: one tool
``act(reply)`` per env turn; :func:`make_environment_factory`, further down). A model must
call the tool before that loop can teach it anything: :class:`ToolCallFormat` /
:func:`tool_transcript` lay episodes out as the loop renders them, for ``ragen sft --format
tools``, and :func:`play_tool_episodes` plays the loop locally (its held-out check).

The rollout-function path:

TRL hands a ``rollout_func`` nothing but the prompt list (each prompt already repeated
``num_generations`` times, consecutively). So each prompt *is* the episode's identity:
:func:`episode_prompt` writes ``ragen-episode:{"env_id": ..., "seed": ..., "noise_seed": ...,
"env_kwargs": ...}`` and :func:`make_dataset` builds a dataset of such prompts, one row per
initial state. The ``num_generations`` copies of a row are one group: same layout seed, same
noise seed, so the same initial state and, with a noise seed, the same slips.

:func:`make_rollout_func` returns ``rollout_func(prompts, trainer)`` that plays every episode
through the exact protocol, token-in/token-out (as :func:`ragen_envs.starpo.rollout.collect_rollouts`):

* ``prompt_ids`` = the trainer's chat template over ``[system, user(first observation)]``
  with the generation prompt and the forced reply prefix (``"<think>"`` by default);
* ``completion_ids`` = reply_1 + template increment + reply_2 + ...: each reply is exactly the
  sampled ids (ending with the end-of-turn token), each increment is what the chat template
  appends for the next observation (:class:`~ragen_envs.lm.chat.ChatFormat`);
* ``env_mask`` = 1 exactly on the sampled ids, 0 on every template / observation / prefix
  token and on an end-of-turn token closing a reply cut at ``max_new_tokens``;
* ``logprobs`` = the sampling log-probs from vLLM (0.0 on env tokens, which the mask drops)
  or None with the CPU sampler (TRL then skips the importance-sampling correction: the
  sampler runs the trainer's own weights);
* ``env_return`` (the episode's summed rewards: game rewards + format penalties),
  ``env_success`` and ``env_turns``: TRL forwards them to the reward functions;
  :func:`env_return_reward` is the reward function that returns ``env_return``.

The env receives the decoded reply (prefix + text) unchanged, so parsing, the format penalty
and budgets are the env's. Generation: the project's :class:`~ragen_envs.lm.sampler.MultiTurnSampler`
(KV cache kept across turns) on the trainer's model; with ``use_vllm=True`` and
``vllm_mode="server"``, TRL's vLLM client (token ids in, token ids + log-probs out).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..lm.chat import ChatFormat
from ..models import CHATML_RESPONSE_TEMPLATE, CHATML_TEMPLATE
from .episodes import PROMPT_TAG, EpisodeSpec, ProtocolEpisode, episode_prompt, parse_episode_prompt

__all__ = [
    "PROMPT_TAG",
    "EpisodeSpec",
    "episode_prompt",
    "parse_episode_prompt",
    "make_dataset",
    "make_rollout_func",
    "env_return_reward",
    "play_episodes",
    "ProtocolEpisode",
    "TOOL_CHAT_TEMPLATE",
    "TOOL_RESPONSE_TEMPLATE",
    "install_tool_chat_template",
    "RagenToolEnv",
    "make_environment_factory",
    "make_environment_dataset",
    "ToolCallFormat",
    "tool_transcript",
    "play_tool_episodes",
    "tool_phrases",
]

def make_dataset(env_id: str, seeds: Sequence[int], noise_seeds: Sequence[int | None] | None = None,
                 env_kwargs: Mapping[str, Any] | None = None):
    """A ``datasets.Dataset`` with one ``prompt`` per initial state (plus ``seed`` /
    ``noise_seed`` columns for reading; only ``prompt`` reaches the rollout function)."""
    from datasets import Dataset

    from ..envs.base import check_seed

    seeds = [check_seed("seed", s) for s in seeds]
    noise = list(noise_seeds) if noise_seeds is not None else [None] * len(seeds)
    if len(noise) != len(seeds):
        raise ValueError(f"noise_seeds has {len(noise)} entries for {len(seeds)} seeds")
    noise = [None if n is None else check_seed("noise_seed", n) for n in noise]
    prompts = [episode_prompt(env_id, s, n, env_kwargs) for s, n in zip(seeds, noise)]
    return Dataset.from_dict({"prompt": prompts, "seed": seeds, "noise_seed": [-1 if n is None else n for n in noise]})


# ---------------------------------------------------------------------------------- playing
# A generator gets the live episodes' token ids and returns, for each, the reply ids, whether
# the reply ended with the end-of-turn token, and the sampling log-prob of each id (or None).
Generator = Callable[[Sequence[Sequence[int]]], list[tuple[list[int], bool, list[float] | None]]]


def play_episodes(specs: Sequence[EpisodeSpec], generate: Generator, fmt: ChatFormat) -> list[ProtocolEpisode]:
    """Play one episode per spec, all live episodes batched into one ``generate`` call per turn."""
    eps: list[ProtocolEpisode] = []
    try:
        for spec in specs:
            eps.append(ProtocolEpisode(spec, fmt))
        live = list(eps)
        while live:
            outs = generate([e.token_ids for e in live])
            live = [e for e, (ids, stopped, lps) in zip(live, outs) if not e.add_reply(ids, stopped, lps)]
        return eps
    finally:
        for e in eps:
            e.close()


def _sampler_generator(model, fmt: ChatFormat, pad_id: int, max_new_tokens: int, temperature: float, top_p: float,
                       generator) -> Generator:
    from ..lm.sampler import MultiTurnSampler

    sampler = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=pad_id, max_new_tokens=max_new_tokens,
                               temperature=temperature, generator=generator, top_p=top_p)

    def generate(prompts):
        return [(ids, stopped, None) for ids, stopped in sampler.generate(prompts)]

    return generate


def _vllm_generator(client, fmt: ChatFormat, max_new_tokens: int, temperature: float, top_p: float) -> Generator:
    """TRL's ``VLLMClient.generate`` on token ids; stops at the end-of-turn token."""

    def generate(prompts):
        out = client.generate(prompts=[list(p) for p in prompts], n=1, temperature=temperature, top_p=top_p,
                              max_tokens=max_new_tokens, logprobs=0,
                              generation_kwargs={"stop_token_ids": [fmt.eot_id], "skip_special_tokens": False})
        res = []
        for ids, lps in zip(out["completion_ids"], out["logprobs"]):
            ids = list(ids)
            lp = [float("nan") if x is None or x[0] is None else float(x[0]) for x in lps]
            stopped = bool(ids) and ids[-1] == fmt.eot_id
            if not stopped and len(ids) < max_new_tokens:  # vLLM dropped the stop token: put it back
                ids, lp, stopped = ids + [fmt.eot_id], lp + [float("nan")], True
            res.append((ids, stopped, lp))
        return res

    return generate


def make_rollout_func(*, prefix: str = "<think>", max_new_tokens: int = 100, temperature: float = 1.0,
                      top_p: float = 1.0, seed: int = 0, eot_token: str | None = None,
                      on_episodes: Callable[[list[ProtocolEpisode]], None] | None = None):
    """``rollout_func(prompts, trainer) -> dict`` for ``GRPOTrainer(rollout_func=...)``.

    ``prefix``: the forced start of every reply (part of the prompt ids, never trained;
    ``"<think>"`` as the reference, ``""`` for ``think=False`` envs). ``max_new_tokens``: the
    cap of one reply (the whole episode is as long as the env's turn budget makes it).
    ``seed``: the CPU sampler's ``torch.Generator`` seed (one stream per process, from
    ``SeedSequence([seed, process_index])``; advanced by each call).
    ``eot_token``: the end-of-turn token (default the tokenizer's eos, e.g. ``<|im_end|>``).
    ``on_episodes`` is called with the played episodes (logging, tests).
    """
    import torch

    gens: dict[int, torch.Generator] = {}

    def rollout_func(prompts: list, trainer) -> dict[str, list]:
        rank = int(getattr(getattr(trainer, "accelerator", None), "process_index", 0))
        if rank not in gens:  # one stream per process: ranks sample their prompts independently
            gens[rank] = torch.Generator().manual_seed(int(np.random.SeedSequence([int(seed), rank]).generate_state(1)[0]))
        gen = gens[rank]
        specs = [parse_episode_prompt(p) for p in prompts]
        tok = trainer.processing_class
        tok = getattr(tok, "tokenizer", tok)  # a processor wraps its tokenizer
        fmt = ChatFormat(tok, prefix, eot_token)
        if getattr(trainer, "use_vllm", False):
            vgen = getattr(trainer, "vllm_generation", None)
            if getattr(vgen, "mode", None) != "server" or getattr(vgen, "vllm_client", None) is None:
                raise ValueError("ragen rollouts support use_vllm=True only with vllm_mode='server' (TRL's vLLM client)")
            generate = _vllm_generator(vgen.vllm_client, fmt, max_new_tokens, temperature, top_p)
            eps = play_episodes(specs, generate, fmt)
        else:
            model = trainer.accelerator.unwrap_model(trainer.model)
            pad = tok.pad_token_id if tok.pad_token_id is not None else fmt.eot_id
            was_training = model.training
            model.eval()  # no dropout while sampling: the replies come from the weights TRL scores
            try:
                generate = _sampler_generator(model, fmt, pad, max_new_tokens, temperature, top_p, gen)
                eps = play_episodes(specs, generate, fmt)
            finally:
                model.train(was_training)
        if on_episodes is not None:
            on_episodes(eps)
        logprobs = [e.logprobs for e in eps]
        return {
            "prompt_ids": [e.prompt_ids for e in eps],
            "completion_ids": [e.completion_ids for e in eps],
            "logprobs": None if any(lp is None for lp in logprobs) else logprobs,
            "env_mask": [e.env_mask for e in eps],
            "env_return": [e.episode_return for e in eps],
            "env_success": [float(e.success) for e in eps],
            "env_turns": [len(e.rewards) for e in eps],
        }

    return rollout_func


def env_return_reward(completions: list, env_return: list[float] | None = None, **kwargs) -> list[float]:
    """A TRL reward function: the episode return the rollout function computed (the sum of
    the env's per-turn rewards, format penalties included)."""
    if env_return is None:
        raise ValueError("env_return_reward needs the 'env_return' field: use it with make_rollout_func's rollout_func")
    if len(env_return) != len(completions):
        raise ValueError(f"{len(env_return)} returns for {len(completions)} completions")
    return [float(r) for r in env_return]


# ------------------------------------------------------------------------ environment_factory
# TRL's other multi-turn path: ``GRPOTrainer(environment_factory=cls)``. TRL builds instances
# with ``cls()`` (one per rollout of a batch, pooled and reused across batches), calls
# ``reset(**row)`` with the whole dataset row, exposes every public method except
# ``reset`` / ``get_reward`` as a tool (the schema from its signature and Google docstring),
# runs the tool calls it parses from each reply (a raising tool's message becomes the tool
# result ``{'error': ...}``), appends the results as ``tool`` messages (masked out of the
# loss) and generates again until a reply calls no tool (or ``max_tool_calling_iterations``
# / ``max_completion_length`` stop it); then it calls ``get_reward()`` once per rollout.

# The chat template for local ChatML models: the project's own (``ragen_envs.models.CHATML_TEMPLATE``,
# which the tiny models are built with), Qwen2.5's tool layout without its default system
# prompt. Without tools or tool messages it renders exactly the plain ChatML layout (so the
# rollout-function path sees the same ids). With tools, the schemas follow the system prompt
# in the system message; a call is ``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``
# (the layout Qwen2.5 / Hermes models were trained on); a run of tool results is one user
# message of ``<tool_response>\n{result}\n</tool_response>`` blocks, each result text unchanged.
# Appending a message only appends text (TRL needs a prefix-preserving template for the tool
# loop). TOOL_RESPONSE_TEMPLATE is how transformers' ``parse_response`` reads a reply in it.
TOOL_CHAT_TEMPLATE = CHATML_TEMPLATE
TOOL_RESPONSE_TEMPLATE = CHATML_RESPONSE_TEMPLATE


def install_tool_chat_template(tokenizer):
    """Give a ChatML tokenizer (any ``<|im_start|>`` / ``<|im_end|>`` vocabulary) :data:`TOOL_CHAT_TEMPLATE`
    and the matching ``response_template``, so TRL's ``environment_factory`` path accepts it
    and parses its tool calls. Returns the tokenizer.

    TRL refuses a template that cannot render a tool call and a tool result
    (``trl.chat_template_utils.supports_tool_calling``) and parses calls only for the
    templates it knows or a tokenizer with its own ``response_template``. The project's tiny
    models are built with both (``ragen_envs.models.build_tiny_tokenizer``); this is for a
    ChatML tokenizer saved without them (a tiny model built before they existed, another
    ChatML model). Models whose template TRL already knows (Qwen2.5 / Qwen3 / Llama 3.x ...)
    need nothing.
    """
    vocab = tokenizer.get_vocab()
    missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in vocab]
    if missing:
        raise ValueError(f"the tool chat template is ChatML: the tokenizer lacks {missing}")
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = TOOL_RESPONSE_TEMPLATE
    return tokenizer


_ACT_DOC = """Play one turn: the environment reads `reply` exactly as it reads a whole chat reply and answers with its next message.

Args:
    reply: Your whole reply for this turn, in the format the instructions ask for: {fmt}

Returns:
    The environment's next message: the turn's reward and, unless the episode is over, the next state.
"""


class RagenToolEnv:
    """One ``ragen/*`` environment as TRL ``environment_factory`` instance; make the class with
    :func:`make_environment_factory` (it fixes ``env_id`` and ``env_kwargs``).

    The protocol as tool calls: every ``act(reply)`` call is one env turn, ``reply`` goes to
    ``env.step`` unchanged (so the env's parser, budgets and format penalty apply) and the
    env's observation text, unchanged, is the tool result. :meth:`get_reward` is the episode
    return (game rewards + format penalties); the turns a rollout left unplayed (it stopped
    calling ``act`` before the episode ended) are played as empty replies, each charged the
    format penalty, so stopping early never beats answering.
    """

    env_id: str = ""
    env_kwargs: Mapping[str, Any] = {}

    def __init__(self) -> None:
        if not self.env_id:
            raise TypeError("make the class with make_environment_factory(env_id, **env_kwargs)")
        import gymnasium as gym

        self._env = gym.make(self.env_id, **dict(self.env_kwargs))
        self._started = False
        self._done = False
        self._system_prompt = ""
        self._observations: list[str] = []
        self._replies: list[str] = []
        self._rewards: list[float] = []
        self._infos: list[dict] = []
        self._unplayed = 0
        self._seed: int | None = None
        self._noise_seed: int | None = None

    # ----------------------------------------------------------------- TRL's contract
    def reset(self, seed: int | None = None, noise_seed: int | None = None, prompt: Any = None, **columns: Any) -> str:
        """Start the episode of a dataset row (TRL passes the whole row as keywords).

        ``seed``: the layout seed (None: drawn by the env's own generator); ``noise_seed``:
        the noise stream (None or -1: the layout seed's). Other columns are ignored. Returns
        the text TRL appends to the prompt's last (empty) user message: the env's first
        observation, unchanged, when the prompt's system message is the env's system prompt
        (:func:`make_environment_dataset`); the system prompt followed by that observation
        when the prompt has no system message (TRL's placeholder prompt when there is no
        dataset, or a dataset of seeds only).
        """
        self._started = False  # a refused row leaves no episode to call act on
        options = None if noise_seed is None or noise_seed == -1 else {"noise_seed": noise_seed}
        obs, info = self._env.reset(seed=seed, options=options)
        system = info["system_prompt"]
        has_system = _check_prompt(prompt, system)
        self._started, self._done, self._system_prompt = True, False, system
        self._observations, self._replies, self._rewards, self._infos = [obs], [], [], []
        self._unplayed = 0
        self._seed, self._noise_seed = seed, None if noise_seed is None or noise_seed == -1 else noise_seed
        return obs if has_system else system + obs

    def _act(self, reply: str) -> str:
        if not self._started:
            raise RuntimeError("no episode: TRL calls reset() before the first tool call")
        if self._done:
            raise RuntimeError(
                f"the episode is over ({len(self._rewards)} turns played): act takes no more replies; end your turn"
            )
        if not isinstance(reply, str):
            raise TypeError(f"reply must be a string (the whole reply text), got {type(reply).__name__}")
        obs, reward, terminated, truncated, info = self._env.step(reply)
        self._replies.append(reply)
        self._rewards.append(float(reward))
        self._infos.append(info)
        self._observations.append(obs)
        self._done = bool(terminated or truncated)
        return obs

    def get_reward(self) -> float:
        """The episode return: the sum of the env's per-turn rewards (format penalties
        included), after playing any turns the rollout left unplayed as empty replies."""
        if not self._started:
            raise RuntimeError("no episode: reset() was never called")
        while not self._done:
            self._act("")
            self._unplayed += 1
        return float(sum(self._rewards))

    # ------------------------------------------------ read-only record (not tools: properties)
    @property
    def system_prompt(self) -> str:
        return self._system_prompt

    @property
    def seed(self) -> int | None:
        """The layout seed of the episode (the row's ``seed``), for replaying it."""
        return self._seed

    @property
    def noise_seed(self) -> int | None:
        """The noise stream of the episode (None: the layout seed's)."""
        return self._noise_seed

    @property
    def observations(self) -> list[str]:
        """The first observation, then each turn's observation (the tool results)."""
        return list(self._observations)

    @property
    def replies(self) -> list[str]:
        """The text of each turn, as ``env.step`` received it (unplayed turns are "")."""
        return list(self._replies)

    @property
    def rewards(self) -> list[float]:
        return list(self._rewards)

    @property
    def infos(self) -> list[dict]:
        return list(self._infos)

    @property
    def unplayed_turns(self) -> int:
        """Turns :meth:`get_reward` played as empty replies."""
        return self._unplayed

    @property
    def done(self) -> bool:
        return self._done

    @property
    def success(self) -> bool:
        return bool(self._infos[-1].get("success", False)) if self._infos else False

    @property
    def episode_return(self) -> float:
        return float(sum(self._rewards))


def _check_prompt(prompt: Any, system: str) -> bool:
    """Whether the row's conversational prompt carries the env's system prompt; raises when
    the env's text could not be what the model sees."""
    if prompt is None:
        return False
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    if not isinstance(prompt, (list, tuple)) or not prompt or not all(isinstance(m, Mapping) for m in prompt):
        raise ValueError("environment_factory rows need a conversational prompt (a list of messages): "
                         "use make_environment_dataset")
    last = prompt[-1]
    if last.get("role") != "user" or last.get("content"):
        raise ValueError("the prompt's last message must be an empty user message: TRL appends the env's "
                         "observation to it (make_environment_dataset writes such prompts)")
    systems = [m for m in prompt if m.get("role") == "system"]
    if not systems:
        return False
    if prompt[0].get("role") != "system" or len(systems) > 1 or prompt[0].get("content") != system:
        raise ValueError(f"the prompt's system message must be the env's system prompt {system!r} "
                         "(make_environment_dataset), or be left out")
    return True


def _class_name(env_id: str) -> str:
    words = re.split(r"[^0-9A-Za-z]+", env_id.split("/")[-1])
    return "Ragen" + "".join(w[:1].upper() + w[1:] for w in words if w)


def make_environment_factory(env_id: str, **env_kwargs: Any) -> type[RagenToolEnv]:
    """The class to pass as ``GRPOTrainer(environment_factory=...)`` for ``env_id`` built with
    ``env_kwargs`` (e.g. ``max_turns=3``): a :class:`RagenToolEnv` subclass named after the id
    (``RagenSokobanV0``; TRL logs ``get_reward`` under that name) with one tool,
    ``act(reply: str) -> str``. The env is built once here, so a bad id or keyword fails now."""
    import gymnasium as gym

    from ..protocol.prompt import format_prompt

    if env_id not in gym.registry:
        raise ValueError(f"unknown environment {env_id!r}")
    env = gym.make(env_id, **env_kwargs)
    think = bool(getattr(env.unwrapped, "think", True))
    env.close()

    def act(self, reply: str) -> str:
        return self._act(reply)

    act.__doc__ = _ACT_DOC.format(fmt=format_prompt(think))
    name = _class_name(env_id)
    act.__qualname__ = f"{name}.act"
    return type(name, (RagenToolEnv,), {"env_id": env_id, "env_kwargs": dict(env_kwargs), "act": act,
                                        "__module__": __name__, "__doc__": RagenToolEnv.__doc__})


def make_environment_dataset(env_id: str, seeds: Sequence[int], noise_seeds: Sequence[int | None] | None = None,
                             **env_kwargs: Any):
    """A ``datasets.Dataset`` for the ``environment_factory`` path, one row per initial state:
    ``prompt`` = ``[system(the env's system prompt), user("")]`` (TRL appends the first
    observation that ``reset`` returns to the empty user message), ``seed`` and ``noise_seed``
    (-1: none). TRL repeats each row ``num_generations`` times: a group shares its layout
    and noise seed."""
    import gymnasium as gym
    from datasets import Dataset

    from ..envs.base import check_seed

    seeds = [check_seed("seed", s) for s in seeds]
    noise = list(noise_seeds) if noise_seeds is not None else [None] * len(seeds)
    if len(noise) != len(seeds):
        raise ValueError(f"noise_seeds has {len(noise)} entries for {len(seeds)} seeds")
    noise = [None if n is None else check_seed("noise_seed", n) for n in noise]
    if env_id not in gym.registry:
        raise ValueError(f"unknown environment {env_id!r}")
    env = gym.make(env_id, **env_kwargs)
    try:
        _, info = env.reset(seed=seeds[0] if seeds else 0)
    finally:
        env.close()
    prompt = [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": ""}]
    return Dataset.from_dict({"prompt": [prompt] * len(seeds), "seed": seeds,
                              "noise_seed": [-1 if n is None else int(n) for n in noise]})


# ----------------------------------------------------------- the environment_factory transcript
# ``ragen sft --format tools`` warm-starts a model for the environment_factory path: an
# untrained model never writes a tool call, so every return TRL sees is the unplayed-turn
# penalty, the group's std is 0 and nothing is learned. The SFT sequences must then be the
# tokens TRL's loop itself lays out (``GRPOTrainer._tokenize_prompts``, ``_tool_call_loop``,
# ``_get_tool_suffix_ids``, trl 1.16); :class:`ToolCallFormat` builds each piece the way TRL
# does, with the model's own chat template.

def _require_trl():
    try:
        import trl.chat_template_utils as ctu
    except ImportError:  # pragma: no cover - depends on the installation
        raise ImportError("the tool-call format is TRL's: pip install 'ragen-envs[trl]'") from None
    return ctu


class ToolCallFormat:
    """The token layout of TRL's ``environment_factory`` loop for one ``ragen/*`` env and a
    tokenizer: what ``GRPOTrainer(environment_factory=make_environment_factory(env_id,
    **env_kwargs))`` tokenizes, and what a model must write to play.

    * :meth:`prompt`: the prompt ids, ``apply_chat_template([system, user(observation)],
      tools=[act], add_generation_prompt=True)`` (TRL's ``_tokenize_prompts``);
    * :meth:`call`: the ids a model writes to call ``act(reply)`` once, end-of-turn token
      included: the template's rendering of that assistant message after the generation prompt;
    * :meth:`stop`: a message without a call (only the end-of-turn token), which ends TRL's loop;
    * :meth:`results`: the ids TRL appends after a message's calls, its tool results and the
      next generation prompt (``_get_tool_suffix_ids``: a dummy conversation rendered without
      and with the tool messages, cut after the end-of-turn token);
    * :meth:`parse`: the calls TRL reads from a written message (its ``parse_response``).

    The chat template is the tokenizer's, or, when it is not prefix-preserving, the training
    template TRL swaps in (``get_training_chat_template``), exactly as ``GRPOTrainer`` does.
    Raises ValueError (one line) for a template TRL refuses or cannot parse tool calls of."""

    def __init__(self, tokenizer, env_id: str, **env_kwargs: Any) -> None:
        ctu = _require_trl()
        self.tok = tokenizer
        self.tools = [make_environment_factory(env_id, **env_kwargs)().act]  # TRL passes the bound method
        if not ctu.supports_tool_calling(tokenizer):
            raise ValueError("the model's chat template cannot render tool calls and tool results, so TRL's "
                             "environment_factory refuses it; give it a tool-calling template (e.g. Qwen2.5's)")
        if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
            try:
                ctu.add_response_schema(tokenizer)  # what GRPOTrainer does for the templates it knows
            except ValueError:
                raise ValueError("TRL cannot parse tool calls written in the model's chat template (not one it knows): "
                                 "set tokenizer.response_template (see transformers' response parsing docs)") from None
        self.chat_template = None if ctu.is_chat_template_prefix_preserving(tokenizer) else \
            ctu.get_training_chat_template(tokenizer)
        self.eot_id = tokenizer.eos_token_id
        if self.eot_id is None:
            raise ValueError("the tokenizer has no eos token: TRL's tool loop ends a message with it")
        self.eot = tokenizer.convert_ids_to_tokens(self.eot_id)
        self._parse = ctu.parse_response
        self._stop = [self.eot_id]

    def _render(self, messages: list[dict], generation_prompt: bool, tools: list | None = None) -> str:
        return self.tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt,
                                            chat_template=self.chat_template)

    def _ids(self, messages: list[dict], generation_prompt: bool, tools: list | None = None) -> list[int]:
        return list(self.tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False,
                                                 add_generation_prompt=generation_prompt,
                                                 chat_template=self.chat_template))

    def prompt(self, system: str, observation: str) -> list[int]:
        """Prompt ids of an episode whose system prompt and first observation these are."""
        return self._ids([{"role": "system", "content": system}, {"role": "user", "content": observation}], True,
                         self.tools)

    def call(self, reply: str) -> list[int]:
        """Ids of an assistant message that calls ``act(reply)`` and nothing else, end-of-turn included."""
        ask = [{"role": "user", "content": "x"}]
        message = {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function", "function": {"name": "act", "arguments": {"reply": reply}}}]}
        before, after = self._render(ask, True), self._render(ask + [message], False)
        if not after.startswith(before) or self.eot not in after[len(before):]:
            raise ValueError("the chat template does not render a tool call after its generation prompt, ended by "
                             f"{self.eot!r}")
        body = after[len(before):]
        return list(self.tok(body[: body.rindex(self.eot)], add_special_tokens=False)["input_ids"]) + [self.eot_id]

    def stop(self) -> list[int]:
        """Ids of a message without a call (the end-of-turn token alone)."""
        return list(self._stop)

    def results(self, texts: Sequence[str]) -> list[int]:
        """Ids TRL appends after a message whose calls returned ``texts`` (one per call, in order)."""
        tool_messages = [{"role": "tool", "name": "act", "content": str(t)} for t in texts]
        dummy = [{"role": "user", "content": "dummy"},
                 {"role": "assistant", "content": "",
                  "tool_calls": [{"type": "function", "function": {"name": "act", "arguments": {}}}]}]
        prefix, full = self._ids(dummy, False), self._ids(dummy + tool_messages, True)
        ends = [i for i, t in enumerate(prefix) if t == self.eot_id]
        if ends:
            prefix = prefix[: ends[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template is not prefix-preserving around tool results")
        return full[len(prefix):]

    def parse(self, ids: Sequence[int], prefix: Sequence[int]) -> list[dict]:
        """The tool calls TRL reads from the written ``ids`` that follow ``prefix`` (each
        ``{"type": "function", "function": {"name", "arguments"}}``; [] for none)."""
        parsed = self._parse(self.tok, list(ids), prefix=list(prefix), tools=self.tools)
        return list(parsed.get("tool_calls") or [])


def tool_transcript(fmt: ToolCallFormat, system: str, observations: Sequence[str],
                    replies: Sequence[str]) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of one episode as TRL's loop lays it out when the model calls
    ``act(reply)`` once per message and, after the last turn, writes a message without a
    call: prompt(system, observations[0]), call(replies[0]), results([observations[1]]),
    call(replies[1]), ..., results([observations[-1]]), stop(). ``observations`` holds the
    first observation and each turn's (one more than ``replies``). The mask is 1 on the calls
    and the stop (what the model writes), 0 on the prompt and the tool results."""
    if len(observations) != len(replies) + 1:
        raise ValueError(f"{len(observations)} observations for {len(replies)} replies: expected one more")
    ids = fmt.prompt(system, observations[0])
    mask = [0] * len(ids)
    for reply, observation in zip(replies, observations[1:]):
        written, result = fmt.call(reply), fmt.results([observation])
        ids += written + result
        mask += [1] * len(written) + [0] * len(result)
    ids += fmt.stop()
    mask += [1] * len(fmt.stop())
    return ids, mask


def _run_call(env: RagenToolEnv, call: dict) -> str:
    """A parsed call run as TRL's loop runs it: the tool's return value, or TRL's error text."""
    function = call.get("function") or {}
    try:
        if call.get("type") != "function":
            raise ValueError(f"Unsupported tool call type: {call.get('type')}")
        if function.get("name") != "act":
            raise ValueError(f"Tool {function.get('name')} not found.")
        return str(env.act(**function["arguments"]))
    except Exception as exc:  # TRL feeds any tool error back as the result
        return str({"error": str(exc)})


def play_tool_episodes(model, fmt: ToolCallFormat, env_id: str, seeds: Sequence[int], *, env_kwargs: Mapping[str, Any]
                       | None = None, max_new_tokens: int = 256, temperature: float = 1.0, generator=None,
                       max_messages: int | None = None) -> list[RagenToolEnv]:
    """Play one episode per layout seed through TRL's tool loop, locally: the prompt of
    :func:`make_environment_dataset`'s row, each message sampled from ``model`` (at most
    ``max_new_tokens``, all live episodes batched, KV cache kept across messages), its calls
    parsed and run on a :func:`make_environment_factory` instance, the results appended as
    TRL appends them, until a message calls nothing (or is cut, or ``max_messages``
    messages, default the env's turn budget + 2, were written). Returns the instances after
    ``get_reward()`` (``episode_return``, ``success``, ``replies``, ``unplayed_turns``)."""
    import torch

    from ..lm.sampler import MultiTurnSampler

    env_kwargs = dict(env_kwargs or {})
    factory = make_environment_factory(env_id, **env_kwargs)
    dataset = make_environment_dataset(env_id, list(seeds), **env_kwargs)
    envs, ids = [], []
    for row in dataset:
        env = factory()
        first = env.reset(**row)
        envs.append(env)
        ids.append(fmt.prompt(env.system_prompt, first))
    if max_messages is None:
        max_messages = (envs[0]._env.unwrapped.budget.max_turns + 2) if envs else 0
    pad = fmt.tok.pad_token_id if fmt.tok.pad_token_id is not None else fmt.eot_id
    sampler = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=pad, max_new_tokens=max_new_tokens,
                               temperature=temperature, generator=generator)
    was_training = model.training
    model.eval()
    try:
        live = list(range(len(envs)))
        for _ in range(max_messages):
            if not live:
                break
            with torch.no_grad():
                outs = sampler.generate([ids[i] for i in live])
            going = []
            for i, (written, stopped) in zip(live, outs):
                calls = fmt.parse(written, ids[i]) if stopped else []
                ids[i] = ids[i] + list(written)
                if calls:
                    ids[i] += fmt.results([_run_call(envs[i], c) for c in calls])
                    going.append(i)
            live = going
    finally:
        model.train(was_training)
    for env in envs:
        env.get_reward()  # plays the turns left unplayed, as TRL's reward does
    return envs


def tool_phrases(env_id: str, **env_kwargs: Any) -> list[str]:
    """The fixed strings of :data:`TOOL_CHAT_TEMPLATE`'s tool layout for one env (the tools
    block of the system message with ``act``'s schema, the text around a call's ``reply``,
    the text around a tool result, the reply's opening tag), for a tiny tokenizer's ``phrases``: each becomes one token,
    so a tiny model's tool-call sequences are mostly state and reply, as its protocol ones are
    (``ragen_envs.starpo.tiny.build_tiny_policy(tools=True)``). The text is unchanged."""
    from transformers.utils.chat_template_utils import render_jinja_template

    act = make_environment_factory(env_id, **env_kwargs)().act
    sys, obs, reply = "RAGENSYSTEMTEXT", "RAGENOBSERVATIONTEXT", "RAGENREPLYTEXT"  # plain letters: JSON keeps them

    def render(messages, tools=None):
        return render_jinja_template([messages], tools=tools, chat_template=TOOL_CHAT_TEMPLATE)[0][0]

    prompt = render([{"role": "system", "content": sys}, {"role": "user", "content": obs}], [act])
    call = render([{"role": "user", "content": obs}, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "act", "arguments": {"reply": reply}}}]}])
    result = render([{"role": "tool", "name": "act", "content": obs}])  # <|im_start|>user\n<tool_response>\n...
    tools_block = prompt.split(sys, 1)[1].split("<|im_end|>", 1)[0]
    call_open, call_close = call.split("<|im_start|>assistant\n", 1)[1].split("<|im_end|>", 1)[0].split(reply)
    result_open, result_close = result.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0].split(obs)
    # the reply's opening tag: the protocol path forces it (prompt, never written); here the model writes it
    opening = "<think>" if getattr(act.__self__._env.unwrapped, "think", True) else "<answer>"
    return [tools_block, call_open, call_close, result_open, result_close, opening]
