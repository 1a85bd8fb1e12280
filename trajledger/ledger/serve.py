"""Serve a ledger's log over HTTP as a C2SP tiled log, read-only, so that others can watch it.

Scope: `LogServer` answers ``GET`` and ``HEAD`` for exactly the resources of c2sp.org/tlog-tiles:
``/checkpoint`` (``text/plain; charset=utf-8``, never cached: it changes with every append),
``/tile/<L>/<N>[.p/<W>]`` and ``/tile/entries/<N>[.p/<W>]`` (``application/octet-stream``,
``Cache-Control: public, max-age=31536000, immutable``: a tile path's bytes never change; entry
bundles gzip-compressed when the client accepts it, as the spec recommends), and trajledger's
``/key-handovers/<n>`` (the log key's rotations, ``verify.log_key``; not cached) and
``/envelopes/<64 hex>`` (the envelopes the log publishes, `Published`: those of its records of
the kinds its policy's ``publish`` names, revocations, erasures and policies by default, so that
a buyer watching the log takes them in; immutable). Paths are matched
against the spec's grammar (levels 0..63, three-digit groups with ``x`` prefixes, widths 1..255,
no leading zeros), never joined from the request: nothing else in the ledger (``log/.state``,
keys, objects) can be named, nor a tile or bundle beyond the checkpoint on disk (an append writes
them before it publishes them). A file is served only when it is a regular file inside the log
directory (symbolic links are refused) and no larger than the spec allows (a full tile is 8,192
bytes; an entry bundle at most 256 entries of at most 65,535 bytes). The server never writes.
A file it cannot read (an I/O error, a permission: `errors.read_failure`) is ``503``, never
``404``: a client takes a 404 for "the log has none" (a missing tile is a log that does not
give its signed root, a missing handover the end of the key's chain, a missing envelope one
not published), a verdict on the log for a fault of this machine (review fault28).

Connections: a fixed number of worker threads (`WORKERS`) answer requests; a connection waiting
for its next request (HTTP/1.1 keep-alive) or for its first holds no thread (one selector
watches them all) and is closed after `IDLE_TIMEOUT` seconds. The selector's thread also reads
each request's head (request line and headers, at most `MAX_HEAD` bytes) as its bytes come:
once a request starts, the client has `REQUEST_TIMEOUT` seconds to send all of it (however it
spaces its bytes), and only a whole request reaches a worker, which reads nothing more (GET and
HEAD have no body; another method is refused and its connection closed): a client sending
slowly holds no worker. A worker writes nothing to the socket either: it makes the whole
response, sends what the socket takes at once, and hands the rest to the selector's thread,
which sends it as the client reads; the client has `REQUEST_TIMEOUT` seconds to take all of it
(else it is closed), and responses waiting so hold at most `MAX_PENDING` bytes together (a
response beyond that is not begun: the connection is closed, the client retries): a client
that does not read holds no worker. At most `MAX_CONNECTIONS` are open; more are closed at once.
A client that goes away mid-response (reset, broken pipe) or times out is no error of the
server's: nothing is printed (a line with ``--verbose``).

It binds to 127.0.0.1 by default; put a TLS-terminating reverse proxy in front for the public
internet, or publish the same files with any static file server (docs/third-party.md shows
nginx and object-storage settings): the log directory *is* the static site.

Non-scope: the write path (``ledger.log``), watching a served log (``ledger.monitor``).
Spec: c2sp.org/tlog-tiles (paths, content types, caching), c2sp.org/tlog-checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
import queue
import re
import selectors
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Collection
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from trajledger.verify.digest import digest_bytes
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.tiles import MAX_ENTRY_SIZE, TILE_HEIGHT, TILE_WIDTH, TileReader

from .errors import read_failure
from .log.layout import parse_tile_rel

__all__ = [
    "CHECKPOINT_CACHE",
    "IDLE_TIMEOUT",
    "MAX_CONNECTIONS",
    "MAX_ENVELOPE",
    "MAX_HEAD",
    "MAX_PENDING",
    "REQUEST_TIMEOUT",
    "TILE_CACHE",
    "WORKERS",
    "LogServer",
    "Published",
    "max_size",
    "published_size",
    "resource_kind",
]

_WIDTH = r"(?:[1-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5])"
_INDEX = r"(?:x[0-9]{3}/)*[0-9]{3}"
_LEVEL = r"(?:[0-9]|[1-5][0-9]|6[0-3])"
_RESOURCE = re.compile(
    rf"(?P<checkpoint>checkpoint)"
    rf"|tile/entries/{_INDEX}(?:\.p/{_WIDTH})?(?P<entries>)"
    rf"|tile/{_LEVEL}/{_INDEX}(?:\.p/{_WIDTH})?(?P<tile>)"
    rf"|key-handovers/[1-9][0-9]{{0,5}}(?P<handover>)"
    rf"|envelopes/[0-9a-f]{{64}}(?P<envelope>)"
)
CHECKPOINT_CACHE = "no-store"
"""The checkpoint changes with every append: never cached (tlog-tiles: "a few seconds" at most)."""
TILE_CACHE = "public, max-age=31536000, immutable"
"""A tile path's bytes never change (tlog-tiles: "caching headers SHOULD be long-lived")."""
_MAX_CHECKPOINT = 1 << 20
MAX_ENVELOPE = 16 << 20
"""The most bytes a served envelope may hold."""
WORKERS = 8
"""Threads answering requests (connections waiting for a request hold none)."""
MAX_CONNECTIONS = 256
"""Open connections at most; a connection beyond it is closed at once (the client retries)."""
MAX_HEAD = 64 << 10
"""Bytes a request's head (its request line and headers) may hold; a longer one is closed."""
REQUEST_TIMEOUT = 10.0
"""Seconds a client has to send a whole request once it started, and to take a whole response
(what the socket did not take at once)."""
MAX_PENDING = 256 << 20
"""Bytes of responses the selector's thread may hold for clients that read slowly (what the
eight workers held at most when they wrote responses themselves)."""
IDLE_TIMEOUT = 30.0
"""Seconds a connection may wait for its next request (or its first) before it is closed."""
_CONTENT_TYPE = {
    "checkpoint": "text/plain; charset=utf-8",
    "handover": "text/plain; charset=utf-8",
    "envelope": "application/vnd.dsse.envelope.v1+json",
    "tile": "application/octet-stream",
    "entries": "application/octet-stream",
}


def resource_kind(path: str) -> str | None:
    """``checkpoint``, ``tile`` or ``entries`` for a tlog-tiles resource path (without the
    leading slash), ``handover`` for a key handover (``key-handovers/<n>``, trajledger's: a
    monitor follows a rotation of the log key with them), ``envelope`` for a published
    envelope (``envelopes/<hex>``), None for anything else."""
    m = _RESOURCE.fullmatch(path)
    if m is None:
        return None
    return next(k for k, v in m.groupdict().items() if v is not None)


def max_size(kind: str) -> int:
    """The most bytes a resource of ``kind`` may hold under the spec."""
    if kind == "tile":
        return TILE_WIDTH * 32
    if kind == "entries":
        return TILE_WIDTH * (2 + MAX_ENTRY_SIZE)
    if kind == "envelope":
        return MAX_ENVELOPE
    return _MAX_CHECKPOINT


def _head_end(data: bytes | bytearray) -> int:
    """Where the first request's head ends in ``data`` (after its blank line), or -1."""
    ends = [i + len(m) for m in (b"\r\n\r\n", b"\n\n") if (i := data.find(m)) >= 0]
    return min(ends, default=-1)


class _Handler(BaseHTTPRequestHandler):
    """Answers one request whose head the selector's thread has read whole (`_Connections`):
    it reads nothing from the socket (GET and HEAD have no body; other methods are refused
    and the connection closed) and writes nothing to it: the response is kept whole in
    ``response`` for the worker to send (`_Connections._respond`)."""

    server: LogServer
    protocol_version = "HTTP/1.1"
    server_version = "trajledger-log"

    def __init__(self, request: Any, client_address: Any, server: LogServer, head: bytes = b""
                 ) -> None:  # fmt: skip
        end = _head_end(head)
        self._head, self.leftover = head[:end], head[end:]
        """Bytes after this request's head: the start of the client's next request."""
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        self.rfile = io.BytesIO(self._head)
        self._out = io.BytesIO()
        self.wfile = self._out
        self.response = b""
        """The whole response (set when the handler finishes)."""

    def finish(self) -> None:
        self.response = self._out.getvalue()
        super().finish()

    def handle(self) -> None:
        """Answer the request; the connection then goes back to the server's selector
        (`close_connection` False) or is closed."""
        self.close_connection = True
        self.handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _refuse_method(self) -> None:
        self._status(405, "read-only: GET and HEAD only", {"Allow": "GET, HEAD"})
        self.close_connection = True  # its body, never read, is not the next request

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_method

    def _status(self, code: int, text: str, headers: dict[str, str] | None = None) -> None:
        data = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _serve(self, *, body: bool) -> None:
        rel = self.path.split("?", 1)[0].removeprefix("/")
        kind = resource_kind(rel)
        if kind is None:
            self._status(404, "not a tlog-tiles resource")
            return
        try:
            data = (self.server.read(rel, kind) if kind != "envelope"
                    else self.server.envelope("sha256:" + rel.rsplit("/", 1)[1]))
        except (OSError, ProvenanceError) as e:
            failed = read_failure(e)
            if failed is None:
                raise
            self._status(503, f"the server cannot read it: {failed.strerror}; try again later")
            return
        if data is None:
            self._status(404, "not found")
            return
        headers = {
            "Content-Type": _CONTENT_TYPE[kind],
            "Cache-Control": CHECKPOINT_CACHE if kind in ("checkpoint", "handover") else TILE_CACHE,
            "X-Content-Type-Options": "nosniff",
        }
        if kind == "entries":
            headers["Vary"] = "Accept-Encoding"
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                data = gzip.compress(data, compresslevel=6, mtime=0)
                headers["Content-Encoding"] = "gzip"
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)


class LogServer(HTTPServer):
    """A read-only HTTP server of one log directory (see the module docstring).

    Use `serve_forever` (or `start` for a background thread) and `shutdown`, then
    `server_close` (`stop` does both).
    """

    request_queue_size = 128  # connections the kernel may hold before they are accepted

    def __init__(
        self,
        directory: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        verbose: bool = False,
        workers: int = WORKERS,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        published: Published | None = None,
    ) -> None:
        """Bind to ``host:port`` (port 0: any free port) and serve ``directory``.

        Args:
            directory: the log directory.
            host: the address to listen on.
            port: the port (0: any free one).
            verbose: log each request, and clients that went away, to stderr.
            workers: threads answering requests.
            max_connections: open connections at most.
            request_timeout: seconds to send a request, and to take a response.
            idle_timeout: seconds a connection may wait for its next request.
            published: the envelopes to serve (`Published`); None serves none.

        Raises:
            OSError: the address cannot be bound, or ``directory`` is not a directory.
        """
        self.directory = Path(directory).resolve(strict=True)
        if not self.directory.is_dir():
            raise NotADirectoryError(f"{directory}: not a directory")
        self.verbose = verbose
        self.request_timeout = request_timeout
        self.published = published
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler, bind_and_activate=False)
        self._connections = _Connections(self, workers, max_connections, idle_timeout)
        try:
            self.server_bind()
            self.server_activate()
        except BaseException:
            self.server_close()
            raise

    @property
    def url(self) -> str:
        """The base URL (``http://host:port/``)."""
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}/"

    def read(self, rel: str, kind: str) -> bytes | None:
        """The bytes of a resource: a regular file under the directory, within its size cap;
        None when there is none (a missing, linked, special or oversized file, or a tile or
        entry bundle the published checkpoint does not cover).

        Raises:
            OSError: the file, or the checkpoint, cannot be read (`errors.read_failure`).
        """
        if kind in ("tile", "entries") and not self._published(rel):
            return None
        return _read_beneath(self.directory, rel, max_size(kind))

    def envelope(self, digest: str) -> bytes | None:
        """A published envelope's bytes (`Published`), or None."""
        return None if self.published is None else self.published(digest)

    def _published(self, rel: str) -> bool:
        """Whether the tile or bundle at ``rel`` lies within the tree of the checkpoint on disk.

        A writer writes the tiles of an append before it publishes (and a crashed append
        leaves some that the next writer removes, and may write other bytes there): served
        with immutable caching, such a file could be kept by a cache under a name whose bytes
        later differ. Only what the published checkpoint covers is served; it is read again
        for each request (not verified: the client does that).
        """
        parsed = parse_tile_rel(rel)
        if parsed is None:
            return False
        level, index, width = parsed
        end = index * TILE_WIDTH + (TILE_WIDTH if width is None else width)
        return end << (TILE_HEIGHT * max(level, 0)) <= published_size(self.directory)

    def start(self, poll_interval: float = 0.1) -> threading.Thread:
        """Serve on a background (daemon) thread; returns it. `stop` waits at most
        ``poll_interval`` seconds for it."""
        self._thread = threading.Thread(
            target=self.serve_forever, args=(poll_interval,), name="log-server", daemon=True
        )
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand an accepted connection to the selector (or close it: too many are open)."""
        if not self._connections.add(request, client_address):
            self.shutdown_request(request)

    def server_close(self) -> None:
        """Close the listening socket, every open connection, and stop the threads."""
        super().server_close()
        self._connections.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or stalled is no error of the server's (nothing printed,
        a line with ``verbose``); anything else is a bug: its traceback."""
        e = sys.exc_info()[1]
        if isinstance(e, ConnectionError | TimeoutError):
            if self.verbose:
                sys.stderr.write(f"{client_address[0]}: {e}\n")
            return
        super().handle_error(request, client_address)


_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_beneath(directory: Path, rel: str) -> int | None:
    """A descriptor of ``directory / rel`` opened one component at a time, each relative to
    the last and none followed if it is a link (``O_NOFOLLOW``; Python 3.11 has no
    ``openat2`` ``RESOLVE_BENEATH``): a directory of the log swapped for a link at any moment
    is never followed, where a check of the path and then an open of it was (rev14). None when
    a component is missing or a link, a directory on the way is not a directory, or it cannot
    be opened (a FIFO planted there opens without waiting for a writer, and is then refused
    as not a regular file). ``rel``: a resource path of the spec's grammar (no ``..`` nor
    empty part).

    Raises:
        OSError: a component that is there cannot be opened (`errors.read_failure`; a link,
            ``ELOOP``, and a socket, ``ENXIO``, are none).
    """
    *parents, name = rel.split("/")
    try:
        at = os.open(directory, _NOFOLLOW | os.O_DIRECTORY)
    except OSError as e:
        _raise_failure(e)
        return None
    try:
        for part in parents:
            nxt = os.open(part, _NOFOLLOW | os.O_DIRECTORY, dir_fd=at)
            os.close(at)
            at = nxt
        return os.open(name, _NOFOLLOW | os.O_NONBLOCK, dir_fd=at)  # (a FIFO: no wait)
    except OSError as e:
        _raise_failure(e)
        return None
    finally:
        os.close(at)


def _raise_failure(e: OSError) -> None:
    """``e`` raised again when the system failed to read what is there; an open that found
    nothing to serve (missing, a link, a socket) returns."""
    if e.errno not in (errno.ELOOP, errno.ENXIO) and read_failure(e) is not None:
        raise e


def published_size(directory: Path) -> int:
    """The size the log directory's published checkpoint states (read, not verified: a client
    verifies); 0 when there is none.

    Raises:
        OSError: it cannot be read (`errors.read_failure`).
    """
    # (read as served: a FIFO planted there held every worker for ever, a link was followed;
    # rev28 finding 2)
    lines = (_read_beneath(directory, "checkpoint", _MAX_CHECKPOINT) or b"").split(b"\n", 2)
    return int(lines[1]) if len(lines) > 1 and lines[1].isdigit() else 0


def _read_beneath(directory: Path, rel: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``directory / rel`` of at most ``limit`` bytes, opened
    beneath the directory without following a link or waiting on a FIFO (`_open_beneath`);
    None when there is none (missing, a link, a special or oversized file).

    Raises:
        OSError: it cannot be read (`errors.read_failure`).
    """
    fd = _open_beneath(directory, rel)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as e:
        if read_failure(e) is not None:
            raise
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


class Published:
    """The envelopes a log publishes: those of its records, under the published checkpoint, of
    the ``kinds`` its policy names (``publish``). Called from the server's threads with a
    digest; answers the envelope's bytes only when a record of such a kind names it and the
    store's bytes hash to it (else None: 404). Entries appended later are indexed on the next
    request (the policy is read when the server starts: restart it to publish other kinds)."""

    def __init__(self, directory: Path, read_blob: Callable[[str], bytes | None],
                 kinds: Collection[str]) -> None:
        """Publish from the log ``directory``, reading blobs with ``read_blob`` (None or an
        error for a missing one; an error for one it cannot read, `errors.read_failure`)."""
        self.directory = directory
        self.kinds = frozenset(kinds)
        self._read_blob = read_blob
        self._lock = threading.Lock()
        self._size = 0
        self._envelopes: set[str] = set()

    def __call__(self, digest: str) -> bytes | None:
        """The envelope ``digest``, when the log publishes it.

        Raises:
            OSError, ProvenanceError: the log, or the envelope (``read_blob``'s error), cannot
                be read (`errors.read_failure`).
        """
        with self._lock:
            self._catch_up()
            if digest not in self._envelopes:
                return None
        try:
            data = self._read_blob(digest)
        except (OSError, ProvenanceError) as e:
            if read_failure(e) is not None:
                raise
            return None
        if data is None or len(data) > MAX_ENVELOPE or digest_bytes(data) != digest:
            return None
        return data

    def _catch_up(self) -> None:
        size = published_size(self.directory)
        if size <= self._size or not self.kinds:
            return
        reader = TileReader(self._fetch, size)
        try:
            for start in range(self._size, size, TILE_WIDTH):
                for raw in reader.entries(start, min(start + TILE_WIDTH, size)):
                    entry = LogEntry.from_bytes(raw)
                    if entry.kind in self.kinds:
                        self._envelopes.add(entry.envelope)
        except (OSError, ProvenanceError) as e:
            if read_failure(e) is not None:
                raise
            return  # a log being rewritten under us: try again on the next request
        self._size = size

    def _fetch(self, rel: str) -> bytes:
        data = _read_beneath(self.directory, rel, max_size(resource_kind(rel) or "entries"))
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "not a regular file here", rel)
        return data


_Conn = tuple[socket.socket, Any, bytes]
"""A connection: its socket, the client's address, what it sent of its next request."""
_CHUNK = 1 << 16
_SEND = 1 << 18
"""Bytes the selector's thread offers a slow reader at a time."""


class _Pending:
    """The rest of a response the selector's thread sends as the client reads it."""

    def __init__(self, sock: socket.socket, address: Any, rest: memoryview, keep: bool,
                 leftover: bytes) -> None:  # fmt: skip
        self.sock, self.address, self.rest = sock, address, rest
        self.held = len(rest)
        """The bytes counted against `MAX_PENDING`."""
        self.keep, self.leftover = keep, leftover
_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
              b"Connection: close\r\n\r\n")


class _Connections:
    """The server's open connections in a selector (one thread watches them all and reads each
    request's head as it comes); whole requests are handed to a fixed pool of workers (see the
    module docstring)."""

    def __init__(self, server: LogServer, workers: int, limit: int, idle: float) -> None:
        self._server = server
        self._max_pending = MAX_PENDING
        self._limit = limit
        self._idle = idle
        self._lock = threading.Lock()
        self._open = 0
        self._incoming: list[_Conn] = []
        self._writing: list[_Pending] = []
        self._pending = 0
        self._closing = False
        self._ready: queue.SimpleQueue[_Conn | None] = queue.SimpleQueue()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._threads = [threading.Thread(target=self._watch, name="log-server-idle", daemon=True)]
        self._threads += [
            threading.Thread(target=self._work, name=f"log-server-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    def add(self, sock: socket.socket, address: Any) -> bool:
        """Watch a new connection until it sends a request; False when too many are open."""
        with self._lock:
            if self._closing or self._open >= self._limit:
                return False
            self._open += 1
            self._incoming.append((sock, address, b""))
        self._wake()
        return True

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # its buffer is full: the watcher wakes anyway
            self._wake_w.send(b"\0")

    def _watch(self) -> None:
        deadlines: dict[socket.socket, float] = {}
        heads: dict[socket.socket, bytearray] = {}
        writing: dict[socket.socket, _Pending] = {}

        def forget(sock: socket.socket) -> None:
            self._selector.unregister(sock)
            del deadlines[sock]
            heads.pop(sock, None)
            if (done := writing.pop(sock, None)) is not None:
                with self._lock:
                    self._pending -= done.held

        def watch(sock: socket.socket, address: Any, head: bytes, now: float) -> None:
            if _head_end(head) >= 0:  # pipelined: the next request came whole already
                self._ready.put((sock, address, head))
                return
            sock.setblocking(False)
            heads[sock] = bytearray(head)
            deadlines[sock] = now + (self._server.request_timeout if head else self._idle)
            self._selector.register(sock, selectors.EVENT_READ, (sock, address))

        while True:
            with self._lock:
                if self._closing:
                    break
                incoming, self._incoming = self._incoming, []
                handed, self._writing = self._writing, []
            now = time.monotonic()
            for sock, address, head in incoming:
                watch(sock, address, head, now)
            for w in handed:  # the client has the request timeout to take all the rest
                writing[w.sock] = w
                deadlines[w.sock] = now + self._server.request_timeout
                self._selector.register(w.sock, selectors.EVENT_WRITE, w)
            wait = min(deadlines.values(), default=now + self._idle) - now
            for key, _ in self._selector.select(max(0.0, wait)):
                if key.fileobj is self._wake_r:
                    while True:
                        try:
                            if not self._wake_r.recv(4096):
                                break
                        except BlockingIOError:
                            break
                    continue
                if isinstance(key.data, _Pending):
                    w = key.data
                    try:
                        w.rest = w.rest[w.sock.send(w.rest[:_SEND]):]
                    except BlockingIOError:
                        continue
                    except OSError:
                        self._server.handle_error(w.sock, w.address)  # a line with --verbose
                        w.keep = False
                        w.rest = w.rest[:0]
                    if not w.rest:
                        forget(w.sock)
                        if w.keep and not self._closing:
                            watch(w.sock, w.address, w.leftover, time.monotonic())
                        else:
                            self._drop(w.sock)
                    continue
                sock, address = key.data
                try:
                    data = sock.recv(_CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                buf = heads[sock]
                if not data or len(buf) + len(data) > MAX_HEAD:
                    if data:  # best effort: the client may not read it
                        with contextlib.suppress(OSError):
                            sock.send(_TOO_LARGE)
                    forget(sock)
                    self._drop(sock)
                    continue
                if not buf:  # a request starts: it has the request timeout to arrive whole
                    deadlines[sock] = time.monotonic() + self._server.request_timeout
                buf += data
                if _head_end(buf) >= 0:
                    forget(sock)
                    self._ready.put((sock, address, bytes(buf)))
            now = time.monotonic()
            for sock in [s for s, d in deadlines.items() if d <= now]:
                forget(sock)
                self._drop(sock)
        for sock in deadlines:
            self._drop(sock)
        self._selector.close()

    def _work(self) -> None:
        while (item := self._ready.get()) is not None:
            sock, address, head = item
            try:
                handler = _Handler(sock, address, self._server, head)
            except Exception:
                self._server.handle_error(sock, address)
                self._drop(sock)
                continue
            self._respond(sock, address, handler.response, not handler.close_connection,
                          handler.leftover)

    def _respond(self, sock: socket.socket, address: Any, response: bytes, keep: bool,
                 leftover: bytes) -> None:  # fmt: skip
        """Send what the socket takes of ``response`` now; hand the rest to the selector's
        thread (`_Pending`), or close the connection when `MAX_PENDING` is held already."""
        rest = memoryview(response)
        try:
            sock.setblocking(False)
            while rest:
                rest = rest[sock.send(rest):]
        except BlockingIOError:
            pass
        except OSError:
            self._server.handle_error(sock, address)
            self._drop(sock)
            return
        with self._lock:
            if not rest:
                if keep and not self._closing:
                    self._incoming.append((sock, address, leftover))
                    self._wake()
                    return
            elif not self._closing and self._pending + len(rest) <= self._max_pending:
                self._pending += len(rest)
                self._writing.append(_Pending(sock, address, rest, keep, leftover))
                self._wake()
                return
            elif self._server.verbose:
                sys.stderr.write(f"{address[0]}: closed, {len(rest)} bytes of a response not "
                                 f"sent ({self._pending} held for slow readers already)\n")
        self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        self._server.shutdown_request(sock)
        with self._lock:
            self._open -= 1

    def close(self) -> None:
        """Stop the threads and close every connection (those being answered finish first)."""
        with self._lock:
            self._closing = True
            left = [sock for sock, _address, _head in self._incoming]
            left += [w.sock for w in self._writing]
            self._incoming, self._writing = [], []
        for sock in left:
            self._drop(sock)
        for _ in self._threads[1:]:
            self._ready.put(None)
        self._wake()
        for t in self._threads:
            t.join(timeout=self._server.request_timeout * 2)
        self._wake_r.close()
        self._wake_w.close()
