"""Multi-turn rollout generation: the KV-cache sampler vs HF ``generate``, side by side.

    .venv/bin/python benchmarks/bench_sampler.py                     # 4 x 8 Sokoban rollouts, 5 turns
    .venv/bin/python benchmarks/bench_sampler.py --groups 2 --group-size 8 --repeats 5

Every backend plays the same rollout batch (``collect_rollouts``: same env, seeds, model,
batch, ``max_new_tokens``, temperature) through a different responder:

- ``cached``: :class:`ragen_envs.starpo.sampler.CachedResponder` (KV cache kept across
  turns, only new tokens prefilled, finished rows dropped, shared system prefix once);
- ``hf_generate``: ``model.generate`` on the left-padded full prompts every turn
  (sampling, top_k off, stop on the end-of-turn token), the usual way to sample with HF;
- ``per_turn``: :func:`ragen_envs.starpo.policy.sample_replies` (the trainer's current
  sampler: a cache inside one turn, the shared prefix once, the history re-prefilled each turn).

Backends run interleaved (cached, hf, per_turn, cached, ...) so a noisy shared CPU hurts
them alike; the table has medians of generated tokens per second of responder time (the
environment steps are the same for all and are excluded) and the ratio to ``hf_generate``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402


class Timed:
    """Wraps a responder; adds up its wall time and generated tokens."""

    def __init__(self, inner):
        self.inner, self.seconds, self.tokens, self.calls = inner, 0.0, 0, 0

    def __call__(self, prompts, envs):
        t0 = time.perf_counter()
        out = self.inner(prompts, envs)
        self.seconds += time.perf_counter() - t0
        self.tokens += sum(len(ids) for ids, _ in out)
        self.calls += 1
        return out


class HFGenerateResponder:
    """``model.generate`` on the full left-padded prompts of the live trajectories."""

    def __init__(self, model, fmt, pad_id, max_new_tokens, temperature, seed):
        self.model, self.fmt, self.pad_id = model, fmt, pad_id
        self.max_new_tokens, self.temperature, self.seed = max_new_tokens, temperature, seed

    @torch.no_grad()
    def __call__(self, prompts, envs):
        T = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), T), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(prompts), T), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, T - len(p):] = torch.tensor(list(p))
            att[i, T - len(p):] = 1
        kw = dict(do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0) if self.temperature > 0 else dict(do_sample=False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.seed += 1
            out = self.model.generate(input_ids=ids, attention_mask=att, max_new_tokens=self.max_new_tokens,
                                      eos_token_id=self.fmt.eot_id, pad_token_id=self.pad_id, **kw)
        replies = []
        for row in out[:, T:].tolist():
            r = []
            for t in row:
                r.append(t)
                if t == self.fmt.eot_id:
                    break
            replies.append((r, r[-1] == self.fmt.eot_id))
        return replies


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="ragen/Sokoban-v0")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=384)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backends", default="cached,hf_generate,per_turn", help="comma list; 'vllm' is reported as skipped")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.rollout import ModelResponder, collect_rollouts
    from ragen_envs.starpo.sampler import CachedResponder

    with tempfile.TemporaryDirectory() as d:
        path = build_tiny_checkpoint(d, hidden_size=args.hidden, num_layers=args.layers,
                                     intermediate_size=args.intermediate)
        tok, model = load_tokenizer(path), load_policy(path)
    fmt = ChatFormat(tok, "<think>")
    pad = tok.pad_token_id
    n_params = sum(p.numel() for p in model.parameters())
    backends = args.backends.split(",")
    if "vllm" in backends:
        from ragen_envs.starpo.sampler import vllm_available

        backends.remove("vllm")
        print("# vllm: skipped (" + ("no vLLM backend is implemented yet" if vllm_available()
                                     else "vLLM is not installed or no CUDA device") + ")")

    def make(name, rep):
        if name == "cached":
            return CachedResponder(model, fmt, pad, args.max_new_tokens, args.temperature, torch.Generator().manual_seed(rep))
        if name == "hf_generate":
            return HFGenerateResponder(model, fmt, pad, args.max_new_tokens, args.temperature, seed=1000 * rep)
        if name == "per_turn":
            return ModelResponder(model, fmt, pad, args.max_new_tokens, args.temperature, torch.Generator().manual_seed(rep))
        raise SystemExit(f"unknown backend {name!r}")

    rates: dict[str, list[float]] = {b: [] for b in backends}
    secs: dict[str, list[float]] = {b: [] for b in backends}
    toks: dict[str, list[int]] = {b: [] for b in backends}
    turns: dict[str, list[float]] = {b: [] for b in backends}
    print(f"# {args.env}: {args.groups} x {args.group_size} rollouts, max_new_tokens {args.max_new_tokens}, "
          f"T={args.temperature}, model {n_params / 1e6:.2f} M params, torch threads {args.threads}", flush=True)
    for rep in range(args.repeats):
        for name in backends:
            r = Timed(make(name, rep))
            with torch.no_grad():
                trajs = collect_rollouts(args.env, 10_000 + rep * args.groups, args.groups, args.group_size, r, fmt)
            rates[name].append(r.tokens / r.seconds)
            secs[name].append(r.seconds)
            toks[name].append(r.tokens)
            turns[name].append(sum(len(t.episode.turns) for t in trajs) / len(trajs))
            print(f"  rep {rep} {name:12s} {r.tokens:6d} tokens in {r.seconds:7.2f} s = {r.tokens / r.seconds:8.1f} tok/s "
                  f"({turns[name][-1]:.1f} turns/traj, {r.calls} calls)", flush=True)
    base = statistics.median(rates["hf_generate"]) if "hf_generate" in rates else None
    print()
    print("| backend | median tokens/s | median s / rollout batch | median tokens | turns / traj | vs hf_generate |")
    print("|---|---|---|---|---|---|")
    for name in backends:
        med = statistics.median(rates[name])
        ratio = f"{med / base:.2f}x" if base else "-"
        print(f"| {name} | {med:.1f} | {statistics.median(secs[name]):.2f} | {statistics.median(toks[name]):.0f} | "
              f"{statistics.median(turns[name]):.1f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
