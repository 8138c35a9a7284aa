"""``ragen serve hf:PATH [--port 8000]``: an OpenAI-compatible chat server for a local model.

Serve what ``ragen train`` wrote, then evaluate it through the same path as any API model::

    ragen train ragen/Sokoban-v0 --out runs/train      # writes the model to runs/train/model
    ragen serve hf:runs/train/model --port 8000 &
    ragen eval ragen/Sokoban-v0 --agent openai:train/model --base-url http://127.0.0.1:8000/v1 --out runs/eval

Listens on 127.0.0.1 only unless --host says otherwise; --api-key-env VAR makes it require
``Authorization: Bearer $VAR``. Offers POST /v1/chat/completions (streaming too),
GET /v1/models and GET /health. The model name is the checkpoint path's tail (runs/demo/starpo/model
-> starpo/model; --model-name to choose); the folder name, the path and hf:PATH are accepted too.
Every request is bounded: --max-tokens-limit, the model's context (--max-context; a prompt
whose characters alone need more tokens is refused before it is tokenized), stop strings, body
size; parameters it cannot honour (logprobs, tools, ...) get 400. A temperature below 1e-5 is
greedy (as 0). Requests share the --batch-size places fairly: a new request gets its share at
the next step, whatever n and max_tokens the others asked for; a row whose logits come out
NaN fails its own request only.

It is meant for small local checkpoints; serve real-size models with vLLM or SGLang, which
speak the same API (ragen eval --base-url works with them unchanged).
"""

from __future__ import annotations

import os
import sys

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve a local model over an OpenAI-compatible API", description=__doc__,
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="hf:PATH", help="a local checkpoint folder or hub id, prefixed with hf:")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--model-name", help="the name clients send as `model` (default: the path's tail, e.g. starpo/model)")
    p.add_argument("--api-key-env", metavar="VAR", help="require the key held in this environment variable")
    p.add_argument("--max-tokens", type=int,
                   help="reply cap when a request sets none (default: the checkpoint's saved reply cap, else 400)")
    p.add_argument("--max-tokens-limit", type=int, default=4096,
                   help="the most max_tokens a request may ask for (default 4096)")
    p.add_argument("--max-context", type=int,
                   help="most prompt + reply tokens (default and upper bound: the model's context length)")
    p.add_argument("--workers", type=int, default=32, help="threads serving connections (default 32)")
    p.add_argument("--idle-timeout", type=float, default=30.0,
                   help="seconds a connection may stay silent before it is closed (default 30)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="most rows decoding together; new requests join the running batch (default 16)")
    p.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
    p.add_argument("--dtype", default="auto", help="auto (bfloat16 on GPU, else float32), float32, bfloat16, float16")
    p.add_argument("--verbose", action="store_true", help="log every request")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..devices import passive_omp

    passive_omp()  # before torch is imported: idle OpenMP threads must not spin on a shared CPU
    from ..cli import CLIError
    from ..serve import make_server, served_name

    kind, sep, path = args.model.partition(":")
    if kind != "hf" or not sep or not path:
        raise CLIError(f"expected hf:PATH (a local model), got {args.model!r}")
    if not 0 <= args.port <= 65535:
        raise CLIError(f"--port must be in 0..65535, got {args.port}")
    if min(args.max_tokens or 1, args.batch_size, args.max_tokens_limit, args.workers) < 1:
        raise CLIError("--max-tokens, --max-tokens-limit, --batch-size and --workers must be >= 1")
    if args.max_tokens is not None and args.max_tokens > args.max_tokens_limit:
        raise CLIError(f"--max-tokens {args.max_tokens} is over --max-tokens-limit {args.max_tokens_limit}")
    if args.max_context is not None and args.max_context < 2:
        raise CLIError("--max-context must be >= 2")
    if not (0 < args.idle_timeout < float("inf")):
        raise CLIError(f"--idle-timeout must be a positive number of seconds, got {args.idle_timeout}")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise CLIError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    name = args.model_name or served_name(path)
    aliases = (os.path.basename(os.path.normpath(path)), path, args.model)
    try:
        from ..agents.hf import HFAgent, resolve_model_path

        resolve_model_path(path)  # a missing folder: one line now, before torch loads
        from ..serve import HFBackend

        agent = HFAgent(path, max_tokens=args.max_tokens, batch_size=args.batch_size, device=args.device,
                        dtype=args.dtype)
        backend = HFBackend(agent, name, aliases=aliases, max_tokens_limit=args.max_tokens_limit,
                            max_context=args.max_context, batch_size=args.batch_size)
    except (ImportError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    try:
        server = make_server(backend, args.host, args.port, api_key=api_key, verbose=args.verbose,
                             workers=args.workers, idle_timeout=args.idle_timeout)
    except OSError as exc:
        backend.close()
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    host = args.host if ":" not in args.host else f"[{args.host}]"
    if args.host not in LOOPBACK:
        print(f"warning: listening on {args.host}: anyone who can reach this port can use the model"
              + ("" if api_key else " (consider --api-key-env)"), file=sys.stderr)
    print(f"serving {args.model} as model {name!r} on {agent.device} at http://{host}:{server.server_port}/v1 "
          f"(context {backend.max_context} tokens, replies up to {args.max_tokens_limit}; Ctrl-C to stop)", flush=True)
    if hasattr(agent, "describe"):
        print(agent.describe(), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        backend.close()
        agent.close()
    return 0
