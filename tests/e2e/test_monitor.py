"""Logs others can watch: ``trajledger log serve`` and ``trajledger monitor`` on 127.0.0.1.

A vendor ledger's log is served by `LogServer` (the class ``log serve`` runs) on a free port on
127.0.0.1; ``trajledger monitor`` runs through click's CliRunner with the test's own user state
directory. Covered: the served resources (paths, content types, cache headers, gzip, nothing
else of the ledger reachable, links refused, read-only); a monitor that remembers a growing log
and proves each step from the tiles; the refusals (a rollback, a fork at the same size, a fork
at a larger size, tiles that are not the signed tree, a wrong key), each exit 1 naming both
checkpoints with the state left as it was; one state shared with ``import`` (a bundle older
than what the monitor saw is a rollback); a witness that cosigns, the vendor publishing the
cosignature, and a policy requiring it on the vendor's log only; and hostile servers (a huge
announced length, an endless body, a trickle, a gzip bomb, a redirect, an error status).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import os
import shutil
import socket
import socketserver
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger.log import EntrySpec
from trajledger.ledger.monitor import FetchLimits, HttpLog, monitor
from trajledger.ledger.record import record_files
from trajledger.ledger.serve import CHECKPOINT_CACHE, TILE_CACHE, LogServer
from trajledger.ledger.trust_state import TrustState
from trajledger.ledger.user_state import STATE_DIR_ENV
from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.errors import ConsistencyError, FormatError
from trajledger.verify.note import Note


@contextlib.contextmanager
def own_state(home: Path) -> Iterator[None]:
    """Act as the party owning ``home``, with a user state directory of its own (the floor
    its log writer keeps), not the monitor's."""
    old = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(home.parent / f"state-of-{home.name}")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(STATE_DIR_ENV, None)
        else:
            os.environ[STATE_DIR_ENV] = old


class Vendor:
    """A small ledger whose log grows by one files artifact per `add`; the vendor is another
    party, with its own user state (bound when its log is opened here)."""

    def __init__(self, home: Path, origin: str = "vendor.example/log") -> None:
        self.home = home
        with own_state(home):
            self.ledger = Ledger.init(home, origin=origin)
            self.ledger.log  # noqa: B018 - opened with the vendor's own state
        self.key = self.ledger.keys.create("vendor", encrypt=False)
        self.n = 0

    def add(self, count: int = 1, tag: str = "a") -> None:
        for _ in range(count):
            self.n += 1
            f = self.home.parent / f"data-{self.home.name}-{tag}-{self.n}.txt"
            f.write_text(f"{tag} {self.n}\n")
            record_files(self.ledger, [f], self.key, name=f"item-{tag}-{self.n}")

    def add_many(self, count: int) -> None:
        """Grow the log fast: entries in one group commit (what they name does not matter to a
        monitor, which checks the tree)."""
        specs = []
        for _ in range(count):
            self.n += 1
            d = "sha256:" + hashlib.sha256(f"{self.home} {self.n}".encode()).hexdigest()
            specs.append(EntrySpec("files", d, d, (self.key.keyid,)))
        self.ledger.log.append(specs)

    @property
    def vkey(self) -> str:
        return str(self.ledger.log.vkey)

    def checkpoint(self) -> Checkpoint:
        return Checkpoint.from_text(Note.from_bytes(self.ledger.log.checkpoint_bytes()).text)

    def copy(self, to: Path) -> Vendor:
        """Another ledger directory with this log's key and entries so far (a fork's seed)."""
        shutil.copytree(self.home, to)
        other = Vendor.__new__(Vendor)
        other.home, other.n = to, self.n
        with own_state(to):
            other.ledger = Ledger.open(to)
            other.ledger.log  # noqa: B018 - opened with that party's own state
        other.key = other.ledger.keys.signer("vendor")
        return other


@pytest.fixture
def vendor(tmp_path: Path) -> Vendor:
    v = Vendor(tmp_path / "vendor")
    v.add(3)
    return v


@pytest.fixture
def serve() -> Iterator[Callable[[Path], LogServer]]:
    servers: list[LogServer] = []

    def start(home: Path) -> LogServer:
        s = LogServer(home / "log")
        s.start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def run(*args: str | Path) -> Result:
    r = new_runner()
    return r.invoke(main, [str(a) for a in args])


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> Any:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        return urllib.request.urlopen(req, timeout=10)
    except urllib.error.HTTPError as e:
        return e


# -- serving --------------------------------------------------------------------------------------


def test_log_serve_publishes_exactly_the_tiled_log(
    vendor: Vendor, serve: Callable[[Path], LogServer]
) -> None:
    server = serve(vendor.home)
    log = vendor.home / "log"
    r = get(server.url + "checkpoint")
    assert r.status == 200 and r.read() == (log / "checkpoint").read_bytes()
    assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert r.headers["Cache-Control"] == CHECKPOINT_CACHE == "no-store"
    size = vendor.checkpoint().size
    r = get(server.url + f"tile/0/000.p/{size}")
    assert r.status == 200 and r.read() == (log / f"tile/0/000.p/{size}").read_bytes()
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert r.headers["Cache-Control"] == TILE_CACHE == "public, max-age=31536000, immutable"
    bundle = (log / f"tile/entries/000.p/{size}").read_bytes()
    r = get(server.url + f"tile/entries/000.p/{size}", {"Accept-Encoding": "gzip"})
    assert r.headers["Content-Encoding"] == "gzip" and gzip.decompress(r.read()) == bundle
    assert r.headers["Vary"] == "Accept-Encoding"
    r = get(server.url + f"tile/entries/000.p/{size}")
    assert "Content-Encoding" not in r.headers and r.read() == bundle
    r = get(server.url + "checkpoint", method="HEAD")
    assert r.status == 200 and r.headers["Content-Length"] == str(len(log.joinpath(
        "checkpoint").read_bytes())) and r.read() == b""  # fmt: skip
    # Nothing but the tlog-tiles resources: not the state, the key, the objects; no traversal,
    # no non-canonical tile names.
    for path in (".state/treeState", "vkey", "../keys/vendor.pub", "tile/0/../../checkpoint",
                 "tile/0/0000", "tile/0/00", "tile/64/000", "tile/00/000", "tile/0/000.p/0",
                 "tile/0/000.p/256", "tile/0/000.p/07", "tile/0/1000", "tile/entries/x1/000",
                 "", "tile/", "checkpoint/"):  # fmt: skip
        assert get(server.url + path).status == 404, path
    # A symbolic link planted in the log directory is not followed.
    (log / "tile" / "0" / "001").symlink_to(vendor.home / "ledger.toml")
    assert get(server.url + "tile/0/001").status == 404
    (log / "tile" / "7").symlink_to(log / "tile" / "0", target_is_directory=True)
    assert get(server.url + f"tile/7/000.p/{size}").status == 404
    # Read-only.
    for method in ("POST", "PUT", "DELETE"):
        r = get(server.url + "checkpoint", method=method)
        assert r.status == 405 and r.headers["Allow"] == "GET, HEAD"


# -- monitoring -----------------------------------------------------------------------------------


def test_monitor_remembers_a_growing_log(
    vendor: Vendor, serve: Callable[[Path], LogServer]
) -> None:
    server = serve(vendor.home)
    r = run("monitor", server.url, "--vkey", vendor.vkey, "--json")
    assert r.exit_code == 0, r.output
    first = json.loads(r.stdout)
    assert (first["size"], first["old_size"], first["advanced"]) == (3, None, True)
    assert r.stderr == (
        f"OK: log vendor.example/log at {server.url}: size 3, first seen: remembered\n"
    )
    vendor.add_many(300)  # past a full tile: the proof needs level-1 and partial tiles
    r = run("monitor", server.url, "--vkey", vendor.vkey)
    assert r.exit_code == 0, r.output
    assert r.stderr == (f"OK: log vendor.example/log at {server.url}: size 303, consistent with "
                        "size 3 seen before: remembered\n")  # fmt: skip
    assert r.stdout == vendor.ledger.log.checkpoint_bytes().decode()
    r = run("monitor", server.url, "--vkey", vendor.vkey)
    assert r.exit_code == 0 and r.stderr.endswith("size 303, unchanged since last seen\n")
    floor = TrustState.open(vendor.vkey).floor_checkpoint()
    assert floor is not None and (floor.size, floor.root) == (303, vendor.checkpoint().root)


def _refused(r: Result, kind: str, old: Checkpoint, new: Checkpoint, show: Any) -> None:
    """Exit 1, naming both checkpoints; the message is printed at the end of the run."""
    show("summary:monitor refusals (exit 1)", r.stderr.strip())
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert r.stderr.rstrip().endswith("nothing was remembered: keep both signed checkpoints as "
                                      "evidence")  # fmt: skip
    assert r.stderr.startswith("FAIL: log vendor.example/log at http://127.0.0.1:"), r.stderr
    assert f": {kind}" in r.stderr
    for cp in (old, new):  # both checkpoints named
        assert f"size {cp.size} root {cp.root.hex()[:16]}" in r.stderr, r.stderr


def test_monitor_refuses_a_rollback(
    vendor: Vendor, serve: Callable[[Path], LogServer], tmp_path: Path, record_property: Any
) -> None:
    old = vendor.checkpoint()
    earlier = vendor.copy(tmp_path / "earlier")  # the log as it was at size 3
    vendor.add(2)
    new = vendor.checkpoint()
    assert run("monitor", serve(vendor.home).url, "--vkey", vendor.vkey).exit_code == 0
    r = run("monitor", serve(earlier.home).url, "--vkey", vendor.vkey)
    _refused(r, "rollback", new, old, record_property)
    assert r.stdout == earlier.ledger.log.checkpoint_bytes().decode()  # the evidence
    floor = TrustState.open(vendor.vkey).floor_checkpoint()
    assert floor is not None and floor.size == new.size  # unchanged


def test_a_second_spelling_of_the_key_is_the_same_trust_state(
    vendor: Vendor, serve: Callable[[Path], LogServer], tmp_path: Path, record_property: Any
) -> None:
    """The key's ID in capitals was another string, so another state, with no floor: a
    rollback passed (exit 0) (docs/SECURITY.md, review redo21, finding 4). Key IDs are now
    read in lower case only (redo15 finding 1): the capitals are refused before any state
    is opened, and a state is only ever opened by the one spelling."""
    old = vendor.checkpoint()
    earlier = vendor.copy(tmp_path / "earlier")
    vendor.add(2)
    new = vendor.checkpoint()
    name, hexid, b64 = vendor.vkey.split("+", 2)
    if hexid.upper() == hexid:
        pytest.skip("this key's ID has no letter to spell in capitals")
    capitals = f"{name}+{hexid.upper()}+{b64}"
    assert run("monitor", serve(vendor.home).url, "--vkey", vendor.vkey).exit_code == 0
    r = run("monitor", serve(earlier.home).url, "--vkey", capitals)
    assert r.exit_code == 2 and "want <name>+<8 lower-case hex digits>" in r.stderr, r.output
    r = run("monitor", serve(earlier.home).url, "--vkey", vendor.vkey)
    _refused(r, "rollback", new, old, record_property)
    with pytest.raises(FormatError, match="lower-case hex digits"):
        TrustState.open(capitals)


def test_monitor_refuses_a_fork(
    vendor: Vendor, serve: Callable[[Path], LogServer], tmp_path: Path, record_property: Any
) -> None:
    """The same log key signs two histories after size 3: at the same size, and larger."""
    other = vendor.copy(tmp_path / "other")
    vendor.add(2, tag="a")
    other.add(2, tag="b")
    seen, forked = vendor.checkpoint(), other.checkpoint()
    assert seen.size == forked.size == 5 and seen.root != forked.root
    assert run("monitor", serve(vendor.home).url, "--vkey", vendor.vkey).exit_code == 0
    fork_server = serve(other.home)
    r = run("monitor", fork_server.url, "--vkey", vendor.vkey)
    _refused(r, "fork: two roots at one size", seen, forked, record_property)
    other.add(4, tag="b")  # the other history grows: its tiles cannot prove it extends ours
    r = run("monitor", fork_server.url, "--vkey", vendor.vkey)
    _refused(r, "fork", seen, other.checkpoint(), record_property)
    assert "consistency proof" in r.stderr or "root" in r.stderr
    floor = TrustState.open(vendor.vkey).floor_checkpoint()
    assert floor is not None and (floor.size, floor.root) == (seen.size, seen.root)


def test_monitor_refuses_tiles_that_are_not_the_signed_tree(
    vendor: Vendor, serve: Callable[[Path], LogServer]
) -> None:
    tile = vendor.home / "log" / "tile" / "0" / "000.p" / "3"
    data = bytearray(tile.read_bytes())
    data[40] ^= 1
    tile.chmod(0o644)
    tile.write_bytes(bytes(data))
    r = run("monitor", serve(vendor.home).url, "--vkey", vendor.vkey)
    assert r.exit_code == 1 and "the published tree is not the signed one" in r.stderr, r.output
    assert TrustState.open(vendor.vkey).floor() is None


def test_monitor_refuses_a_checkpoint_not_signed_by_the_key(
    vendor: Vendor, serve: Callable[[Path], LogServer], tmp_path: Path
) -> None:
    stranger = Vendor(tmp_path / "stranger")  # same origin, another key
    r = run("monitor", serve(vendor.home).url, "--vkey", stranger.vkey)
    assert r.exit_code == 1 and "no signature by a known key" in r.stderr, r.output
    r = run("monitor", "ftp://127.0.0.1/", "--vkey", vendor.vkey)
    assert r.exit_code == 1 and "want http://HOST[:PORT]/[PREFIX]" in r.stderr
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run("monitor", f"http://127.0.0.1:{port}/", "--vkey", vendor.vkey)
    assert r.exit_code == 3 and "cannot fetch" in r.stderr, r.output
    # and what to do next (out38 finding 3: it said only `[Errno 111] Connection refused`)
    assert r.stderr.splitlines()[-1].endswith(
        "Connection refused; check the URL and that the log is served there (its owner's "
        "'trajledger log serve'), then run the command again"), r.output


def test_import_shares_the_monitors_memory(
    vendor: Vendor, serve: Callable[[Path], LogServer], tmp_path: Path
) -> None:
    """One per-origin state: a bundle older than the checkpoint the monitor accepted is a
    rollback for import too; a bundle at the monitored checkpoint needs no proof."""
    from trajledger.ledger.exchange import export_bundle, import_bundle
    from trajledger.verify.policy import TrustPolicy

    old_bundle = tmp_path / "old.tar.zst"
    export_bundle(vendor.ledger, "item-a-1", old_bundle, policy=_files_policy(vendor, []))
    vendor.add(2)
    assert run("monitor", serve(vendor.home).url, "--vkey", vendor.vkey).exit_code == 0
    buyer = Ledger.init(tmp_path / "buyer", origin="buyer.example/log")
    approver = buyer.keys.create("approver", encrypt=False)
    policy = _files_policy(vendor, [approver.public.to_pem().decode()], buyer)
    with pytest.raises(ConsistencyError, match=r"rollback: vendor\.example/log size 5 root"):
        import_bundle(buyer, old_bundle, policy, approver)
    assert buyer.log.size == 0
    new_bundle = tmp_path / "new.tar.zst"
    export_bundle(vendor.ledger, "item-a-1", new_bundle, policy=_files_policy(vendor, []))
    assert import_bundle(buyer, new_bundle, policy, approver).recorded
    assert isinstance(policy, TrustPolicy)


def _files_policy(vendor: Vendor, approvers: list[str], buyer: Ledger | None = None) -> Any:
    from trajledger.verify.policy import TrustPolicy

    vkeys = [vendor.vkey] + ([str(buyer.log.vkey)] if buyer is not None else [])
    return TrustPolicy.from_json({
        "name": "files", "roles": {
            "producer": {"keys": [vendor.key.public.to_pem().decode()]},
            "approver": {"keys": approvers},
            "log": {"vkeys": vkeys},
        },
    })  # fmt: skip


# -- the witness ----------------------------------------------------------------------------------


WITNESS_POLICY = """\
name = "auditor"
[roles.producer]
keys = ["vendor.pub"]
[roles.log]
vkeys = ["{log}"]
[roles.witness]
vkeys = ["{witness}"]
threshold = 1
logs = [{logs}]
"""


def test_a_witness_cosigns_and_the_vendor_publishes_it(
    vendor: Vendor, serve: Callable[[Path], LogServer], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    lab = tmp_path / "lab"
    Ledger.init(lab, origin="lab.example/log").keys.create("witness", encrypt=False)
    url = serve(vendor.home).url
    cosigned = tmp_path / "cosigned"
    r = run("--ledger", lab, "monitor", url, "--vkey", vendor.vkey, "--cosign-key", "witness",
            "--out", cosigned, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    witness = out["witness_vkey"]
    assert witness.startswith("witness+") and out["cosigned_checkpoint"] == cosigned.read_text()
    # A bundle exported before the vendor publishes the cosignature fails a policy that
    # requires one witness on the vendor's log.
    (tmp_path / "vendor.pub").write_bytes(vendor.key.public.to_pem())
    policy = tmp_path / "policy.toml"
    policy.write_text(WITNESS_POLICY.format(log=vendor.vkey, witness=witness,
                                            logs='"vendor.example/log"'))  # fmt: skip
    before = tmp_path / "before.tar.zst"
    assert run("--ledger", vendor.home, "export", "item-a-1", "--out", before,
               "--policy", policy).exit_code == 0  # fmt: skip
    assert verify_main([str(before), "--policy", str(policy)]) == 1
    assert "valid witness cosignatures, want at least 1" in capsys.readouterr().err
    # The vendor adds the witness's line to its checkpoint (only a verifying one).
    r = run("--ledger", vendor.home, "log", "add-cosignature", cosigned, "--witness", witness)
    assert r.exit_code == 0, r.output
    assert vendor.ledger.log.checkpoint_bytes() == cosigned.read_bytes()
    after = tmp_path / "after.tar.zst"
    assert run("--ledger", vendor.home, "export", "item-a-1", "--out", after,
               "--policy", policy).exit_code == 0  # fmt: skip
    assert verify_main([str(after), "--policy", str(policy)]) == 0
    assert "✓ witnesses — cosigned by witness" in capsys.readouterr().out
    # The witness role names the logs it applies to: another origin needs no cosignature.
    policy.write_text(WITNESS_POLICY.format(log=vendor.vkey, witness=witness,
                                            logs='"somebody.else/log"'))  # fmt: skip
    assert verify_main([str(before), "--policy", str(policy)]) == 0
    capsys.readouterr()
    # A cosignature of another checkpoint, or by another witness, is not added.
    vendor.add()
    r = run("--ledger", vendor.home, "log", "add-cosignature", cosigned, "--witness", witness)
    assert r.exit_code == 3 and "ask the witness to cosign the current checkpoint" in r.stderr
    r = run("--ledger", lab, "monitor", url, "--vkey", vendor.vkey, "--cosign-key", "witness",
            "--out", cosigned)  # fmt: skip
    assert r.exit_code == 0, r.output
    stranger = Ledger.open(lab).keys.create("stranger", encrypt=False)
    from trajledger.ledger.monitor import witness_vkey

    r = run("--ledger", vendor.home, "log", "add-cosignature", cosigned,
            "--witness", witness_vkey(stranger))  # fmt: skip
    assert r.exit_code == 1 and "witness stranger: no valid cosignature" in r.stderr, r.output


# -- hostile servers -------------------------------------------------------------------------------


class _Hostile(socketserver.BaseRequestHandler):
    """Answers every request as ``server.behaviour`` says, at the socket level."""

    def handle(self) -> None:
        self.request.settimeout(5)
        try:
            self.request.recv(65536)
            self.server.behaviour(self.request)  # type: ignore[attr-defined]
        except OSError:
            pass


@pytest.fixture
def hostile() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    servers: list[socketserver.ThreadingTCPServer] = []

    def start(behaviour: Callable[[socket.socket], None]) -> str:
        srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Hostile)
        srv.daemon_threads = True
        srv.behaviour = behaviour  # type: ignore[attr-defined]
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _head(status: str = "200 OK", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}"] + [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _endless(sock: socket.socket) -> None:
    sock.sendall(_head(Transfer_Encoding="chunked"))
    chunk = b"x" * 60000
    while True:
        sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))


def _trickle(sock: socket.socket) -> None:
    sock.sendall(_head(Content_Length="1000"))
    for _ in range(1000):
        sock.sendall(b"x")
        threading.Event().wait(0.05)


def _slow_head(sock: socket.socket) -> None:
    """The status line, then a header line now and then, each within the read timeout: before
    the fix only the body was under the deadline, and this held a fetch for 100 header lines
    (http.client's most) times the timeout, or for ever a byte at a time."""
    sock.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(150):
        sock.sendall(b"X-Slow: 1\r\n")
        threading.Event().wait(0.2)


@functools.cache
def _bomb_body() -> bytes:
    """64 MiB of zeros gzipped (64 KiB), compressed once before any server sends it: compressing
    inside the handler took the client's deadline on a loaded machine."""
    return gzip.compress(b"\0" * (64 << 20))


def _bomb(sock: socket.socket) -> None:
    body = _bomb_body()
    sock.sendall(_head(Content_Length=str(len(body)), Content_Encoding="gzip") + body)


@pytest.mark.parametrize(
    ("behaviour", "problem"),
    [
        (lambda s: s.sendall(_head(Content_Length=str(1 << 40))),
         "the server announces 1099511627776 bytes, more than a checkpoint may hold (1048576)"),
        (_endless, "more than 1048576 bytes, the most a checkpoint may hold"),
        (_trickle, "not received within 1 s"),
        (_slow_head, "not received within 1 s"),
        (_bomb, "decompresses to more than 1048576 bytes"),
        (lambda s: s.sendall(_head("302 Found", Location="http://127.0.0.1:1/checkpoint",
                                   Content_Length="0")),
         "HTTP 302 Found (redirects are not followed)"),
        (lambda s: s.sendall(_head("500 Oops", Content_Length="0")), "HTTP 500 Oops"),
        (lambda s: s.sendall(_head(Content_Length="5", Content_Encoding="br") + b"abcde"),
         "unsupported Content-Encoding 'br'"),
    ],
    ids=["huge-length", "endless", "trickle", "slow-headers", "gzip-bomb", "redirect", "error",
         "encoding"],
)
def test_a_hostile_server_is_refused_in_bounded_time(
    hostile: Callable[[Callable[[socket.socket], None]], str], behaviour: Any, problem: str,
    vendor: Vendor,
) -> None:  # fmt: skip
    from trajledger.ledger.errors import LedgerError

    if behaviour is _bomb:
        _bomb_body()  # before the server: only sending counts against the deadline
    url = hostile(behaviour)
    log = HttpLog(url, FetchLimits(timeout=2.0, deadline=1.0))
    with pytest.raises(LedgerError) as e:
        monitor(log, vendor.vkey)
    assert problem in str(e.value) and str(e.value).startswith(f"{url}checkpoint: ")
    assert TrustState.open(vendor.vkey).floor() is None


def test_a_hostile_server_through_the_command(
    hostile: Callable[[Callable[[socket.socket], None]], str], vendor: Vendor
) -> None:
    url = hostile(lambda s: s.sendall(_head(Content_Length=str(1 << 40))))
    r = run("monitor", url, "--vkey", vendor.vkey, "--timeout", "2")
    assert r.exit_code == 3 and "Traceback" not in r.output
    assert r.stderr == (f"FAIL: {url}checkpoint: the server announces 1099511627776 bytes, more "
                        "than a checkpoint may hold (1048576); refusing it\n")  # fmt: skip


def test_a_hostile_servers_words_are_placed_and_capped(
    hostile: Callable[[Callable[[socket.socket], None]], str], vendor: Vendor
) -> None:
    # A 200 with an HTML error page: the refusal says which URL served it (it said only
    # "signed note has no blank line before its signatures"); a 60,000-character reason phrase
    # (escaped already) is cut, not printed whole.
    page = b"<html>\n<body>Service unavailable</body></html>\n"
    url = hostile(lambda s: s.sendall(_head(Content_Length=str(len(page))) + page))
    r = run("monitor", url, "--vkey", vendor.vkey, "--timeout", "2")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.stderr == (f"FAIL: {url}checkpoint: not a signed checkpoint: signed note has no "
                        "blank line before its signatures\n")  # fmt: skip
    url = hostile(lambda s: s.sendall(_head("500 \x1b[2K" + "A" * 60000, Content_Length="0")))
    r = run("monitor", url, "--vkey", vendor.vkey, "--timeout", "2")
    assert r.exit_code == 3 and "Traceback" not in r.output
    assert r.stderr == (f"FAIL: {url}checkpoint: HTTP 500 \\u001b[2K{'A' * 76}… (60004 "
                        "characters)\n")  # fmt: skip
    assert TrustState.open(vendor.vkey).floor() is None


def test_credentials_in_the_log_url_are_refused_unechoed(vendor: Vendor) -> None:
    # Before: 'FAIL: http://user:s3cr3t@127.0.0.1:1/checkpoint: cannot fetch: [Errno -2] Name
    # or service not known' (urllib takes no credentials from a URL: it looked the whole of
    # them up as a host name, and the secret was printed).
    r = run("monitor", "http://user:s3cr3t@127.0.0.1:1/", "--vkey", vendor.vkey)
    assert r.exit_code == 1 and "s3cr3t" not in r.output, r.output
    assert r.stderr == ("FAIL: log URL http://…@127.0.0.1:1/: credentials in the URL are refused "
                        "(they would be shown in every message); serve the log without them\n")


def test_monitor_warns_of_a_log_origin_off_the_grammar(
    tmp_path: Path, serve: Callable[[Path], LogServer]
) -> None:
    """A watched log named ``vendor‐example/log`` (U+2010) reads as ``vendor-example/log`` in
    every line: the log is judged by the key given (``--vkey``), and its origin is shown escaped
    with one WARNING (names.origin_problem; before, without a word). A log named within the
    grammar gets none (test_monitor_remembers_a_growing_log: its stderr is one OK line)."""
    odd = Vendor(tmp_path / "odd", origin="vendor\u2010example/log")
    odd.add(1)
    server = serve(odd.home)
    r = run("monitor", server.url, "--vkey", odd.vkey)
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        f"OK: log vendor\u2010example/log at {server.url}: size 1, first seen: remembered",
        "WARNING: the log's origin 'vendor\\u2010example/log' is off the grammar of log origins "
        "([A-Za-z0-9][A-Za-z0-9._/:-]{0,254}): it may pass for another log's; tell it by its "
        "key (--vkey)"], r.stderr


def test_a_floor_the_state_lost_is_no_first_sight(
    vendor: Vendor, serve: Callable[[Path], LogServer], tmp_path: Path
) -> None:
    """The monitor's state of the log removed while its key stays noted under its origin
    (docs/SECURITY.md, review rev25, finding 3): a rolled-back view of the log was `first
    seen: remembered`, exit 0, and became the floor. Now refused (exit 1), nothing kept, again
    on the next run."""
    from trajledger.ledger.user_state import log_id, state_dir

    earlier = vendor.copy(tmp_path / "earlier")
    vendor.add(2)
    assert run("monitor", serve(vendor.home).url, "--vkey", vendor.vkey).exit_code == 0
    floor = state_dir() / "logs" / log_id(vendor.vkey)
    shutil.rmtree(floor)
    for _ in range(2):
        r = run("monitor", serve(earlier.home).url, "--vkey", vendor.vkey)
        assert r.exit_code == 1, r.output
        assert "but holds no floor of it: its state was removed, so a rollback since cannot " \
            "be seen; nothing was read or changed" in r.stderr, r.stderr
        assert not floor.exists()
