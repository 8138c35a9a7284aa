"""``ragen openenv-server ENV_ID [--host 127.0.0.1] [--port 8000] [--max-sessions N]``:
serve one environment as an OpenEnv server (OpenEnv's own app under uvicorn; the ``openenv``
extra).

Multi-turn play goes through the WebSocket ``/ws`` (one env per connection)::

    ragen openenv-server ragen/Sokoban-v0 --port 8000 &
    python - <<'EOF'
    from ragen_envs.integrations.openenv import RagenEnvClient
    with RagenEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        r = env.reset(seed=3)
        print(r.observation.system_prompt, r.observation.observation)
        r = env.step("<think>push</think><answer>Up</answer>")
        print(r.reward, r.done, r.observation.observation)
    EOF

Also served: ``/schema``, ``/metadata``, ``/health`` and the stateless HTTP ``/reset`` and
``/step``. Listens on 127.0.0.1 unless --host says otherwise; --port 0 picks a free port
(printed). At most --max-sessions connections hold an env at once; a closed or dropped
connection (WebSocket pings every 20 s) frees its env, and so does one silent for
--idle-timeout seconds.

Clients choose reset keywords (``max_turns``, ``dim_room``, ...) within bounds that only the
operator widens (``--kwarg-limit dim_room=30``; the defaults: ``ragen_envs.envs.limits``); a
reset that runs past --reset-timeout seconds, or whose client leaves, is cancelled. Ctrl-C or
SIGTERM stops it within 2 s, running resets included.
"""

from __future__ import annotations

import argparse
import sys

from . import add_kwarg_limit_flag

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(sub) -> None:
    p = sub.add_parser("openenv-server", help="serve an environment as an OpenEnv server (WebSocket /ws)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_id", metavar="ENV_ID", help="a registered id, e.g. ragen/Sokoban-v0 (see `ragen list`)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--max-sessions", type=int, default=64, help="most concurrent sessions (default 64)")
    p.add_argument("--idle-timeout", type=float, default=600.0,
                   help="seconds a connection may stay silent before its session is freed (default 600)")
    p.add_argument("--env-kwarg", action="append", metavar="KEY=VALUE",
                   help="constructor keyword for every session's env (JSON value), repeatable")
    add_kwarg_limit_flag(p)
    p.add_argument("--reset-timeout", type=float, default=10.0,
                   help="seconds a reset (with its level generation) may run before it is cancelled (default 10)")
    p.set_defaults(run=run)


def build_server(env_id: str, host: str, port: int, max_sessions: int, env_kwargs: dict | None = None,
                 idle_timeout: float = 600.0, kwarg_bounds: dict | None = None, reset_timeout: float = 10.0):
    """A ``uvicorn.Server`` for ``env_id`` (not started); raises CLIError on bad input."""
    from ..cli import CLIError
    from . import make_env_or_fail

    if not 0 <= port <= 65535:
        raise CLIError(f"--port must be in 0..65535, got {port}")
    if max_sessions < 1:
        raise CLIError(f"--max-sessions must be >= 1, got {max_sessions}")
    if not idle_timeout > 0:
        raise CLIError(f"--idle-timeout must be > 0 seconds, got {idle_timeout}")
    if not 0 < reset_timeout < float("inf"):
        raise CLIError(f"--reset-timeout must be a positive number of seconds, got {reset_timeout}")
    make_env_or_fail(env_id, bounds=kwarg_bounds, **(env_kwargs or {})).close()
    try:
        import uvicorn

        from ..integrations.openenv import create_ragen_app
    except ImportError as exc:
        raise CLIError(f"{exc}; install the extra: pip install 'ragen-envs[openenv]'") from None
    try:  # builds the env once more: a remote WebShop that went away since is one line too
        app = create_ragen_app(env_id, env_kwargs, max_sessions=max_sessions, idle_timeout_s=idle_timeout,
                               kwarg_bounds=kwarg_bounds, reset_timeout_s=reset_timeout)
    except ValueError as exc:  # RagenEnvError, RemoteWebShopSetupError
        raise CLIError(str(exc)) from None
    # a connection still busy 1 s after SIGTERM has its task cancelled (its reset stops too)
    config = uvicorn.Config(app, host=host, port=port, log_level="error", ws_ping_interval=20.0,
                            ws_ping_timeout=20.0, ws_max_size=1 << 20, timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    server.ragen_stopping = app.state.ragen_stopping
    return server


def run(args) -> int:
    from ..cli import CLIError
    from . import kwarg_bounds_or_fail, parse_env_kwargs

    server = build_server(args.env_id, args.host, args.port, args.max_sessions, parse_env_kwargs(args.env_kwarg),
                          args.idle_timeout, kwarg_bounds_or_fail(args.kwarg_limit), args.reset_timeout)
    if args.host not in LOOPBACK:
        print(f"warning: listening on {args.host}: anyone who can reach it can use it", file=sys.stderr)
    import asyncio
    import socket

    try:
        sock = socket.create_server((args.host, args.port), family=socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    except OSError as exc:
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc}") from None
    host, port = sock.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    print(f"serving {args.env_id} (OpenEnv, WebSocket {url.replace('http', 'ws', 1)}/ws, "
          f"at most {args.max_sessions} sessions) on {url}", flush=True)
    try:
        asyncio.run(_serve(server, sock))
    except KeyboardInterrupt:
        pass
    finally:
        server.ragen_stopping.set()
        sock.close()
    return 0


async def _serve(server, sock) -> None:
    """uvicorn's ``serve``, with running resets told to stop as soon as shutdown begins."""
    import asyncio

    async def watch() -> None:
        while not server.should_exit:
            await asyncio.sleep(0.2)
        server.ragen_stopping.set()

    watcher = asyncio.ensure_future(watch())
    try:
        await server.serve(sockets=[sock])
    finally:
        server.ragen_stopping.set()
        watcher.cancel()
