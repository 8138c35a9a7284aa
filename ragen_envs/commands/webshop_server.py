"""``ragen webshop-server --backend mini --port N [--host 127.0.0.1]``: serve WebShop over HTTP.

The endpoints are AgentGym's (``/create``, ``/reset``, ``/step``, ``/available_actions``,
``/observation``, ``/instruction_text``) plus ``/close`` and ``/goals``; clients::

    ragen webshop-server --backend mini --port 36001 &
    python -c "import gymnasium as gym, ragen_envs; \\
      env = gym.make('ragen/WebShop-v0', backend='remote', base_url='http://127.0.0.1:36001')"

Listens on 127.0.0.1 unless --host says otherwise; --port 0 picks a free port (printed).
Sessions are capped (--max-sessions, least recently used evicted) and expire when idle
(--session-ttl seconds). Session ids count up from 0 and any client may use any session, as
in AgentGym; --private-ids draws unguessable ids and turns /list_envs off. A full table evicts
the least recently used session of the client address holding the most. Requests are read
whole without a thread (a connection silent for --idle-timeout seconds is closed, a request
not complete within --idle-timeout seconds of its first byte gets 408), then answered by
--workers threads.
Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import sys

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(sub) -> None:
    p = sub.add_parser("webshop-server", help="serve WebShop over HTTP (AgentGym endpoints)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="mini", choices=("mini", "inprocess"), help="what to serve (default mini)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, required=True, help="port (0 picks a free one)")
    p.add_argument("--catalog", help="a mini catalog file (default: the shipped mini-v1-seed0-n1000)")
    p.add_argument("--max-sessions", type=int, default=1024, help="most live sessions (default 1024)")
    p.add_argument("--session-ttl", type=float, default=3600.0, help="idle seconds before a session expires (default 3600)")
    p.add_argument("--private-ids", action="store_true",
                   help="unguessable random session ids and no /list_envs (default: ids 0, 1, 2, ... as AgentGym)")
    p.add_argument("--workers", type=int, default=32, help="threads serving connections (default 32)")
    p.add_argument("--idle-timeout", type=float, default=30.0,
                   help="seconds a connection may stay silent before it is closed (default 30)")
    p.add_argument("--verbose", action="store_true", help="log every request")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..cli import CLIError
    from ..webshop.server import serve

    if not 0 <= args.port <= 65535:
        raise CLIError(f"--port must be in 0..65535, got {args.port}")
    try:
        server = serve(args.backend, host=args.host, port=args.port, catalog=args.catalog,
                       max_sessions=args.max_sessions, session_ttl=args.session_ttl, verbose=args.verbose,
                       private_ids=args.private_ids, workers=args.workers, idle_timeout=args.idle_timeout)
    except (ValueError, OSError) as exc:
        raise CLIError(str(exc)) from None
    if args.host not in LOOPBACK:
        print(f"warning: listening on {args.host}: anyone who can reach it can use it", file=sys.stderr)
    info = server.info
    print(f"serving WebShop ({info['backend']}, {info['catalog_id']}, {info['num_goals']} goals) on {server.url}",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0
