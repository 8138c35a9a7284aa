"""Our StarPO trainer vs TRL's GRPOTrainer, per training step, on one workload (issue 23 goal 3).

    python benchmarks/bench_trl_grpo.py --out runs/bench_trl            # the run of BENCHMARKS.md#trainer-step-vs-trl
    python benchmarks/bench_trl_grpo.py --out runs/bench_trl_smoke --smoke

The workload, the same on both sides:

* the model: the project's tiny Qwen2-architecture model (``starpo.tiny.build_tiny_policy``,
  built locally, saved and loaded back by both trainers), after a short expert SFT run
  (``starpo.sft.run_sft``; cached in ``OUT/sft/model``, or ``--sft DIR``), so success is
  measurable;
* ``ragen/Sokoban-v0`` (think on: ``<think>...</think><answer>...</answer>`` replies), 4
  initial states x 8 rollouts per step (layout seeds ``--train-seed + 4k + g`` at step k on
  both sides: TRL's dataset is those seeds in order, ``shuffle_dataset=False``), replies cut
  at 32 tokens, the env's own turn budget (5 turns);
* GRPO: the group's ``(R - mean) / (std + 1e-4)`` (sample std) on every reply token, no KL
  (TRL ``beta=0``; our ``kl_coef=0``), no entropy bonus, clip 0.2 / 0.2, no dual clip,
  token-mean loss over the batch (TRL ``loss_type="dapo"``), one optimiser step of all 32
  trajectories per step (TRL: ``per_device_train_batch_size=32``, one iteration,
  ``steps_per_generation=1``), AdamW with the same lr / betas / weight decay, constant lr,
  grad-norm clip 1, sampling at temperature 1 with no top-k / top-p;
* TRL's multi-turn episodes go through the project's ``rollout_func``
  (``ragen_envs.integrations.trl.make_rollout_func``): the same protocol, token-in/token-out.
  ``--trl-generation sampler`` (default): with the project's KV-cache sampler, the decode loop
  our trainer uses too; ``--trl-generation hf-generate``: each turn generated the way TRL's
  own generation does (``model.generate`` on the left-padded histories, as its
  ``environment_factory`` tool loop calls it per tool iteration; see
  :func:`hf_generate_generator`). TRL's ``environment_factory`` itself cannot play this
  workload: the SFT model writes protocol replies, not tool calls, so it would play no turn.

Both trainers run in this one process, one torch thread, interleaved step by step (ours,
TRL, ours, TRL, ...: our step runs from TRL's ``on_step_begin`` callback, outside TRL's step
timer). Per step: wall and CPU time (``time.process_time``), split into generation (our
``rollout``; TRL's call of the rollout function) and the rest (ours: scoring, advantages and
the update; TRL: reward / advantage bookkeeping, scoring and the update). Medians over the
steps after ``--warmup``. Then both trained models, and the SFT start, play the same
``--eval-episodes`` of ``EVAL_SEEDS`` at temperature 0.5 with the same sampling stream:
success per seed, paired exact McNemar test (ours vs TRL).

Writes ``OUT/bench_trl_grpo.json`` and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ENV_ID = "ragen/Sokoban-v0"
GROUPS, GROUP_SIZE, MAX_NEW_TOKENS = 4, 8, 32
TINY = {"hidden_size": 128, "num_layers": 4, "intermediate_size": 384, "num_heads": 8}
SMOKE_TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64, "num_heads": 4}


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class Timer:
    """Accumulates wall and CPU seconds of the calls it wraps (``wrap``) or of ``with``
    blocks, and keeps them per step (``take`` returns and clears the step's totals)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self):
        self._t = _clock()
        return self

    def __exit__(self, *exc) -> None:
        w, c = _clock()
        self.wall += w - self._t[0]
        self.cpu += c - self._t[1]

    def wrap(self, fn):
        def timed(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return timed

    def take(self) -> tuple[float, float]:
        out = (self.wall, self.cpu)
        self.wall = self.cpu = 0.0
        return out


def prepare_sft(out: Path, *, sft_steps: int, sft_episodes: int, smoke: bool, seed: int, log=print) -> Path:
    """The shared start: the tiny model built here, then a short expert SFT run (cached)."""
    from ragen_envs.starpo.sft import run_sft
    from ragen_envs.starpo.tiny import build_tiny_policy

    model_dir = out / "sft" / "model"
    if (model_dir / "config.json").exists():
        log(f"SFT start: reusing {model_dir}")
        return model_dir
    init = build_tiny_policy(out / "model_init", ENV_ID, {}, seed=seed, **(SMOKE_TINY if smoke else TINY))
    t = time.monotonic()
    path = run_sft(ENV_ID, str(out / "sft"), model=str(init), env_kwargs={}, seed=seed, episodes=sft_episodes,
                   steps=sft_steps, batch_size=16, lr=2e-3, warmup=min(50, sft_steps // 5), actions_per_turn=2,
                   think_style="grounded", context_coef=0.5, max_new_tokens=MAX_NEW_TOKENS, log=lambda s: None)
    log(f"SFT start: {sft_steps} steps on {sft_episodes} expert episodes in {time.monotonic() - t:.0f} s -> {path}")
    return Path(path)


def our_config(sft: Path, out: Path, *, steps: int, lr: float, seed: int, train_seed: int, micro_batch_size: int):
    from ragen_envs.starpo.config import make_config

    return make_config("grpo", env_id=ENV_ID, model=str(sft), out_dir=str(out / "ours"), seed=seed, steps=steps,
                       num_groups=GROUPS, group_size=GROUP_SIZE, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0,
                       train_seed_start=train_seed, filter_mode="none", grpo_eps=1e-4, entropy_coef=0.0,
                       clip_low=0.2, clip_high=0.2, dual_clip=None, kl_coef=0.0, track_kl=False, actor_lr=lr, weight_decay=0.0,
                       grad_clip=1.0, mini_batch_size=GROUPS * GROUP_SIZE, micro_batch_size=micro_batch_size,
                       loss_agg="token-mean", eval_every=0, probe_every=0, save_every=0, log_samples=0, plots=False)


def hf_generate_generator(model, fmt, pad_id: int, max_new_tokens: int, temperature: float, top_p: float, generator):
    """A turn generator for the episode layer that samples the way TRL's own generation does
    (``GRPOTrainer._generate_single_turn`` without vLLM, which its ``environment_factory`` tool
    loop calls once per tool iteration): the turn's prompts left-padded into one batch,
    ``model.generate`` with TRL's sampling settings (``do_sample``, temperature, top-p, top-k
    0), stopping at the end-of-turn token; every turn prefills each episode's whole history
    again (no cache kept across turns). Randomness: torch's global generator (``generate`` takes
    no generator), seeded by the caller; ``generator`` is unused."""
    import torch
    from transformers import GenerationConfig

    from ragen_envs.lm.engine import left_pad

    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_p=top_p,
                              top_k=0, pad_token_id=pad_id, eos_token_id=fmt.eot_id, bos_token_id=None)

    def generate(prompts):
        ids, att = left_pad(prompts, pad_id)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=att, generation_config=config)
        res = []
        for row in out[:, ids.shape[1]:].tolist():
            if fmt.eot_id in row:
                res.append((row[: row.index(fmt.eot_id) + 1], True, None))
            else:
                res.append((row[:max_new_tokens], False, None))
        return res

    return generate


def trl_trainer(sft: Path, out: Path, *, steps: int, lr: float, seed: int, train_seed: int, callbacks, gen_timer: Timer,
                trl_generation: str = "sampler", trl_defaults: bool = True):
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    from ragen_envs.integrations import trl as rtrl
    from ragen_envs.lm.chat import load_tokenizer

    tok = load_tokenizer(sft)
    seeds = [train_seed + i for i in range(steps * GROUPS)]
    if trl_generation == "hf-generate":
        import torch

        # the same episodes, generated as TRL itself generates (see hf_generate_generator); the
        # rollout function's own sampler factory is swapped for this process's TRL side only
        # (our trainer samples through starpo's CachedResponder, not through it)
        rtrl._sampler_generator = hf_generate_generator
        torch.manual_seed(seed)
    rollout = rtrl.make_rollout_func(prefix="<think>", max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=seed)
    config = GRPOConfig(output_dir=str(out / "trl"), per_device_train_batch_size=GROUPS * GROUP_SIZE,
                        num_generations=GROUP_SIZE, gradient_accumulation_steps=1, max_steps=steps, learning_rate=lr,
                        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
                        adam_beta1=0.9, adam_beta2=0.999, beta=0.0, epsilon=0.2, loss_type="dapo",
                        scale_rewards="group", num_iterations=1, temperature=1.0, top_p=1.0, top_k=0,
                        max_completion_length=4096, shuffle_dataset=False, seed=seed, use_cpu=True, report_to=[],
                        save_strategy="no", logging_steps=1, log_completions=False, dataloader_num_workers=0,
                        disable_tqdm=True, **({} if trl_defaults else {"bf16": False, "gradient_checkpointing": False}))
    return GRPOTrainer(model=str(sft), processing_class=tok, reward_funcs=[rtrl.env_return_reward], args=config,
                       train_dataset=rtrl.make_dataset(ENV_ID, seeds), rollout_func=gen_timer.wrap(rollout),
                       callbacks=callbacks)


def evaluate(model, fmt, pad_id: int, episodes: int, seed: int) -> list[bool]:
    import torch

    from ragen_envs.starpo.trainer import evaluate_policy

    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            trajs = evaluate_policy(model, fmt, pad_id, ENV_ID, episodes=episodes, temperature=0.5, seed=seed,
                                    max_new_tokens=MAX_NEW_TOKENS)
    finally:
        model.train(was)
    return [t.success for t in trajs]


def summarize(rows: list[dict], warmup: int) -> dict:
    """Medians of each timing over the measured steps and the ratios TRL / ours."""
    keep = rows[warmup:]
    med = {key: statistics.median(r[key] for r in keep) for key in keep[0] if key != "step"}
    ratios = {}
    for part in ("step", "gen", "rest"):
        for kind in ("wall", "cpu"):
            ours, trl = med[f"ours_{part}_{kind}"], med[f"trl_{part}_{kind}"]
            ratios[f"{part}_{kind}"] = trl / ours if ours > 0 else float("nan")
    # the per-step ratio of the paired steps (each step's TRL / ours), medianed
    ratios["paired_step_wall"] = statistics.median(r["trl_step_wall"] / r["ours_step_wall"] for r in keep)
    ratios["paired_step_cpu"] = statistics.median(r["trl_step_cpu"] / r["ours_step_cpu"] for r in keep)
    return {"medians": med, "trl_over_ours": ratios, "measured_steps": len(keep)}


def run(args) -> dict:
    import torch
    from transformers import TrainerCallback

    from ragen_envs.starpo.stats import mcnemar_exact, paired_counts
    from ragen_envs.starpo.trainer import StarPOTrainer

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = print if not args.quiet else (lambda s: None)
    sft = Path(args.sft) if args.sft else prepare_sft(out, sft_steps=args.sft_steps, sft_episodes=args.sft_episodes,
                                                       smoke=args.smoke, seed=args.seed, log=log)
    steps = args.warmup + args.steps
    ours = StarPOTrainer(our_config(sft, out, steps=steps, lr=args.lr, seed=args.seed, train_seed=args.train_seed,
                                    micro_batch_size=args.micro_batch_size), log=lambda s: None)
    ours_gen, ours_rest = Timer(), Timer()
    ours.rollout = ours_gen.wrap(ours.rollout)
    ours._update = ours_rest.wrap(ours._update)
    trl_gen = Timer()
    rows: list[dict] = []

    class Interleave(TrainerCallback):
        """Our step k right before TRL's step k; TRL's step timed from here to on_step_end."""

        def on_step_begin(self, targs, state, control, **kw):
            t = _clock()
            ours.train_step()
            w, c = _clock()
            row = {"step": len(rows), "ours_step_wall": w - t[0], "ours_step_cpu": c - t[1]}
            row["ours_gen_wall"], row["ours_gen_cpu"] = ours_gen.take()
            row["ours_rest_wall"], row["ours_rest_cpu"] = ours_rest.take()
            rows.append(row)
            self.t = _clock()

        def on_step_end(self, targs, state, control, **kw):
            w, c = _clock()
            row = rows[-1]
            row["trl_step_wall"], row["trl_step_cpu"] = w - self.t[0], c - self.t[1]
            row["trl_gen_wall"], row["trl_gen_cpu"] = trl_gen.take()
            row["trl_rest_wall"] = row["trl_step_wall"] - row["trl_gen_wall"]
            row["trl_rest_cpu"] = row["trl_step_cpu"] - row["trl_gen_cpu"]
            log("step {step:3d}  ours {ours_step_wall:.3f} s (gen {ours_gen_wall:.3f})  "
                "TRL {trl_step_wall:.3f} s (gen {trl_gen_wall:.3f})".format(**row))

    from ragen_envs.integrations import trl as rtrl

    sampler_generator = rtrl._sampler_generator
    try:
        trl = trl_trainer(sft, out, steps=steps, lr=args.lr, seed=args.seed, train_seed=args.train_seed,
                          callbacks=[Interleave()], gen_timer=trl_gen, trl_generation=args.trl_generation,
                          trl_defaults=not args.trl_fp32)
        trl.train()
    finally:
        rtrl._sampler_generator = sampler_generator
    if ours.step != steps or len(rows) != steps:
        raise RuntimeError(f"ran {ours.step} of our steps and {len(rows)} TRL steps, {steps} expected")
    result = {"settings": {k: v for k, v in vars(args).items()}, "sft_model": str(sft), "steps": rows,
              **summarize(rows, args.warmup)}
    if args.eval_episodes:
        fmt, pad = ours.fmt, ours.pad_id
        evals = {"sft": None, "ours": evaluate(ours.actor, fmt, pad, args.eval_episodes, args.eval_seed),
                 "trl": evaluate(trl.accelerator.unwrap_model(trl.model), fmt, pad, args.eval_episodes, args.eval_seed)}
        from ragen_envs.starpo.policy import load_policy

        evals["sft"] = evaluate(load_policy(sft), fmt, pad, args.eval_episodes, args.eval_seed)
        c = paired_counts(evals["trl"], evals["ours"])
        result["eval"] = {
            "episodes": args.eval_episodes,
            "success": {k: sum(v) / len(v) for k, v in evals.items()},
            "solved": {k: int(sum(v)) for k, v in evals.items()},
            "only_trl": c["only_a"], "only_ours": c["only_b"],
            "mcnemar_p": mcnemar_exact(c["only_a"], c["only_b"]),
        }
    (out / "bench_trl_grpo.json").write_text(json.dumps(result, indent=2))
    return result


LEVERS = ("old log-probs from the update's forward", "no reference pass (track_kl off)",
          "causal-only attention on right-padded rows", "entropy off the graph (entropy_coef 0)")


def run_levers(args) -> dict:
    """Our update alone (scoring + advantages + the optimiser step) on one fixed rollout batch,
    with the levers switched on one by one (cumulative), the configurations interleaved
    round by round; median wall / CPU seconds per configuration."""
    import torch

    from ragen_envs.starpo import policy as P
    from ragen_envs.starpo.trainer import StarPOTrainer

    torch.set_num_threads(1)
    out = Path(args.out)
    sft = Path(args.sft) if args.sft else prepare_sft(out, sft_steps=args.sft_steps, sft_episodes=args.sft_episodes,
                                                       smoke=args.smoke, seed=args.seed, log=print)
    cfg = our_config(sft, out / "levers", steps=1, lr=args.lr, seed=args.seed, train_seed=args.train_seed,
                     micro_batch_size=args.micro_batch_size)
    cfg.track_kl = True  # the reference is loaded; lever 2 switches its pass off
    tr = StarPOTrainer(cfg, log=lambda s: None)
    trajs = tr.rollout(cfg.train_seed_start)
    rewards = [t.turn_rewards for t in trajs]
    right_padded, actor_train = P.right_padded, tr.actor_train

    def entropy_on_graph(*a, **kw):
        kw["entropy_grad"] = True
        return actor_train(*a, **kw)

    def configure(n: int) -> None:  # the first n levers on
        tr.fresh_old_logprobs = n >= 1
        tr.uses_ref = n < 2
        P.right_padded = right_padded if n >= 3 else (lambda mask: False)
        tr.actor_train = actor_train if n >= 4 else entropy_on_graph

    times: dict[int, list[tuple[float, float]]] = {n: [] for n in range(len(LEVERS) + 1)}
    try:
        for _ in range(args.lever_rounds):
            for n in times:
                configure(n)
                t = _clock()
                tr._update(trajs, rewards, GROUPS)
                w, c = _clock()
                times[n].append((w - t[0], c - t[1]))
    finally:
        configure(len(LEVERS))
    rows = []
    for n, ts in times.items():
        rows.append({"levers_on": n, "lever": LEVERS[n - 1] if n else "none (before)",
                     "wall": statistics.median(w for w, _ in ts), "cpu": statistics.median(c for _, c in ts)})
    res = {"rounds": args.lever_rounds, "tokens": sum(len(t.token_ids) for t in trajs), "rows": rows}
    (out / "bench_trl_grpo_levers.json").write_text(json.dumps(res, indent=2))
    print(f"our update on one batch of {len(trajs)} trajectories ({res['tokens']} tokens), median of "
          f"{args.lever_rounds} interleaved rounds, levers switched on one by one:")
    print("| + lever | update wall | update CPU | CPU vs before |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['lever']} | {r['wall']:.3f} s | {r['cpu']:.3f} s | {rows[0]['cpu'] / r['cpu']:.2f}x |")
    return res


def report(result: dict) -> str:
    m, r = result["medians"], result["trl_over_ours"]
    lines = [f"TRL's generation: {result['settings'].get('trl_generation', 'sampler')}",
             f"median of {result['measured_steps']} interleaved steps (after warm-up), 1 torch thread:",
             "| part | ours wall | TRL wall | TRL / ours wall | ours CPU | TRL CPU | TRL / ours CPU |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for part, name in (("step", "whole step"), ("gen", "generation"), ("rest", "scoring + update")):
        lines.append(f"| {name} | {m[f'ours_{part}_wall']:.3f} s | {m[f'trl_{part}_wall']:.3f} s | "
                     f"{r[f'{part}_wall']:.2f}x | {m[f'ours_{part}_cpu']:.3f} s | {m[f'trl_{part}_cpu']:.3f} s | "
                     f"{r[f'{part}_cpu']:.2f}x |")
    lines.append(f"paired per-step ratio (median of TRL / ours per step): wall {r['paired_step_wall']:.2f}x, "
                 f"CPU {r['paired_step_cpu']:.2f}x")
    ev = result.get("eval")
    if ev:
        s = ev["solved"]
        lines.append(f"success on {ev['episodes']} EVAL_SEEDS (T=0.5, same stream): SFT start {s['sft']}, "
                     f"ours {s['ours']}, TRL {s['trl']}; only TRL {ev['only_trl']} / only ours {ev['only_ours']}, "
                     f"exact McNemar p = {ev['mcnemar_p']:.3g}")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/bench_trl")
    p.add_argument("--sft", default=None, help="an existing SFT model directory (default: build and SFT one in OUT/sft)")
    p.add_argument("--sft-steps", type=int, default=400)
    p.add_argument("--sft-episodes", type=int, default=2000)
    p.add_argument("--steps", type=int, default=20, help="measured steps (after the warm-up)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--micro-batch-size", type=int, default=32, help="our trajectories per forward/backward")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-seed", type=int, default=50_000)
    p.add_argument("--eval-episodes", type=int, default=256)
    p.add_argument("--eval-seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a seconds-long check: 1-layer model, 5 SFT steps, 2 steps, 2 eval episodes")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--trl-generation", choices=("sampler", "hf-generate"), default="sampler",
                   help="how TRL's side generates its episodes: 'sampler' = the project's rollout_func with its "
                        "KV-cache sampler (the same decode loop as ours); 'hf-generate' = the same episodes with "
                        "each turn generated by model.generate as TRL's own generation does it (what its "
                        "environment_factory tool loop runs), the whole history prefilled again every turn")
    p.add_argument("--trl-fp32", action="store_true",
                   help="TRL without its GRPOConfig defaults bf16=True (autocast) and gradient_checkpointing=True, "
                        "i.e. fp32 without recomputation like ours (default: TRL's defaults, what its users get)")
    p.add_argument("--levers", action="store_true", help="time our update with each speed lever on, one by one")
    p.add_argument("--lever-rounds", type=int, default=5)
    args = p.parse_args(argv)
    if args.smoke:
        args.sft_steps, args.sft_episodes, args.steps, args.warmup, args.eval_episodes = 5, 16, 1, 1, 2
    for name in ("sft_steps", "sft_episodes", "steps", "micro_batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.eval_episodes < 0:
        p.error("--warmup and --eval-episodes must be >= 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.levers:
        run_levers(args)
        return 0
    result = run(args)
    print(report(result))
    print(f"wrote {Path(args.out) / 'bench_trl_grpo.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
