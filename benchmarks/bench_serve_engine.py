"""``ragen serve``'s generation engine alone (no HTTP): this checkout's ``TokenEngine`` vs a
base checkout's, in one process, interleaved round by round, 1 torch thread.

Both engines serve the same tiny checkpoint (built locally) with the same seed. Workloads per
round: ``single`` = 20 requests one after another; ``burst`` = ``--burst`` requests (default
64) submitted at once (a 64-client load without the HTTP layer); every request 16 tokens at
temperature 1 from the engine's generator. Reported: medians over rounds of wall and CPU
seconds (``time.process_time``, the whole process: a loaded machine stretches wall time, CPU
time much less), ratios ours / base round by round, and the forward passes each engine ran
per round (prefills + decoding steps, counted by a hook on the model: an earlier version added
the engines' own counters, which overcounted 53f1cc9's by one pass per batch).

Run: ``python benchmarks/bench_serve_engine.py --base /work/wt/serve-base [--rounds 6]``;
``--profile 30`` instead profiles one burst per engine (cProfile, top 30 functions by own time).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path


def load_base(path: str):
    """The base checkout's engine module as a module beside ours: ``ragen_envs/lm/token_engine.py``,
    or ``ragen_envs/serve.py`` in a checkout from before the engine moved there (its ``_http``
    import resolves to this checkout's, which the engine does not use)."""
    moved = Path(path) / "ragen_envs" / "lm" / "token_engine.py"
    name, file = (("ragen_envs.lm._token_engine_base", moved) if moved.exists()
                  else ("ragen_envs._serve_base", Path(path) / "ragen_envs" / "serve.py"))
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def profile(mods: dict, engines: dict, agent, ids: list[int], burst: int, top: int, calls: list[int]) -> int:
    """cProfile of one burst per engine: the engine's thread is stopped and its loop runs in
    this thread (cProfile sees one thread), a helper thread waits for the replies and then
    sends the shutdown sentinel. Two bursts per engine (the first warms up), generators seeded
    with the burst's index on both sides; the second burst's CPU time, forward passes and top
    functions by own time are printed."""
    import cProfile
    import io
    import pstats
    import threading

    for name, eng in engines.items():
        eng.close()
        for k in range(2):
            eng._generator.manual_seed(k)
            jobs = []
            for _ in range(burst):
                jobs.append(mods[name].Job(len(ids), stream=False))
                eng.submit(jobs[-1], ids, 1, 1.0, 1.0, 16, (), None)

            def closer(jobs=jobs, eng=eng):
                for j in jobs:
                    while j.events.get(timeout=300)[0] != "done":
                        pass
                eng._queue.put(None)

            helper = threading.Thread(target=closer)
            helper.start()
            prof, f0, c0 = cProfile.Profile(), calls[0], time.process_time()
            prof.enable()
            eng._loop()
            prof.disable()
            cpu, passes = time.process_time() - c0, calls[0] - f0
            helper.join()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
        print(f"== {name}: {burst} requests, CPU {cpu:.3f} s (under cProfile), {passes} forward passes, "
              f"stats {eng.stats}\n{text.getvalue()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--burst", type=int, default=64)
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="instead: cProfile one burst per engine (the engine loop run in this thread, the "
                             "second of two bursts, generator seeded alike) and print the TOP functions by own time")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from ragen_envs.lm import token_engine as ours
    from ragen_envs.agents import make_agent
    from ragen_envs.models import build_tiny_checkpoint

    base = load_base(args.base)
    path = build_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny")
    agent = make_agent(f"hf:{path}", max_tokens=16)
    text = agent.prompt_text([{"role": "user", "content": "Turn 1:\nState:\n#P_O#\n"}], "")
    ids = agent.tokenizer(text, add_special_tokens=False)["input_ids"]
    calls = [0]  # forward passes, counted at the model (only one engine works at a time)
    agent.model.register_forward_pre_hook(lambda module, args: calls.__setitem__(0, calls[0] + 1))
    mods = {"base": base, "ours": ours}
    engines = {k: m.TokenEngine(agent.model, agent.tokenizer, "cpu") for k, m in mods.items()}

    def submit(name: str):
        job = mods[name].Job(len(ids), stream=False)
        engines[name].submit(job, ids, 1, 1.0, 1.0, 16, (), None)
        return job

    def finish(job) -> int:
        while True:
            kind, _, payload = job.events.get(timeout=300)
            if kind == "done":
                return payload.completion_tokens

    if args.profile:
        return profile(mods, engines, agent, ids, args.burst, args.profile, calls)
    work = {"single": lambda name: sum(finish(submit(name)) for _ in range(20)),
            "burst": lambda name: sum(finish(j) for j in [submit(name) for _ in range(args.burst)])}
    res: dict = {}
    for r in range(args.rounds):
        for case, fn in work.items():
            for name in (("base", "ours") if r % 2 == 0 else ("ours", "base")):
                f0, t0, c0 = calls[0], time.perf_counter(), time.process_time()
                tokens = fn(name)
                res.setdefault((case, name), []).append(
                    (time.perf_counter() - t0, time.process_time() - c0, calls[0] - f0, tokens))
    lines = ["| workload | side | wall s (median) | CPU s (median) | forward passes a round (median) | tokens a round | "
             "ours / base CPU, round by round | median |", "|---|---|---:|---:|---:|---:|---|---:|"]
    for case in work:
        for name in ("base", "ours"):
            rs = res[(case, name)]
            ratio = ""
            if name == "ours":
                rr = [o[1] / b[1] for o, b in zip(rs, res[(case, "base")])]
                ratio = f"{', '.join(f'{x:.2f}' for x in rr)} | {statistics.median(rr):.2f}x"
            else:
                ratio = " "
            lines.append(f"| {case} | {name} | {statistics.median(x[0] for x in rs):.2f} | "
                         f"{statistics.median(x[1] for x in rs):.2f} | {statistics.median(x[2] for x in rs):.0f} | "
                         f"{statistics.median(x[3] for x in rs):.0f} | {ratio} |")
    for e in engines.values():
        e.close()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
