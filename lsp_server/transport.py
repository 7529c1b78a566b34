"""Reading LSP's frames (`Content-Length: N`, a blank line, N bytes of JSON) with bounds, and
serving a connection.

pygls' reader trusts the stream: a header line with no end is read whole, `Content-Length:
100000000000` is allocated (MemoryError), and a message whose params do not fit their type
(a hover at line -1) is logged and never answered. Here a header line is at most
MAX_HEADER_LINE bytes (the rest of a longer one is skipped), a body at most MAX_BODY (a
larger one is skipped as it arrives, never held), and each of them, and a body that is no
JSON or no valid message, is answered with an error (id null where the id is not known):
the connection goes on.

Sockets (`serve_one_client`): the first connection that sends `initialize` within the
deadline is the client; one that closes or says nothing before that (a port probe) is
dropped and the server listens again. Once a client is in, the listener closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
from typing import Any, Protocol

from lsprotocol.types import ResponseError
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest, JsonRpcParseError
from pygls.io_ import StdoutWriter

from lsp_server.rpc import FusionLensProtocol

logger = logging.getLogger("fusionlens.lsp")

MAX_HEADER_LINE = 64 * 1024
MAX_BODY = 64 * 1024 * 1024  # a didOpen of a file far past lsp_server.reading's cap still fits
READ_BYTES = 64 * 1024
INITIALIZE_TIMEOUT_S = 10.0  # a socket connection has this long to send `initialize`


class Source(Protocol):
    async def read(self, n: int) -> bytes: ...  # at most n bytes; b"" at the end


class StdinSource:
    """Standard input, read by a thread (a pipe may be no file asyncio can watch), a bounded
    number of chunks ahead."""

    def __init__(self, fd: int = 0) -> None:
        self._fd = fd
        self._queue: asyncio.Queue[bytes] | None = None

    async def read(self, n: int) -> bytes:
        if self._queue is None:
            self._queue = asyncio.Queue(maxsize=16)
            loop = asyncio.get_running_loop()
            threading.Thread(target=self._pump, args=(loop, self._queue), name="fusionlens-stdin",
                             daemon=True).start()
        return await self._queue.get()

    def _pump(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes]) -> None:
        while True:
            try:
                chunk = os.read(self._fd, READ_BYTES)
            except OSError:
                chunk = b""
            try:
                asyncio.run_coroutine_threadsafe(queue.put(chunk), loop).result()
            except Exception:  # noqa: BLE001 - the loop is gone
                return
            if not chunk:
                return


class _Frames:
    """Lines and bodies from a Source, never holding more than a bounded line or body."""

    def __init__(self, source: Source) -> None:
        self._source = source
        self._buf = bytearray()

    async def _fill(self) -> bool:
        chunk = await self._source.read(READ_BYTES)
        self._buf += chunk
        return bool(chunk)

    async def line(self) -> tuple[bytes, bool] | None:
        """The next line without its end, and whether it was too long (then b""); None at the end."""
        too_long, scanned = False, 0
        while True:
            end = self._buf.find(b"\n", scanned)
            if end >= 0:
                line = b"" if too_long or end > MAX_HEADER_LINE else bytes(self._buf[:end])
                del self._buf[:end + 1]
                return line.rstrip(b"\r"), too_long or end > MAX_HEADER_LINE
            if len(self._buf) > MAX_HEADER_LINE:
                too_long = True
                self._buf.clear()
            scanned = len(self._buf)
            if not await self._fill():
                return None

    async def body(self, n: int) -> bytes | None:
        while len(self._buf) < n:
            if not await self._fill():
                return None
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def skip(self, n: int) -> bool:
        while n > 0:
            if not self._buf and not await self._fill():
                return False
            k = min(n, len(self._buf))
            del self._buf[:k]
            n -= k
        return True


async def read_messages(source: Source, protocol: FusionLensProtocol, stop: threading.Event | None = None) -> None:
    """Hand every message of `source` to `protocol` until the source ends (or `stop`)."""
    frames = _Frames(source)
    while stop is None or not stop.is_set():
        length, problem, seen = None, None, False
        while True:
            got = await frames.line()
            if got is None:
                return
            line, too_long = got
            if not line and not too_long:
                if seen:
                    break
                continue  # blank lines between messages
            seen = True
            if too_long:
                problem = f"a header line longer than {MAX_HEADER_LINE} bytes"
                continue
            key, _, value = line.partition(b":")
            if key.strip().lower() == b"content-length":
                value = value.strip()
                length = int(value) if value.isdigit() and len(value) <= 20 else None
                problem = problem if length is not None else f"Content-Length {value[:40]!r} is no size"
        if length is not None and length > MAX_BODY:
            problem = f"a message of {length} bytes (at most {MAX_BODY} are read)"
        elif length is None and problem is None:
            problem = "a message without Content-Length"
        if problem is not None:
            _refuse(protocol, None, JsonRpcInvalidRequest(f"refused {problem}; it was skipped"))
            if length is not None and not await frames.skip(length):
                return
            continue
        assert length is not None
        body = await frames.body(length)
        if body is None:
            return
        handle_body(protocol, body)
        await asyncio.sleep(0)  # the handlers' tasks run between messages, even in a burst


def handle_body(protocol: FusionLensProtocol, body: bytes) -> None:
    """One message's JSON: handled, or answered with why it is not (never silence)."""
    try:
        data = json.loads(body)
    except ValueError as e:  # UnicodeDecodeError too
        _refuse(protocol, None, JsonRpcParseError(f"not JSON: {e}"))
        return
    if not isinstance(data, dict):
        _refuse(protocol, None, JsonRpcInvalidRequest("a message must be a JSON object"))
        return
    msg_id = data.get("id")
    msg_id = msg_id if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) else None
    try:
        message = protocol.structure_message(data)
    except JsonRpcException as e:
        method = data.get("method")
        if "method" in data and "id" in data:  # a request: its answer says why
            _refuse(protocol, msg_id, JsonRpcInvalidParams(f"invalid params of {str(method)[:100]}: "
                                                           "a value out of its type's range or of the wrong type"))
        elif "method" not in data:
            logger.warning("dropped a response that does not fit its request: %s", e)
        else:
            logger.warning("dropped %s: its params do not fit its type", str(method)[:100])
        return
    try:
        protocol.handle_message(message)
    except Exception:  # noqa: BLE001 - one message never stops the server
        logger.exception("handling %s failed", str(data.get("method"))[:100])


def _refuse(protocol: FusionLensProtocol, msg_id: Any, error: JsonRpcException) -> None:
    logger.warning("%s", error.message)
    with contextlib.suppress(Exception):  # the client may be gone
        protocol.send_error(msg_id, ResponseError(code=error.code, message=error.message))


# --- serving -------------------------------------------------------------------------------------

def serve_stdio(server: Any) -> None:
    """LSP over stdin and stdout (pygls' start_io, with the bounded reader)."""
    server._stop_event = stop = threading.Event()
    server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
    try:
        asyncio.run(read_messages(StdinSource(), server.protocol, stop))
    except BrokenPipeError:
        logger.error("the client is gone: shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


class _StreamSource:
    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def read(self, n: int) -> bytes:
        try:
            return await self._reader.read(n)
        except ConnectionError:
            return b""


def serve_one_client(server: Any, listen: Any, where: str, init_timeout: float = INITIALIZE_TIMEOUT_S) -> None:
    """Serve LSP to the first connection on the listener `listen(on_connect)` starts (an
    awaitable of an asyncio.Server) that sends `initialize` within `init_timeout` s; the
    listener closes then (a second connection is refused), and the server ends when that
    client disconnects. A connection before it that closes, sends `exit` or says nothing in
    time is dropped, and the next one is waited for; one at a time (others are closed)."""
    server._stop_event = stop = threading.Event()
    try:
        asyncio.run(_serve_connections(server.protocol, listen, where, init_timeout, stop))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        server.shutdown()


async def _serve_connections(protocol: FusionLensProtocol, listen: Any, where: str, init_timeout: float,
                             stop: threading.Event) -> None:
    pending: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    busy = False

    def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal busy
        if busy:
            logger.warning("refused a second connection on %s: one client only", where)
            writer.close()
            return
        busy = True
        pending.put_nowait((reader, writer))

    listener = await listen(on_connect)
    logger.info("listening on %s (one client)", where)
    try:
        while True:
            reader, writer = await pending.get()
            if await _serve_if_initialized(protocol, reader, writer, init_timeout, stop, listener):
                return
            logger.warning("a connection on %s ended or sent nothing within %g s before initialize: "
                           "listening again", where, init_timeout)
            busy = False
    finally:
        listener.close()


async def _serve_if_initialized(protocol: FusionLensProtocol, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter, init_timeout: float, stop: threading.Event,
                                listener: asyncio.Server) -> bool:
    """Read the connection; True once it was the client (initialized, then served to its
    end), False when it ended or timed out before `initialize` (it is closed)."""
    initialized = asyncio.Event()

    def on_initialize() -> None:  # before its answer is sent: no one else gets in after it
        listener.close()
        initialized.set()

    protocol.on_initialize = on_initialize
    protocol.on_early_exit = writer.close
    protocol.set_writer(writer)
    task = asyncio.get_running_loop().create_task(read_messages(_StreamSource(reader), protocol, stop))
    waiting = asyncio.get_running_loop().create_task(initialized.wait())
    try:
        await asyncio.wait([task, waiting], timeout=init_timeout, return_when=asyncio.FIRST_COMPLETED)
        if initialized.is_set():
            await task  # the client's, to its end
            return True
        task.cancel()
        return False
    finally:
        waiting.cancel()
        protocol.on_initialize = protocol.on_early_exit = None
        writer.close()
