"""A digest of the trainer samplers' tokens for fixed seeds: run it under two checkouts
(``PYTHONPATH=CHECKOUT python benchmarks/sampler_digest.py``) and compare the lines; equal
digests = bit-identical sampling (``sample_replies`` and two turns of ``MultiTurnSampler`` at
greedy, T = 1, top-p 0.9 and T = 0.7 / top-p 0.5 on the tiny checkpoint, built locally).

``--ab BASE [--rounds N]`` then times ``MultiTurnSampler`` of this checkout against BASE's
(``BASE/ragen_envs/lm/sampler.py`` loaded beside ours), in one process, 1 torch thread,
interleaved round by round: two turns of 32 rows x 32 tokens at T = 1 on a model of BENCHMARKS.md#trainer-step-vs-trl's
shape (hidden 128, 4 layers, 8 heads, vocab 1024; random weights, so replies run to the cap),
~200-token prompts then ~250 more; CPU seconds (``time.process_time``) per round, medians and
the ratio, and whether both drew the same tokens."""
import argparse, hashlib, importlib.util, json, statistics, sys, tempfile, time
from pathlib import Path

import torch
from ragen_envs.models import build_tiny_checkpoint
from ragen_envs.lm.sampler import MultiTurnSampler
from ragen_envs.lm.sampling import sample_replies
from transformers import AutoModelForCausalLM, AutoTokenizer


def digest() -> str:
    torch.manual_seed(0)
    d = tempfile.mkdtemp()
    p = build_tiny_checkpoint(d + "/tiny")
    m = AutoModelForCausalLM.from_pretrained(p).eval(); tok = AutoTokenizer.from_pretrained(p)
    g = torch.Generator().manual_seed(0)
    base = list(range(5, 40))
    prompts = [base + [40 + i] * (i + 1) for i in range(6)]
    out = []
    for T, tp in ((0.0, 1.0), (1.0, 1.0), (1.0, 0.9), (0.7, 0.5)):
        out.append(sample_replies(m, prompts, eot_id=tok.eos_token_id, pad_id=tok.pad_token_id, max_new_tokens=20,
                                  temperature=T, generator=g, top_p=tp))
        s = MultiTurnSampler(m, eot_id=tok.eos_token_id, pad_id=tok.pad_token_id, max_new_tokens=20, temperature=T,
                             generator=g, top_p=tp, batch_size=4)
        r1 = s.generate(prompts)
        r2 = s.generate([p_ + ids + [7, 8] for p_, (ids, _) in zip(prompts, r1)])
        out += [r1, r2]
    return f"{hashlib.sha256(json.dumps(out).encode()).hexdigest()} {sum(len(x) for o in out for x, _ in o)}"


def ab(base_path: str, rounds: int) -> str:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("ragen_envs.lm._sampler_base",
                                                  Path(base_path) / "ragen_envs" / "lm" / "sampler.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    cfg = Qwen2Config(vocab_size=1024, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=2048)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).eval()
    prompts = [list(range(5, 200)) + [300 + i] * (i % 5 + 1) for i in range(32)]

    def run(cls, seed):
        g = torch.Generator().manual_seed(seed)
        s = cls(model, eot_id=3, pad_id=0, max_new_tokens=32, temperature=1.0, generator=g)
        c = time.process_time()
        r1 = s.generate(prompts)
        r2 = s.generate([p + ids + [7, 8] * 10 for p, (ids, _) in zip(prompts, r1)])
        return time.process_time() - c, [r1, r2]

    sides = {"base": mod.MultiTurnSampler, "ours": MultiTurnSampler}
    times: dict = {k: [] for k in sides}
    same = True
    for r in range(rounds):
        outs = {}
        for name in (("base", "ours") if r % 2 == 0 else ("ours", "base")):
            t, outs[name] = run(sides[name], r)
            times[name].append(t)
        same &= outs["base"] == outs["ours"]
    ratios = [o / b for o, b in zip(times["ours"], times["base"])]
    return (f"CPU s per round (2 turns, 32 rows x 32 tokens): base median {statistics.median(times['base']):.3f}, "
            f"ours median {statistics.median(times['ours']):.3f}; ours / base round by round "
            f"{', '.join(f'{x:.2f}' for x in ratios)}, median {statistics.median(ratios):.2f}x; same tokens: {same}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ab", metavar="BASE", help="also time MultiTurnSampler against BASE's")
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    print(digest())
    if a.ab:
        print(ab(a.ab, a.rounds))
