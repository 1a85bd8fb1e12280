"""``ledger.serve``: which paths are tlog-tiles resources, what the server will read, and how it
treats connections (bounded threads, timeouts, clients that go away).

The grammar follows c2sp.org/tlog-tiles to the character (levels 0..63 without leading zeros,
three-digit index groups with ``x`` prefixes on all but the last, widths 1..255), and every path
the log writer produces (`verify.tiles.tile_path`, `entries_path`) is accepted.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trajledger.ledger.serve import LogServer, max_size, resource_kind
from trajledger.verify.tiles import entries_path, tile_path


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("checkpoint", "checkpoint"),
        ("tile/0/000", "tile"),
        ("tile/0/x001/x234/067", "tile"),
        ("tile/63/000.p/255", "tile"),
        ("tile/1/000.p/1", "tile"),
        ("tile/entries/000", "entries"),
        ("tile/entries/x001/000.p/17", "entries"),
        ("tile/64/000", None),
        ("tile/01/000", None),
        ("tile/0/00", None),
        ("tile/0/0000", None),
        ("tile/0/x001", None),
        ("tile/0/001/000", None),
        ("tile/0/000.p/0", None),
        ("tile/0/000.p/256", None),
        ("tile/0/000.p/09", None),
        ("tile/0/000.p/", None),
        ("tile/entries/000.p/300", None),
        ("tile/entries", None),
        ("/checkpoint", None),
        ("checkpoint/", None),
        ("tile/0/../000", None),
        (".state/treeState", None),
        ("vkey", None),
        ("tile/0/000\n", None),
    ],
)
def test_resource_grammar(path: str, kind: str | None) -> None:
    assert resource_kind(path) == kind


@pytest.mark.parametrize("index", [0, 1, 999, 1000, 1234067, 10**9 + 7])
def test_every_path_the_writer_makes_is_served(index: int) -> None:
    for width in (None, 1, 17, 255):
        assert resource_kind(tile_path(3, index, width)) == "tile"
        assert resource_kind(entries_path(index, width)) == "entries"


def test_oversized_and_special_files_are_not_served(tmp_path: Path) -> None:
    log = tmp_path / "log"
    (log / "tile" / "0").mkdir(parents=True)
    (log / "checkpoint").write_bytes(b"example.com/log\n1280\n" + b"A" * 44 + b"\n")
    (log / "tile" / "0" / "000").write_bytes(b"\0" * max_size("tile"))
    (log / "tile" / "0" / "001").write_bytes(b"\0" * (max_size("tile") + 1))
    (log / "tile" / "0" / "002").mkdir()
    os.mkfifo(log / "tile" / "0" / "004")
    server = LogServer(log)
    try:
        assert server.read("tile/0/000", "tile") == b"\0" * 8192
        assert server.read("tile/0/001", "tile") is None  # larger than a full tile
        assert server.read("tile/0/002", "tile") is None  # a directory
        assert server.read("tile/0/003", "tile") is None  # absent
        assert server.read("tile/0/004", "tile") is None  # a FIFO: refused without waiting
        assert server.url.startswith("http://127.0.0.1:")
    finally:
        server.server_close()
    assert max_size("entries") == 256 * (2 + 65535) and max_size("checkpoint") == 1 << 20


def test_only_what_the_published_checkpoint_covers_is_served(tmp_path: Path) -> None:
    """Tiles an append wrote before its publication (or a crashed append left, which the next
    writer removes and may write with other bytes) are not served: cached as immutable, they
    could outlive their bytes."""
    log = tmp_path / "log"
    files = {
        "tile/0/000": 8192, "tile/0/001.p/4": 128, "tile/0/001.p/5": 160, "tile/0/001": 8192,
        "tile/1/000.p/1": 32, "tile/1/000.p/2": 64, "tile/entries/000": 10,
        "tile/entries/001.p/4": 10, "tile/entries/001.p/5": 10,
    }  # fmt: skip
    for rel, size in files.items():
        (log / rel).parent.mkdir(parents=True, exist_ok=True)
        (log / rel).write_bytes(b"\0" * size)
    server = LogServer(log)
    try:
        assert all(server.read(rel, resource_kind(rel) or "") is None for rel in files)
        (log / "checkpoint").write_bytes(b"example.com/log\n260\n" + b"A" * 44 + b"\n")
        served = {rel for rel in files if server.read(rel, resource_kind(rel) or "") is not None}
        assert served == {"tile/0/000", "tile/0/001.p/4", "tile/1/000.p/1", "tile/entries/000",
                          "tile/entries/001.p/4"}  # fmt: skip
        (log / "checkpoint").write_bytes(b"example.com/log\n512\n" + b"A" * 44 + b"\n")
        served = {rel for rel in files if server.read(rel, resource_kind(rel) or "") is not None}
        assert served == set(files)  # older partial widths stay served for older checkpoints
    finally:
        server.server_close()


def _swap_for_a_link_at_the_first_open(
    monkeypatch: pytest.MonkeyPatch, directory: Path, outside: Path
) -> list[str]:
    """The insider (a group member, who may rename the log's directories) swaps ``directory``
    for a link to ``outside`` just as the server opens its first file for a request: after
    any check of the path the server made before, before its open. Returns what was opened."""
    from trajledger.ledger import serve

    real_open, opened = os.open, []

    def open_after_the_swap(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if not opened:
            directory.rename(directory.with_name(directory.name + ".aside"))
            directory.symlink_to(outside, target_is_directory=True)
        opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(serve.os, "open", open_after_the_swap)
    return opened


@pytest.mark.parametrize("swapped", ["tile/0", "tile", "tile/entries"])
def test_a_directory_swapped_for_a_link_before_the_open_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped: str
) -> None:
    """rev14: ``log serve`` checked that a tile's directories resolve inside the log, then
    opened the path: a directory swapped for a link between the two was followed, and the
    file under it served. Now each component is opened relative to the last, none followed."""
    log = tmp_path / "log"
    for d in ("tile/0", "tile/entries"):
        (log / d).mkdir(parents=True)
    (log / "checkpoint").write_bytes(b"example.com/log\n256\n" + b"A" * 44 + b"\n")
    (log / "tile" / "0" / "000").write_bytes(b"\0" * 8192)
    (log / "tile" / "entries" / "000").write_bytes(b"\0" * 10)
    outside = tmp_path / "outside"
    secret = b"not the log's: the insider's" + b"\1" * 100
    for d in ("", "0", "entries", "0/0", "0/entries"):  # whatever the link's target is
        (outside / d).mkdir(parents=True, exist_ok=True)
        (outside / d / "000").write_bytes(secret)
    rel = "tile/entries/000" if swapped == "tile/entries" else "tile/0/000"
    opened = _swap_for_a_link_at_the_first_open(monkeypatch, log / swapped, outside)
    s = LogServer(log)
    s.start()
    try:
        with socket.create_connection(("127.0.0.1", s.server_address[1])) as c:
            c.settimeout(5)
            assert _get(c, rel) == b"HTTP/1.1 404 Not Found"
        assert opened
        monkeypatch.undo()
        assert (log / rel).read_bytes() == secret  # the link leads to the insider's file
        assert s.read(rel, resource_kind(rel) or "") is None  # a link standing: refused too
    finally:
        s.stop()


# -- connections: bounded threads, timeouts, clients that go away -------------------------------


def _log_dir(tmp_path: Path) -> Path:
    log = tmp_path / "log"
    (log / "tile" / "entries").mkdir(parents=True)
    (log / "checkpoint").write_bytes(b"example.com/log\n256\n" + b"A" * 44 + b"\n")
    (log / "tile" / "entries" / "000").write_bytes(b"\x01" * max_size("entries"))
    return log


def _get(sock: socket.socket, path: str, *, close: bool = False) -> bytes:
    """One request on ``sock``; returns the response's status line."""
    extra = "Connection: close\r\n" if close else ""
    sock.sendall(f"GET /{path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
    return _read_response(sock)


def _read_response(sock: socket.socket) -> bytes:
    """The status line of the next response on ``sock`` (read to its end, no further)."""
    f = sock.makefile("rb", buffering=0)
    status = f.readline().rstrip()
    assert status, "the server closed the connection"
    length = 0
    while (line := f.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    while length:
        length -= len(f.read(length))
    return status


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LogServer]:
    s = LogServer(_log_dir(tmp_path), workers=4, max_connections=60, request_timeout=1.0,
                  idle_timeout=2.0)  # fmt: skip
    s.start()
    yield s
    s.stop()


def test_idle_connections_hold_no_thread_and_do_not_block_requests(server: LogServer) -> None:
    before = threading.active_count()
    port = server.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.settimeout(5)
            assert _get(s, "checkpoint") == b"HTTP/1.1 200 OK"
        # 50 connections open, and not one thread more than before (the workers and the
        # selector's thread were there from the start).
        assert threading.active_count() == before
        assert all(not _closed_by_server(c, 0.01) for c in idle)
    finally:
        for c in idle:
            c.close()


def test_an_idle_connection_is_closed_after_the_idle_timeout(server: LogServer) -> None:
    with socket.create_connection(("127.0.0.1", server.server_address[1])) as s:
        assert not _closed_by_server(s, 1.0)
        assert _closed_by_server(s, 5.0)


def test_a_request_sent_a_byte_at_a_time_is_cut_at_the_request_timeout(
    server: LogServer,
) -> None:
    with socket.create_connection(("127.0.0.1", server.server_address[1])) as s:
        for c in b"GET /checkpoint HTTP/1.1\r\n":
            try:
                s.sendall(bytes([c]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if _closed_by_server(s, 0.2):
                break
        else:  # 26 bytes, one each 0.2 s: over 5 s, the timeout is 1 s
            pytest.fail("the server waited for the whole slow request")


def test_keep_alive_and_pipelined_requests_are_answered(server: LogServer) -> None:
    with socket.create_connection(("127.0.0.1", server.server_address[1])) as s:
        s.settimeout(5)
        assert _get(s, "checkpoint") == b"HTTP/1.1 200 OK"
        assert _get(s, "tile/0/000") == b"HTTP/1.1 404 Not Found"  # the same connection
        s.sendall(b"GET /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n" * 2)  # two at once
        assert _read_response(s) == b"HTTP/1.1 200 OK"
        assert _read_response(s) == b"HTTP/1.1 200 OK"
        assert _get(s, "checkpoint", close=True) == b"HTTP/1.1 200 OK"
        assert _closed_by_server(s, 5.0)


def test_connections_beyond_the_limit_are_closed(tmp_path: Path) -> None:
    s = LogServer(_log_dir(tmp_path), workers=2, max_connections=3)
    s.start()
    try:
        port = s.server_address[1]
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        with socket.create_connection(("127.0.0.1", port)) as extra:
            assert _closed_by_server(extra, 5.0)
        for c in held:
            c.close()
    finally:
        s.stop()


def test_a_client_that_goes_away_mid_response_prints_nothing(
    server: LogServer, capfd: pytest.CaptureFixture[str]
) -> None:
    port = server.server_address[1]
    for _ in range(3):
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.sendall(b"GET /tile/entries/000 HTTP/1.1\r\nHost: x\r\n\r\n")  # 16 MiB answer
        c.recv(100)  # the answer has started
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()  # a reset, mid-response
    with socket.create_connection(("127.0.0.1", port)) as s:  # still serving
        s.settimeout(5)
        assert _get(s, "checkpoint") == b"HTTP/1.1 200 OK"
    server.stop()
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_requests_that_never_end_hold_no_worker(tmp_path: Path) -> None:
    # Before: the selector handed a connection to a worker at its first byte, and the worker
    # waited for the rest of the request up to the request timeout: as many connections as
    # workers, each sending a few bytes now and then, kept every other client waiting (8
    # connections, 8 bytes each 10 s, stopped `log serve`). Now a request's head is read by
    # the selector's thread; a worker gets only whole requests.
    s = LogServer(_log_dir(tmp_path), workers=2, request_timeout=60.0, idle_timeout=60.0)
    s.start()
    port = s.server_address[1]
    request = b"GET /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n"
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]
    try:
        for i, c in enumerate(held):
            c.sendall(request[: 1 + i * 6])
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.settimeout(10)  # the held requests would have held both workers for 60 s
            assert _get(c, "checkpoint") == b"HTTP/1.1 200 OK"
            assert _get(c, "checkpoint", close=True) == b"HTTP/1.1 200 OK"
        for i, c in enumerate(held):  # each finishes its request and is answered
            c.settimeout(10)
            c.sendall(request[1 + i * 6 :])
            assert _read_response(c) == b"HTTP/1.1 200 OK"
    finally:
        for c in held:
            c.close()
        s.stop()


def _unread(port: int, path: str) -> socket.socket:
    """A connection that asks for ``path`` and reads nothing (a small receive buffer)."""
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(("127.0.0.1", port))
    c.sendall(f"GET /{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return c


def _until(held: Callable[[], bool]) -> None:
    """Wait (30 s at most) for the server's bytes held for slow readers to be so."""
    for _ in range(3000):
        if held():
            return
        time.sleep(0.01)
    raise AssertionError("the server's held bytes never came to the state awaited")


def _drain(c: socket.socket) -> int:
    """Bytes the server sends until it closes ``c``."""
    c.settimeout(30)
    n = 0
    while data := c.recv(1 << 20):
        n += len(data)
    return n


def test_clients_that_do_not_read_hold_no_worker(tmp_path: Path) -> None:
    # rev10: a worker wrote each response itself, waiting up to the request timeout for the
    # client to take it: 8 clients asking for a 16 MiB entry bundle and reading nothing
    # delayed a GET by 9.6 s. Now the selector's thread sends what the socket did not take.
    s = LogServer(_log_dir(tmp_path), workers=2, request_timeout=60.0, idle_timeout=60.0)
    s.start()
    port = s.server_address[1]
    held = [_unread(port, "tile/entries/000") for _ in range(4)]
    try:
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.settimeout(10)  # the held responses would have held both workers for 60 s
            assert _get(c, "checkpoint") == b"HTTP/1.1 200 OK"
        for c in held:  # each is answered whole when it reads, and keeps its connection
            c.settimeout(30)
            assert _read_response(c) == b"HTTP/1.1 200 OK"
            assert _get(c, "checkpoint") == b"HTTP/1.1 200 OK"
    finally:
        for c in held:
            c.close()
        s.stop()


def test_a_response_beyond_the_bytes_held_for_slow_readers_is_not_begun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trajledger.ledger.serve as serve

    whole = max_size("entries")
    monkeypatch.setattr(serve, "MAX_PENDING", whole + (whole >> 1), raising=False)  # one, not two
    s = LogServer(_log_dir(tmp_path), workers=2, request_timeout=60.0, idle_timeout=60.0)
    s.start()
    port = s.server_address[1]
    first = _unread(port, "tile/entries/000")
    try:
        _until(lambda: s._connections._pending > 0)  # the first one is held
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.settimeout(10)
            assert _get(c, "checkpoint") == b"HTTP/1.1 200 OK"
        with _unread(port, "tile/entries/000") as second:  # closed after what the socket took
            assert _drain(second) < whole
        first.settimeout(30)
        assert _read_response(first) == b"HTTP/1.1 200 OK"  # the first one is sent whole
    finally:
        first.close()
        s.stop()


def test_a_response_not_taken_within_the_request_timeout_is_closed(tmp_path: Path) -> None:
    s = LogServer(_log_dir(tmp_path), workers=2, request_timeout=1.0, idle_timeout=60.0)
    s.start()
    port = s.server_address[1]
    try:
        with _unread(port, "tile/entries/000") as c:
            _until(lambda: s._connections._pending > 0)
            _until(lambda: s._connections._pending == 0)  # past the request timeout: dropped
            assert _drain(c) < max_size("entries")
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.settimeout(30)
            assert _get(c, "tile/entries/000") == b"HTTP/1.1 200 OK"
    finally:
        s.stop()


@pytest.mark.parametrize("planted", ["checkpoint", "tile/entries/000"])
def test_a_fifo_planted_in_the_log_holds_no_worker(tmp_path: Path, planted: str) -> None:
    """The size of the published checkpoint (read for every tile request) and the entry bundles
    the published envelopes are indexed from were opened with a blocking ``open`` that follows
    links: a FIFO planted at ``checkpoint`` held every worker that served a tile for ever, and
    at an entry bundle every envelope request (review rev28, finding 2). Now read as served
    files are: a FIFO is nothing there."""
    from trajledger.ledger.serve import Published

    log = _log_dir(tmp_path)
    (log / planted).unlink()
    os.mkfifo(log / planted)
    server = LogServer(log)
    published = Published(log, lambda d: None, {"approval"})
    got: list[object] = []

    def ask() -> None:
        got.append(server.read("tile/entries/000", "entries") is None)
        got.append(published("sha256:" + "0" * 64))

    t = threading.Thread(target=ask, daemon=True)
    try:
        t.start()
        t.join(60)  # (a hang guard, not a timing)
        hung = t.is_alive()
        if hung:  # release it: open the FIFO's other end
            with open(log / planted, "wb"):
                pass
            t.join(60)
        assert (hung, got) == (False, [True, None])
    finally:
        server.server_close()
