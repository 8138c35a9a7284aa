"""A digest of the trainer samplers' tokens for fixed seeds: run it under two checkouts
(``PYTHONPATH=CHECKOUT python benchmarks/sampler_digest.py``) and compare the lines; equal
digests = bit-identical sampling (``sample_replies`` and two turns of ``MultiTurnSampler`` at
greedy, T = 1, top-p 0.9 and T = 0.7 / top-p 0.5 on the tiny checkpoint, built locally)."""
import hashlib, json, sys, tempfile, torch
from ragen_envs.models import build_tiny_checkpoint
from ragen_envs.lm.sampler import MultiTurnSampler
from ragen_envs.lm.sampling import sample_replies
from transformers import AutoModelForCausalLM, AutoTokenizer
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
print(hashlib.sha256(json.dumps(out).encode()).hexdigest(), sum(len(x) for o in out for x, _ in o))
