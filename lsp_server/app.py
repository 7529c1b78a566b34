"""`fusionlens-lsp`: build the FusionLens language server and run it.

Run `fusionlens-lsp` (stdio; `--stdio` is accepted), `fusionlens-lsp --socket PATH` (a unix
socket only this user can open) or `fusionlens-lsp --tcp HOST:PORT` (any local user can
connect: docs/lsp.md). Over a socket the server serves one client and exits when it leaves.
The contract with clients is docs/lsp.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import stat
import sys
from typing import Any

from lsp_server import __version__
from lsp_server.commands import register_commands
from lsp_server.features import register_features
from lsp_server.server import FusionLensServer


def build_server() -> FusionLensServer:
    """A new server with every feature, command and custom request registered."""
    server = FusionLensServer()
    register_features(server)
    register_commands(server)
    return server


# --- sockets ------------------------------------------------------------------------------

def _socket_path(path: str) -> str:
    """The unix socket's path, in a folder only this user can use (created 0700 where missing);
    a stale socket of ours there is removed. Exits with a message otherwise."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    os.makedirs(folder, 0o700, exist_ok=True)
    st = os.stat(folder)
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        sys.exit(f"fusionlens-lsp: --socket {path}: {folder} must be a folder only you can use "
                 f"(yours, mode 0700; it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o})")
    with contextlib.suppress(FileNotFoundError):
        old = os.lstat(path)
        if not stat.S_ISSOCK(old.st_mode) or old.st_uid != os.getuid():
            sys.exit(f"fusionlens-lsp: --socket {path}: something else is there; not replacing it")
        os.unlink(path)  # a socket of ours left by a server that is gone
    return path


def serve_unix(server: FusionLensServer, path: str) -> None:
    path = _socket_path(path)

    async def listen(on_connect: Any) -> asyncio.Server:
        old = os.umask(0o177)  # the socket is created 0600: only this user can connect
        try:
            return await asyncio.start_unix_server(on_connect, path=path)
        finally:
            os.umask(old)

    try:
        server.serve_one_client(listen, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def serve_tcp(server: FusionLensServer, host: str, port: int) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        logging.getLogger("fusionlens.lsp").warning(
            "--tcp %s: not a loopback address; other machines can connect and run code (docs/lsp.md)", host)

    async def listen(on_connect: Any) -> asyncio.Server:
        return await asyncio.start_server(on_connect, host, port)

    server.serve_one_client(listen, f"{host}:{port}")


# --- entry point --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fusionlens-lsp", description="FusionLens language server")
    parser.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    parser.add_argument("--socket", metavar="PATH", help="listen on a unix socket (mode 0600, in a folder "
                        "only you can use) for one client, instead of stdio")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP for one client, instead of stdio: "
                        "any local user can connect first; prefer stdio or --socket")
    parser.add_argument("--log-level", default="WARNING", help="log level for stderr (default WARNING)")
    parser.add_argument("--log-file", help="log to this file instead of stderr")
    parser.add_argument("--version", action="version", version=f"fusionlens-lsp {__version__}")
    args, _unknown = parser.parse_known_args(argv)  # clients add flags of their own (--clientProcessId=...)
    target = {"filename": args.log_file} if args.log_file else {"stream": sys.stderr}
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", **target)
    server = build_server()
    if args.socket:
        serve_unix(server, args.socket)
    elif args.tcp:
        host, _, port = args.tcp.rpartition(":")
        serve_tcp(server, host.strip("[]") or "127.0.0.1", int(port))
    else:
        server.start_io()


if __name__ == "__main__":
    main()
