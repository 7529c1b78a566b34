"""FusionLens language server (pygls 2.x).

The server process never imports torch or user code: it finds targets by parsing
(`fusionlens.report.discovery.find_targets`) and compiles them in a worker process
(`lsp_server.worker`) that it starts, feeds over a pipe, times out and restarts.
"""

__version__ = "0.1.0"
