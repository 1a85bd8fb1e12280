"""Serve a ledger's log over HTTP as a C2SP tiled log, read-only, so that others can watch it.

Scope: `LogServer` answers ``GET`` and ``HEAD`` for exactly the resources of c2sp.org/tlog-tiles:
``/checkpoint`` (``text/plain; charset=utf-8``, never cached: it changes with every append),
``/tile/<L>/<N>[.p/<W>]`` and ``/tile/entries/<N>[.p/<W>]`` (``application/octet-stream``,
``Cache-Control: public, max-age=31536000, immutable``: a tile path's bytes never change; entry
bundles gzip-compressed when the client accepts it, as the spec recommends), and trajledger's
``/key-handovers/<n>`` (the log key's rotations, ``verify.log_key``; not cached). Paths are matched
against the spec's grammar (levels 0..63, three-digit groups with ``x`` prefixes, widths 1..255,
no leading zeros), never joined from the request: nothing else in the ledger (``log/.state``,
keys, objects) can be named. A file is served only when it is a regular file inside the log
directory (symbolic links are refused) and no larger than the spec allows (a full tile is 8,192
bytes; an entry bundle at most 256 entries of at most 65,535 bytes). The server never writes.

It binds to 127.0.0.1 by default; put a TLS-terminating reverse proxy in front for the public
internet, or publish the same files with any static file server (docs/third-party.md shows
nginx and object-storage settings): the log directory *is* the static site.

Non-scope: the write path (``ledger.log``), watching a served log (``ledger.monitor``).
Spec: c2sp.org/tlog-tiles (paths, content types, caching), c2sp.org/tlog-checkpoint.
"""

from __future__ import annotations

import gzip
import os
import re
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from trajledger.verify.tiles import MAX_ENTRY_SIZE, TILE_WIDTH

__all__ = [
    "CHECKPOINT_CACHE",
    "TILE_CACHE",
    "LogServer",
    "max_size",
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
)
CHECKPOINT_CACHE = "no-store"
"""The checkpoint changes with every append: never cached (tlog-tiles: "a few seconds" at most)."""
TILE_CACHE = "public, max-age=31536000, immutable"
"""A tile path's bytes never change (tlog-tiles: "caching headers SHOULD be long-lived")."""
_MAX_CHECKPOINT = 1 << 20
_CONTENT_TYPE = {
    "checkpoint": "text/plain; charset=utf-8",
    "handover": "text/plain; charset=utf-8",
    "tile": "application/octet-stream",
    "entries": "application/octet-stream",
}


def resource_kind(path: str) -> str | None:
    """``checkpoint``, ``tile`` or ``entries`` for a tlog-tiles resource path (without the
    leading slash), ``handover`` for a key handover (``key-handovers/<n>``, trajledger's: a
    monitor follows a rotation of the log key with them), None for anything else."""
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
    return _MAX_CHECKPOINT


class _Handler(BaseHTTPRequestHandler):
    server: LogServer
    protocol_version = "HTTP/1.1"
    server_version = "trajledger-log"

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _refuse_method(self) -> None:
        self._status(405, "read-only: GET and HEAD only", {"Allow": "GET, HEAD"})

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
        data = self.server.read(rel, kind)
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


class LogServer(ThreadingHTTPServer):
    """A read-only HTTP server of one log directory (see the module docstring).

    Use `serve_forever` (or `start` for a background thread) and `shutdown`.
    """

    daemon_threads = True

    def __init__(
        self, directory: Path, host: str = "127.0.0.1", port: int = 0, *, verbose: bool = False
    ) -> None:
        """Bind to ``host:port`` (port 0: any free port) and serve ``directory``.

        Raises:
            OSError: the address cannot be bound, or ``directory`` is not a directory.
        """
        self.directory = Path(directory).resolve(strict=True)
        if not self.directory.is_dir():
            raise NotADirectoryError(f"{directory}: not a directory")
        self.verbose = verbose
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        """The base URL (``http://host:port/``)."""
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}/"

    def read(self, rel: str, kind: str) -> bytes | None:
        """The bytes of a resource: a regular file under the directory, within its size cap;
        None when there is none (a missing, linked, special or oversized file)."""
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        path = self.directory / rel
        try:
            # Every directory on the way must be a real directory of the log, not a link.
            parent = path.parent.resolve(strict=True)
            if parent != path.parent or not parent.is_relative_to(self.directory):
                return None
            fd = os.open(path, flags)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > max_size(kind):
                return None
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(max_size(kind) + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        return data if len(data) <= max_size(kind) else None

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
