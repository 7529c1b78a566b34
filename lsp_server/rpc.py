"""The server's JSON-RPC protocol: pygls' LanguageServerProtocol, keeping LSP's order and
holding nothing per message once it is handled.

- LSP's order, on every transport: before `initialize`, requests are answered -32002
  (ServerNotInitialized) and notifications dropped, except `exit`; a second `initialize` is
  answered -32600.
- pygls 2.1 files the future of every handler it runs as a task, a thread or a generator
  (its built-in didOpen/didChange/didClose/executeCommand... handlers are generators) in
  `_request_futures` under a fresh uuid, and only a request's answer removes its entry: every
  keystroke's notification stayed there for good. Here an entry that is no client request's
  is removed once its future is done.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidRequest, JsonRpcServerNotInitialized
from pygls.protocol import LanguageServerProtocol

logger = logging.getLogger("fusionlens.lsp")


class FusionLensProtocol(LanguageServerProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initialize_received = False
        # called when `initialize` arrives (a socket transport stops waiting for it then)
        self.on_initialize: Callable[[], None] | None = None
        # called for `exit` before `initialize` (a socket transport closes that connection
        # only); None: exit as LSP says
        self.on_early_exit: Callable[[], None] | None = None

    def handle_message(self, message: Any) -> None:
        method = getattr(message, "method", None)
        msg_id = getattr(message, "id", None)
        error: Any = None
        if method == T.INITIALIZE:
            if self.initialize_received:
                error = JsonRpcInvalidRequest("initialize was already received")
            self.initialize_received = True
        elif method == T.EXIT and not self.initialize_received and self.on_early_exit is not None:
            self.on_early_exit()
            return
        elif method is not None and method != T.EXIT and not self.initialize_received:
            error = JsonRpcServerNotInitialized(f"{method} before initialize: send initialize first")
        if error is None:
            if method == T.INITIALIZE and self.on_initialize is not None:
                self.on_initialize()
            super().handle_message(message)
        elif msg_id is not None:
            logger.warning("refused %s: %s", method, error.message)
            self._send_response(msg_id, None, error.to_response_error())
        else:
            logger.warning("dropped %s: %s", method, error.message)

    def send_error(self, msg_id: Any, error: Any) -> None:
        """An error answer (a ResponseError) to a message the transport could not hand on."""
        self._send_response(msg_id, None, error)

    def _execute_handler(self, msg_id: Any, handler: Any, callback: Any, args: Any = None,
                         kwargs: Any = None) -> None:
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        if _answers_a_request(callback, self):
            return  # the client's id: pygls removes it when it answers (or the client cancels)
        future = self._request_futures.get(msg_id)
        if future is not None:
            future.add_done_callback(functools.partial(self._forget, msg_id))

    def _forget(self, msg_id: Any, future: Any) -> None:
        if self._request_futures.get(msg_id) is future:
            del self._request_futures[msg_id]


def _answers_a_request(callback: Any, protocol: FusionLensProtocol) -> bool:
    """Whether pygls runs the handler for a client request (its answer removes the entry)."""
    func = callback.func if isinstance(callback, functools.partial) else None
    return (getattr(func, "__func__", None) is type(protocol)._send_handler_result
            and getattr(func, "__self__", None) is protocol)
