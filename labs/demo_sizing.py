"""Sizing the demo's RL phase (issue 14): StarPO-S from a saved SFT model, evaluated like the demo.

    python labs/demo_sizing.py sft --out runs/sizing/sft1400 [--steps 1400]
    python labs/demo_sizing.py rl --sft runs/sizing/sft1400/sft/model --out runs/sizing/rl_a \
        --set steps=60 --set actor_lr=2e-5 [--set advantage=grpo ...] [--seed 1] [--preset starpo]

    python labs/demo_sizing.py streams --out runs/sz/streams --a runs/sz/I/sft/model \
        --b runs/sz/J5e-5/starpo/model --streams 1 2 3 4 5
    python labs/demo_sizing.py sft-speed --out runs/sz/sft_speed [--repeats 3 --time-steps 20]
    python labs/demo_sizing.py profile --out runs/sz/profile [--repeats 2 --time-steps 12]

``sft`` runs the demo's steps 1-3 (build, SFT, evaluation) with ``DEMO`` settings (``--steps``
overrides the SFT steps, ``--sft-set`` / ``--model-set`` other SFT / tiny-model settings); ``rl`` runs steps 4-5 from an SFT model with ``DEMO["rl"]`` plus the
``--set`` overrides and prints the paired comparison with the SFT evaluation (same 256
EVAL_SEEDS, same sampling stream: exact McNemar p-value; the SFT evaluation is read from the
``sft`` run's ``sizing.json``, or made here for any other SFT model, e.g. a demo's
``runs/demo/sft/model``). Wall and CPU seconds are recorded
in ``OUT/sizing.json``. ``streams`` evaluates two models (``--a`` = before, ``--b`` = after)
like the demo under several sampling streams and prints the paired comparison of each and
pooled (how much one evaluation's p-value owes to its stream). ``sft-speed`` times the
demo's SFT step with the context loss off and on (``context_coef`` 0 vs the demo's),
interleaved, ``--repeats`` times ``--time-steps`` steps from the same initial model: medians
and their ratio. ``profile`` splits the demo's costs side by side in one process: expert data
(1,024 episodes) with ``UnicodeText.characters`` rebuilt per sub-env (before) vs built once,
and with 1 vs 2 worker processes; the padding of the SFT batches; the SFT step (forward /
backward / optimiser) in float32 vs bf16 autocast, with 2 and 1 torch threads, interleaved.
``--threads N`` sets torch's threads for any phase. Everything runs in one process: ``sft`` trains what
``make demo``'s two processes train (the demo's micro-batched SFT step is theirs bit for bit), but ``rl``
samples its rollouts like ``python -m ragen_envs.starpo.demo --processes 1``, not like ``make demo``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("sft", "rl", "streams", "sft-speed", "profile"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--sft", help="the SFT model directory (rl)")
    parser.add_argument("--steps", type=int, help="SFT steps (sft)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--sft-set", action="append", default=[], metavar="KEY=VALUE", help="SFT setting (sft)")
    parser.add_argument("--model-set", action="append", default=[], metavar="KEY=VALUE",
                        help="tiny model setting (sft), e.g. architecture=gpt2 or hidden_size=96")
    parser.add_argument("--seed", type=int, help="training seed (default: the demo's, 0)")
    parser.add_argument("--a", help="streams: the model before (e.g. the SFT model)")
    parser.add_argument("--b", help="streams: the model after (e.g. the StarPO-S model)")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2, 3, 4, 5],
                        help="streams: evaluation sampling seeds (the demo's is 1)")
    parser.add_argument("--repeats", type=int, default=3, help="sft-speed: interleaved repeats")
    parser.add_argument("--time-steps", type=int, default=20, help="sft-speed: SFT steps timed per repeat")
    parser.add_argument("--preset", default="starpo-s", help="trainer preset of the RL phase (default starpo-s; "
                                                             "starpo = vanilla: no filter, KL 0.001, clip 0.2 / 0.2)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    from ragen_envs.starpo.demo import DEMO, _evaluate, _success, build_demo_model, cpu_threads, override_settings

    cpu_threads(args.threads)
    import torch

    from ragen_envs.starpo.stats import mcnemar_exact, paired_counts

    settings = json.loads(json.dumps(DEMO))
    for item in args.set:
        k, _, v = item.partition("=")
        settings["rl"][k] = _value(v)
    try:
        override_settings(settings, sft_set=args.sft_set, model_set=args.model_set)
    except ValueError as exc:
        parser.error(str(exc))
    if args.steps:
        settings["sft"]["steps"] = args.steps
    if args.seed is not None:
        settings["seed"] = args.seed
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.monotonic(), time.process_time()
    if args.phase == "streams":
        return _streams(args, settings, out)
    if args.phase == "sft-speed":
        return _sft_speed(args, settings, out)
    if args.phase == "profile":
        return _profile(args, settings, out)
    if args.phase == "sft":
        from ragen_envs.starpo.sft import run_sft

        init = build_demo_model(out / "model_init", settings)
        model = run_sft(settings["env_id"], str(out / "sft"), model=str(init), env_kwargs=settings["env_kwargs"],
                        seed=settings["seed"], think_style="grounded", log=print,
                        max_new_tokens=settings["rl"]["max_new_tokens"], **settings["sft"])
        t_train = time.monotonic() - t0
        with torch.no_grad():
            ev = _evaluate(model, settings, seed=1)
        success = [bool(t.success) for t in ev]
        print(f"SFT {settings['sft']['steps']} steps: success {_success(ev):.3f}")
    else:
        from ragen_envs.starpo.config import make_config
        from ragen_envs.starpo.trainer import StarPOTrainer

        if not args.sft or not (Path(args.sft) / "config.json").exists():
            raise FileNotFoundError(f"--sft must name an SFT model directory (with config.json), got {args.sft!r}")
        sft_model = Path(args.sft)
        sized = sft_model.parent.parent / "sizing.json"
        if sized.exists():  # a demo_sizing.py sft run: its stream-1 evaluation
            base = json.loads(sized.read_text())
        else:  # any other SFT model (a demo's runs/demo/sft/model): evaluate it the same way
            with torch.no_grad():
                base = {"success": [bool(t.success) for t in _evaluate(sft_model, settings, seed=1)]}
        cfg = make_config(args.preset, env_id=settings["env_id"], env_kwargs=settings["env_kwargs"], model=str(sft_model),
                          out_dir=str(out / "starpo"), seed=settings["seed"], eval_episodes=settings["eval_episodes"],
                          **settings["rl"])
        StarPOTrainer(cfg, log=print).train()
        t_train = time.monotonic() - t0
        with torch.no_grad():
            ev = _evaluate(out / "starpo" / "model", settings, seed=1)
        success = [bool(t.success) for t in ev]
        counts = paired_counts(base["success"], success)
        p = mcnemar_exact(counts["only_a"], counts["only_b"])
        print(f"SFT {sum(base['success']) / len(base['success']):.3f} -> RL {_success(ev):.3f}; only SFT "
              f"{counts['only_a']}, only RL {counts['only_b']}, McNemar p = {p:.3g}")
    report = {"phase": args.phase, "settings": settings, "success": success, "rate": sum(success) / len(success),
              "torch_threads": torch.get_num_threads(),
              "train_wall_s": t_train, "wall_s": time.monotonic() - t0, "cpu_s": time.process_time() - c0}
    (out / "sizing.json").write_text(json.dumps(report, indent=1))
    print(f"wall {report['wall_s']:.0f}s (train {t_train:.0f}s), cpu {report['cpu_s']:.0f}s")
    return 0


def _streams(args, settings: dict, out: Path) -> int:
    """Both models under each evaluation stream: success, discordant counts, exact McNemar p."""
    import torch

    from ragen_envs.starpo.demo import _evaluate, stream_comparison
    from ragen_envs.starpo.stats import mcnemar_exact, paired_counts

    for name in ("a", "b"):
        path = getattr(args, name)
        if not path or not (Path(path) / "config.json").exists():
            raise FileNotFoundError(f"--{name} must name a model directory (with config.json), got {path!r}")
    rows, only_a, only_b, all_a, all_b = [], 0, 0, [], []
    t0 = time.monotonic()
    for stream in args.streams:
        with torch.no_grad():
            a = [bool(t.success) for t in _evaluate(Path(args.a), settings, seed=stream)]
            b = [bool(t.success) for t in _evaluate(Path(args.b), settings, seed=stream)]
        all_a.append(a)
        all_b.append(b)
        c = paired_counts(a, b)
        only_a, only_b = only_a + c["only_a"], only_b + c["only_b"]
        row = {"stream": stream, "a": sum(a) / len(a), "b": sum(b) / len(b), "only_a": c["only_a"],
               "only_b": c["only_b"], "p": mcnemar_exact(c["only_a"], c["only_b"])}
        rows.append(row)
        print(f"stream {stream}: a {row['a']:.3f}, b {row['b']:.3f}; only a {row['only_a']}, only b {row['only_b']}, "
              f"McNemar p = {row['p']:.3g}")
    pooled = {"only_a": only_a, "only_b": only_b, "p": mcnemar_exact(only_a, only_b)}
    # the demo's test: per eval seed, b's success averaged over the streams minus a's; sign-flip p
    per_seed = stream_comparison(all_a, all_b, seed=settings["seed"])
    print(f"pooled over {len(rows)} streams: only a {only_a}, only b {only_b}, McNemar p = {pooled['p']:.3g} "
          f"(counts a seed once per stream); per seed: a {per_seed['sft_success']:.3f}, b {per_seed['starpo_s_success']:.3f}, "
          f"seeds better {per_seed['seeds_better']}, worse {per_seed['seeds_worse']}, sign-flip p = "
          f"{per_seed['sign_flip_p']:.3g}; {time.monotonic() - t0:.0f}s")
    (out / "streams.json").write_text(json.dumps({"a": args.a, "b": args.b, "rows": rows, "pooled": pooled,
                                                  "per_seed": per_seed}, indent=1))
    return 0


def _sft_speed(args, settings: dict, out: Path) -> int:
    """Median wall seconds per SFT step with context_coef 0 and the demo's value, interleaved."""
    import statistics

    import torch

    from ragen_envs.starpo.demo import build_demo_model
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories, train_sft

    sft = settings["sft"]
    coefs = (0.0, float(sft["context_coef"]))
    init = build_demo_model(out / "model_init", settings)
    tok = load_tokenizer(init)
    fmt = ChatFormat(tok, "<think>" if settings["env_kwargs"].get("think", True) else "<answer>")
    data = expert_trajectories(settings["env_id"], fmt, range(sft["seed_start"], sft["seed_start"] + 2000),
                               actions_per_turn=sft["actions_per_turn"], env_kwargs=settings["env_kwargs"])
    times: dict[float, list[float]] = {c: [] for c in coefs}
    for rep in range(args.repeats):
        for coef in coefs:
            model = load_policy(init)
            t = time.monotonic()
            train_sft(model, data, pad_id=tok.pad_token_id, steps=args.time_steps, batch_size=sft["batch_size"],
                      lr=sft["lr"], warmup=sft["warmup"], seed=rep, context_coef=coef)
            times[coef].append((time.monotonic() - t) / args.time_steps)
    med = {c: statistics.median(v) for c, v in times.items()}
    ratio = med[coefs[1]] / med[coefs[0]]
    print(f"SFT step, median of {args.repeats} x {args.time_steps} steps (torch threads {torch.get_num_threads()}): "
          f"context_coef 0 {med[coefs[0]]:.3f}s, {coefs[1]} {med[coefs[1]]:.3f}s, ratio {ratio:.3f}")
    (out / "sft_speed.json").write_text(json.dumps({"seconds_per_step": {str(c): v for c, v in times.items()},
                                                    "median": {str(c): v for c, v in med.items()}, "ratio": ratio}))
    return 0


def _cpu_with_children() -> float:
    """User + system CPU seconds of this process and its finished children (the data workers)."""
    import resource

    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def _profile(args, settings: dict, out: Path) -> int:
    """Side-by-side costs of the demo's parts (see the module docstring); writes profile.json."""
    import contextlib
    import statistics

    import torch

    import ragen_envs.envs.space as space
    from ragen_envs.starpo.demo import build_demo_model
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories, make_batches, sft_loss

    sft = settings["sft"]
    init = build_demo_model(out / "model_init", settings)
    tok = load_tokenizer(init)
    fmt = ChatFormat(tok, "<think>" if settings["env_kwargs"].get("think", True) else "<answer>")
    seeds = range(sft["seed_start"], sft["seed_start"] + 1024)
    kw = {"actions_per_turn": sft["actions_per_turn"], "env_kwargs": settings["env_kwargs"]}
    cached = space._all_scalar_values
    report: dict = {"expert_1024": {}, "sft_step": {}}
    for rep in range(args.repeats):
        for name, prop, workers in (("rebuilt per env", lambda self: cached.__wrapped__(), 1),
                                    ("built once", lambda self: cached(), 1), ("built once, 2 workers", lambda self: cached(), 2)):
            space.UnicodeText.characters = property(prop)
            t, c = time.monotonic(), _cpu_with_children()
            data = expert_trajectories(settings["env_id"], fmt, seeds, workers=workers, **kw)
            report["expert_1024"].setdefault(name, []).append({"wall": time.monotonic() - t, "cpu": _cpu_with_children() - c})
            print(f"expert data, 1,024 episodes, charset {name}: {time.monotonic() - t:.2f}s wall, "
                  f"{_cpu_with_children() - c:.2f}s CPU (with the workers)", flush=True)
    space.UnicodeText.characters = property(lambda self: cached())
    lengths = [len(t.token_ids) for t in data]
    batches = make_batches(lengths, sft["batch_size"], torch.Generator().manual_seed(0))
    real = sum(lengths)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    report["padding"] = {"real_tokens": real, "padded_tokens": padded, "ratio": padded / real,
                         "mean_tokens": real / len(lengths)}
    print(f"SFT batches of {sft['batch_size']} (length-bucketed): {padded / real:.3f} padded / real tokens, "
          f"{real / len(lengths):.1f} tokens an episode", flush=True)
    n = args.time_steps
    for rep in range(args.repeats):
        for threads in (2, 1):
            for bf16 in (False, True):
                torch.set_num_threads(threads)
                model = load_policy(init)
                opt = torch.optim.AdamW(model.parameters(), lr=sft["lr"])
                parts = {"forward": [], "backward": [], "optimizer": []}
                c0 = time.process_time()
                for k, idx in enumerate(batches[: n + 2]):
                    group = [data[i] for i in idx]
                    n_rep = sum(t.num_reply_tokens for t in group)
                    n_ctx = sum(len(t.token_ids) - 1 - t.num_reply_tokens for t in group)
                    a = time.monotonic()
                    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
                        loss, _ = sft_loss(model, group, tok.pad_token_id, n_rep, sft["context_coef"], n_ctx)
                    b = time.monotonic()
                    loss.backward()
                    c = time.monotonic()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    d = time.monotonic()
                    if k >= 2:  # two warm-up steps
                        parts["forward"].append(b - a)
                        parts["backward"].append(c - b)
                        parts["optimizer"].append(d - c)
                key = f"{threads} threads, {'bf16 autocast' if bf16 else 'float32'}"
                row = {p: statistics.median(v) for p, v in parts.items()}
                row["cpu_per_step"] = (time.process_time() - c0) / (n + 2)
                report["sft_step"].setdefault(key, []).append(row)
                print(f"SFT step ({key}): forward {row['forward']:.3f}s, backward {row['backward']:.3f}s, "
                      f"optimizer {row['optimizer']:.4f}s; {row['cpu_per_step']:.3f}s CPU a step", flush=True)
    (out / "profile.json").write_text(json.dumps(report, indent=1))
    return 0


def _cli() -> int:
    try:
        return main()
    except (ValueError, TypeError, FileNotFoundError) as exc:  # bad --set keys/values, a missing --sft model
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_cli())
