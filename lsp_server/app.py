"""`fusionlens-lsp`: build the FusionLens language server and run it.

Run `fusionlens-lsp` (stdio; `--stdio` is accepted), `fusionlens-lsp --socket PATH` (a unix
socket only this user can open) or `fusionlens-lsp --tcp HOST:PORT` (any local user can
connect: docs/lsp.md). Over a socket the server serves one client and exits when it leaves.
`python -P -m lsp_server` is the same server (-P: see lsp_server/__main__.py). SIGTERM and
SIGHUP end it as `exit` does: the worker's processes killed, a socket removed.
The contract with clients is docs/lsp.md.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import sys
from typing import Any

from lsp_server import __version__
from lsp_server.commands import register_commands
from lsp_server.features import register_features
from lsp_server.server import FusionLensServer
from lsp_server.sockets import SocketPath
from lsp_server.transport import INITIALIZE_TIMEOUT_S, serve_one_client, serve_stdio


def build_server() -> FusionLensServer:
    """A new server with every feature, command and custom request registered."""
    server = FusionLensServer()
    register_features(server)
    register_commands(server)
    return server


# --- sockets ------------------------------------------------------------------------------

def serve_unix(server: FusionLensServer, path: str, init_timeout: float = INITIALIZE_TIMEOUT_S) -> None:
    claimed = SocketPath(path)
    path = claimed.claim()
    server.cleanups.append(claimed.release)

    async def listen(on_connect: Any) -> asyncio.Server:
        old = os.umask(0o177)  # the socket is created 0600: only this user can connect
        try:
            listener = await asyncio.start_unix_server(on_connect, path=path)
        finally:
            os.umask(old)
        claimed.bound()
        return listener

    try:
        serve_one_client(server, listen, path, init_timeout)
    finally:
        claimed.release()


def serve_tcp(server: FusionLensServer, host: str, port: int, init_timeout: float = INITIALIZE_TIMEOUT_S) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        logging.getLogger("fusionlens.lsp").warning(
            "--tcp %s: not a loopback address; other machines can connect and run code (docs/lsp.md)", host)

    async def listen(on_connect: Any) -> asyncio.Server:
        return await asyncio.start_server(on_connect, host, port)

    serve_one_client(server, listen, f"{host}:{port}", init_timeout)


def _end_on_signals(server: FusionLensServer) -> None:
    """SIGTERM (an editor stopping the server) and SIGHUP: clean up as `exit` does, at once."""
    def end(signum: int, frame: Any) -> None:
        server.run_cleanups()
        logging.shutdown()
        os._exit(128 + signum)

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), end)


# --- entry point --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fusionlens-lsp", description="FusionLens language server")
    parser.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    parser.add_argument("--socket", metavar="PATH", help="listen on a unix socket (mode 0600, in a folder "
                        "only you can use) for one client, instead of stdio")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP for one client, instead of stdio: "
                        "any local user can connect first; prefer stdio or --socket")
    parser.add_argument("--initialize-timeout", type=float, default=INITIALIZE_TIMEOUT_S, metavar="SECONDS",
                        help="--socket/--tcp: a connection that sends no initialize within this long is "
                        f"dropped and the server listens again (default {INITIALIZE_TIMEOUT_S:g})")
    parser.add_argument("--log-level", default="WARNING", help="log level for stderr (default WARNING)")
    parser.add_argument("--log-file", help="log to this file instead of stderr")
    parser.add_argument("--version", action="version", version=f"fusionlens-lsp {__version__}")
    args, _unknown = parser.parse_known_args(argv)  # clients add flags of their own (--clientProcessId=...)
    target = {"filename": args.log_file} if args.log_file else {"stream": sys.stderr}
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", **target)
    server = build_server()
    _end_on_signals(server)
    if args.socket:
        serve_unix(server, args.socket, args.initialize_timeout)
    elif args.tcp:
        host, _, port = args.tcp.rpartition(":")
        serve_tcp(server, host.strip("[]") or "127.0.0.1", int(port), args.initialize_timeout)
    else:
        serve_stdio(server)


if __name__ == "__main__":
    main()
