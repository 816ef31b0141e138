"""`tuneplan serve`: the web planner on http://127.0.0.1:8000/ (FastAPI + uvicorn, the `web` extra)."""

from __future__ import annotations

import argparse
import socket
import sys

from tuneplan.commands.common import nonneg_int
from tuneplan.errors import InputError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def register(sub) -> None:
    p = sub.add_parser("serve", help="the web planner (FastAPI)",
                       description="Serve the web planner: a page at / that estimates as you type and "
                                   "plans over GPU types and counts, and its JSON API (documented at /docs). "
                                   "Binds to localhost unless --host says otherwise.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=nonneg_int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--hub", action="store_true",
                   help="resolve model ids outside the catalog on the Hugging Face Hub (default: catalog only)")
    p.add_argument("--log-level", default="warning",
                   choices=("critical", "error", "warning", "info", "debug"), help="uvicorn's (default warning)")
    p.set_defaults(func=run)


def _bind(host: str, port: int) -> socket.socket:
    if port > 65535:
        raise InputError("port", f"must be at most 65535 (got {port})")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError("host", f"cannot resolve '{host}': {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise InputError("port", f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    return sock


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from tuneplan.web.app import create_app
    except ImportError as exc:
        raise InputError("serve", f"needs the web extra ({exc.name} is missing): "
                         "pip install 'tuneplan[web]'") from None
    sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    app = create_app(allow_hub=args.hub)
    url = _url(args.host, port)
    print(f"tuneplan web planner: {url}  (API docs: {url}docs; Ctrl-C to stop)", flush=True)
    if args.host not in LOCAL_HOSTS:
        print(f"note: bound to {args.host}: other machines on the network can reach this server", file=sys.stderr)
    config = uvicorn.Config(app, log_level=args.log_level, access_log=args.log_level in ("info", "debug"))
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
