"""`fusionlens-lsp`: build the FusionLens language server and run it.

Run `fusionlens-lsp` (stdio; `--stdio` is accepted) or `fusionlens-lsp --tcp HOST:PORT`.
The contract with clients is docs/lsp.md.
"""

from __future__ import annotations

import argparse
import logging
import sys

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


# --- entry point --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fusionlens-lsp", description="FusionLens language server")
    parser.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio")
    parser.add_argument("--log-level", default="WARNING", help="log level for stderr (default WARNING)")
    parser.add_argument("--log-file", help="log to this file instead of stderr")
    parser.add_argument("--version", action="version", version=f"fusionlens-lsp {__version__}")
    args, _unknown = parser.parse_known_args(argv)  # clients add flags of their own (--clientProcessId=...)
    target = {"filename": args.log_file} if args.log_file else {"stream": sys.stderr}
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", **target)
    server = build_server()
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        server.start_io()


if __name__ == "__main__":
    main()
