"""Watch another party's log over HTTP: verify its checkpoint, check it only grew, cosign it.

Scope: `monitor` fetches a C2SP tiled log's ``checkpoint`` (served by ``trajledger log serve``
or any static file server), verifies it with the log's verifier key, checks that the published
tiles give its root, and checks it against the newest checkpoint this user accepted from that
log before: the per-origin `trajledger.ledger.trust_state.TrustState` in the user's state
directory, the same state ``trajledger import`` keeps (so a bundle older than what the monitor
saw is a rollback too, and a newer one needs a consistency proof from it). A larger tree must
be consistent with the old one (an RFC 6962 consistency proof built from the fetched tiles with
`verify.tiles.TileReader`, checked against both signed roots); a smaller tree is a rollback and
another root at the same size a fork: both refused (`ConsistencyError`, exit 1), naming both
checkpoints, and the state is left as it was. Then the new checkpoint is remembered and,
optionally, cosigned as a witness (a c2sp.org/tlog-cosignature/v1 line): the cosigned note is
returned for the log operator to publish (``trajledger log add-cosignature``), so that buyers
whose policy requires witnesses accept the vendor's bundles.

`HttpLog` is the fetcher, and the log server is hostile input: only http and https, no
redirects, every response bounded (a checkpoint 1 MiB, a tile 8 KiB, an entry bundle its spec
maximum; a larger Content-Length is refused before reading, a longer body as soon as it
exceeds), every read under a socket timeout and every fetch under an overall deadline (a server
trickling bytes, in its TLS handshake, status line, headers or body, cannot hold the monitor: a
timer shuts the connection down), gzip decoded within the same bound.

`watch_updates` then applies what the log says about what a ledger holds, as an import of the
log's extension would (``ledger.updates``): it reads every entry since the size applied from the
served entry bundles (together they must give the signed root: a server may answer a
second fetch otherwise than the first), fetches the envelopes
the log publishes (``envelopes/<hex>``, bounded like the rest) of those about what the ledger
holds, and takes them in; without approver keys to sign the import it only says what is pending.

Non-scope: serving (``ledger.serve``), witness networks (c2sp.org/tlog-witness's HTTP API).
Spec: c2sp.org/tlog-tiles, c2sp.org/tlog-checkpoint, c2sp.org/tlog-cosignature, RFC 6962 2.1.2.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.errors import (
    ConsistencyError,
    FormatError,
    ProvenanceError,
    SignatureError,
)
from trajledger.verify.note import (
    ALG_COSIGNATURE_V1,
    Note,
    verifier_from_vkey,
    verify_note,
)
from trajledger.verify.tiles import TILE_WIDTH, TileReader

from .encode import signature_line, vkey_string
from .errors import LedgerError, TamperError
from .log.spec import note_key_bytes
from .log.witness import cosign_note
from .serve import max_size, resource_kind

if TYPE_CHECKING:
    from trajledger.verify.policy import TrustPolicy

    from .home import LedgerHome
    from .keys import Signer
    from .trust_state import TrustState
    from .updates import Changes

__all__ = [
    "FetchLimits",
    "HttpLog",
    "MonitorResult",
    "cosign_note",
    "merge_cosignatures",
    "monitor",
    "watch_updates",
    "witness_vkey",
]

_CHUNK = 1 << 16
READ_BAR_FROM = 2_000
"""`watch_updates` draws its read of the log's entries from this many entries on (as a user's
first use of a long log does: ``home``)."""


@dataclass(frozen=True)
class FetchLimits:
    """Bounds on what one fetch from a log server may cost.

    Attributes:
        timeout: seconds any single socket operation may wait (connect, each read).
        deadline: seconds one whole fetch may take, headers and body.
    """

    timeout: float = 20.0
    deadline: float = 60.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is then raised as an HTTPError: refused, not followed


class _Watchdog:
    """The sockets of one fetch, shut down when its deadline passes (`arm`, a timer thread), so
    that a server trickling its TLS handshake, status line or headers (read by http.client, a
    line at a time under the per-read timeout only) is cut like one trickling its body."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._armed = 0
        self.fired = False

    def connection(self, cls: type[http.client.HTTPConnection]) -> Callable[..., Any]:
        """A factory of ``cls`` connections whose sockets this watchdog watches."""

        def make(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
            conn = cls(*args, **kwargs)
            create = conn._create_connection  # type: ignore[attr-defined]

            def connect(*a: Any, **k: Any) -> socket.socket:
                sock: socket.socket = create(*a, **k)
                with self._lock:
                    self._sockets.append(sock)
                    if self.fired:
                        sock.shutdown(socket.SHUT_RDWR)
                return sock

            conn._create_connection = connect  # type: ignore[attr-defined]
            return conn

        return make

    @contextlib.contextmanager
    def arm(self, seconds: float) -> Iterator[None]:
        """Watch the sockets opened inside the block for ``seconds``."""
        with self._lock:
            self._armed += 1
            self.fired = False
        timer = threading.Timer(seconds, self._fire, (self._armed,))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            with self._lock:
                self._armed += 1  # a timer firing late finds another block: it does nothing
                self._sockets.clear()

    def _fire(self, armed: int) -> None:
        with self._lock:
            if armed != self._armed:
                return
            self.fired = True
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _handlers(watchdog: _Watchdog) -> list[urllib.request.BaseHandler]:
    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(watchdog.connection(http.client.HTTPConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: Any) -> Any:
            return self.do_open(watchdog.connection(http.client.HTTPSConnection), req)

    return [Http(), Https(), _NoRedirect()]


class HttpLog:
    """Fetches a tiled log's resources over HTTP(S) as hostile input (module docstring)."""

    def __init__(self, url: str, limits: FetchLimits | None = None) -> None:
        """A log at the URL prefix ``url`` (``http://host:port/`` or ``https://host/prefix/``).

        Raises:
            FormatError: not an http or https URL with a host; credentials in it.
        """
        parsed = urllib.parse.urlsplit(url)
        if "@" in parsed.netloc:  # never echoed: it may hold a secret
            shown = f"{parsed.scheme}://…@{parsed.netloc.rsplit('@', 1)[1]}{parsed.path}"
            raise FormatError(f"log URL {shown}: credentials in the URL are refused (they would "
                              "be shown in every message); serve the log without them")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise FormatError(f"log URL {url!r}: want http://HOST[:PORT]/[PREFIX] or https://…")
        if parsed.query or parsed.fragment:
            raise FormatError(f"log URL {url!r}: a URL prefix has no query or fragment")
        self.url = url if url.endswith("/") else url + "/"
        self.limits = limits or FetchLimits()
        self._watchdog = _Watchdog()
        self._opener = urllib.request.build_opener(*_handlers(self._watchdog))
        self.fetched = 0
        """Resources fetched so far (for reports)."""

    def fetch(self, path: str) -> bytes:
        """The bytes of the resource ``path`` (``checkpoint`` or a tile path).

        Raises:
            FileNotFoundError: the server answered 404 (a missing tile; `TileReader` then tries
                the full tile).
            LedgerError: any other failure: unreachable, another status, a redirect, a body
                over the limit, a timeout, the deadline, a bad encoding.
        """
        kind = resource_kind(path)
        if kind is None:
            raise ValueError(f"{path!r} is not a tlog-tiles resource")
        cap = max_size(kind)
        where = f"{self.url}{path}"
        start = time.monotonic()
        request = urllib.request.Request(
            where, headers={"Accept-Encoding": "gzip, identity", "User-Agent": "trajledger"}
        )
        try:
            with (self._watchdog.arm(self.limits.deadline),
                  self._opener.open(request, timeout=self.limits.timeout) as resp):
                self.fetched += 1
                declared = resp.headers.get("Content-Length")
                if declared is not None and (not declared.isdigit() or int(declared) > cap):
                    raise LedgerError(
                        f"{where}: the server announces {declared} bytes, more than a {kind} "
                        f"may hold ({cap}); refusing it"
                    )
                encoding = (resp.headers.get("Content-Encoding") or "identity").lower()
                if encoding not in ("identity", "gzip"):
                    raise LedgerError(f"{where}: unsupported Content-Encoding {encoding!r}")
                raw = self._read(resp, cap, start, where, kind)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise FileNotFoundError(f"{where}: not found (404)") from e
            raise LedgerError(f"{where}: HTTP {e.code} {_capped(str(e.reason))}"
                              + (" (redirects are not followed)" if 300 <= e.code < 400 else "")
                              ) from e  # fmt: skip
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            if self._watchdog.fired:
                raise self._late(where) from e
            reason = getattr(e, "reason", None) or e
            raise LedgerError(f"{where}: cannot fetch: {reason}; check the URL and that the log "
                              "is served there (its owner's 'trajledger log serve'), then run "
                              "the command again") from e  # out38 finding 3
        if encoding == "gzip":
            raw = _gunzip(raw, cap, where, kind)
        return raw

    def _read(self, resp: Any, cap: int, start: float, where: str, kind: str) -> bytes:
        # read1 returns what one read of the socket gives, so the deadline is checked between
        # reads even when a server trickles its body a byte at a time.
        parts: list[bytes] = []
        got = 0
        while True:
            if time.monotonic() - start > self.limits.deadline:
                raise self._late(where)
            chunk = resp.read1(_CHUNK)
            if not chunk:
                if self._watchdog.fired:  # cut by the deadline, not the end of the body
                    raise self._late(where)
                return b"".join(parts)
            got += len(chunk)
            if got > cap:
                raise LedgerError(
                    f"{where}: more than {cap} bytes, the most a {kind} may hold; refusing it"
                )
            parts.append(chunk)

    def _late(self, where: str) -> LedgerError:
        return LedgerError(f"{where}: not received within {self.limits.deadline:g} s; refusing "
                           "a server that sends too slowly or without end")


def _capped(text: str, most: int = 80) -> str:
    """The server's words (a reason phrase may be 64 KiB long) cut for one line of a report."""
    return text if len(text) <= most else f"{text[:most]}… ({len(text)} characters)"


def _gunzip(data: bytes, cap: int, where: str, kind: str) -> bytes:
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(data, cap + 1)
    except zlib.error as e:
        raise LedgerError(f"{where}: corrupt gzip body: {e}") from e
    if len(out) > cap or d.unconsumed_tail:
        raise LedgerError(f"{where}: decompresses to more than {cap} bytes ({kind}); refusing it")
    if not d.eof:
        raise LedgerError(f"{where}: truncated gzip body")
    return out


# -- the witness's cosignature ---------------------------------------------------------------


def witness_vkey(witness: Signer) -> str:
    """The witness's verifier key (cosignature/v1), for trust policies' ``roles.witness``."""
    return vkey_string(witness.name, note_key_bytes(witness, "witness"), ALG_COSIGNATURE_V1)


def merge_cosignatures(current: bytes, cosigned: bytes, witness_vkeys: list[str]) -> bytes:
    """The note ``current`` with the cosignatures in ``cosigned`` by the named witnesses.

    Steps:
        1. ``cosigned`` must be the same checkpoint text as ``current`` (a cosignature of
           another size or root cannot be added: the witness must cosign the current one).
        2. Each named witness must have a valid cosignature on it (`verify_note`).
        3. Keep every line of ``current`` except older lines by those witnesses; add theirs.

    Raises:
        FormatError: a malformed note or vkey.
        SignatureError: a named witness has no valid cosignature in ``cosigned``.
        LedgerError: another checkpoint text (the log moved on, or a wrong file).
    """
    cur, new = Note.from_bytes(current), Note.from_bytes(cosigned)
    # (1)
    if cur.text != new.text:
        have, got = Checkpoint.from_text(cur.text), Checkpoint.from_text(new.text)
        raise LedgerError(
            f"the cosigned checkpoint is size {got.size} root {got.root.hex()[:16]}…, the log's "
            f"is size {have.size} root {have.root.hex()[:16]}…; ask the witness to cosign the "
            "current checkpoint"
        )
    # (2)
    verifiers = [verifier_from_vkey(v) for v in witness_vkeys]
    keys = {(v.name, v.key_hash) for v in verifiers}
    for v in verifiers:
        try:
            verify_note(new, [v])
        except ProvenanceError as e:
            raise SignatureError(f"witness {v.name}: no valid cosignature in the file: {e}") from e
    # (3)
    kept = [signature_line(s) for s in cur.signatures if (s.name, s.key_hash) not in keys]
    added = [signature_line(s) for s in new.signatures if (s.name, s.key_hash) in keys]
    return cur.text + b"\n" + b"".join(kept + added)


# -- monitoring -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MonitorResult:
    """What `monitor` saw and did.

    Attributes:
        url: the log's URL prefix.
        origin, size, root: the verified checkpoint fetched now.
        old_size, old_root: the checkpoint accepted before (None on first contact).
        advanced: True when the new checkpoint is larger and was remembered.
        tiles: resources fetched (checkpoint and tiles).
        note: the checkpoint as fetched.
        cosigned: the note with this witness's cosignature added (when cosigning).
        witness_vkey: the witness's verifier key (when cosigning).
        vkey: the log's key that signed the checkpoint: the one given, or the key it was
            handed over to (then pass this one from now on).
        rollbacks: the rollbacks of this log the user accepted (`TrustIndex.rollbacks`).
    """

    url: str
    origin: str
    size: int
    root: bytes
    old_size: int | None
    old_root: bytes | None
    advanced: bool
    tiles: int
    note: bytes
    cosigned: bytes | None = None
    witness_vkey: str | None = None
    vkey: str = ""
    rollbacks: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The stable ``--json`` form."""
        return {
            "url": self.url,
            "origin": self.origin,
            "size": self.size,
            "root": self.root.hex(),
            "old_size": self.old_size,
            "old_root": None if self.old_root is None else self.old_root.hex(),
            "advanced": self.advanced,
            "fetched": self.tiles,
            "checkpoint": self.note.decode("utf-8"),
            "cosigned_checkpoint": None if self.cosigned is None else self.cosigned.decode(),
            "witness_vkey": self.witness_vkey,
            "vkey": self.vkey,
            "accepted_rollbacks": list(self.rollbacks),
        }


def monitor(
    log: HttpLog,
    vkey: str,
    *,
    state: TrustState | None = None,
    witness: Signer | None = None,
    now: int | None = None,
    fetch: Callable[[str], bytes] | None = None,
) -> MonitorResult:
    """Fetch and check a log's checkpoint; remember it; optionally cosign it.

    Steps:
        1. Fetch ``checkpoint`` and verify it with ``vkey`` (its origin is the key's name); when
           the key was rotated, with the key it was handed over to (the log's
           ``key-handovers/<n>``, ``verify.log_key.key_chain``), whose state continues this
           user's floor of the old key (`trust_handover.continue_trust`: the new tree must extend
           it and each handover; a key no handover names is still refused).
        2. Check the served tiles give its root (a server whose tiles are another tree than
           the one its key signed is refused).
        3. Against the checkpoint accepted before from this log (the per-origin trust state):
           a larger tree must be consistent with it (a proof built from the tiles); a smaller
           one is a rollback and another root at the same size a fork (`ConsistencyError`,
           naming both; nothing is remembered).
        4. Remember the new checkpoint when it is larger.
        5. With ``witness``: cosign the checkpoint (tlog-cosignature/v1).

    Args:
        log: the log's fetcher.
        vkey: the log's C2SP verifier key, obtained from its operator out of band.
        state: the per-origin state (default: ``TrustState.open(vkey)`` in the user's state
            directory).
        witness: an Ed25519 key to cosign with.
        now: the cosignature time (POSIX seconds); default now.
        fetch: overrides ``log.fetch`` (tests).

    Raises:
        ConsistencyError: a rollback or a fork; ``old`` and ``new`` are the two signed
            checkpoint notes.
        SignatureError: the checkpoint is not signed by ``vkey``.
        FormatError: a malformed checkpoint or tile.
        ProofError: the tiles do not give the signed root.
        LedgerError: the log cannot be fetched (see `HttpLog.fetch`).
        TamperError: this user's state noted ``vkey`` but lost its floor (`first_use`).
    """
    from trajledger.verify.errors import ProofError

    from .first_use import drop_lost, lost_floor
    from .trust_handover import continue_trust
    from .trust_state import TrustState

    get = fetch or log.fetch
    given = vkey
    verifier = verifier_from_vkey(vkey)
    # (1)
    note = get("checkpoint")
    handovers: list[bytes] = []
    try:
        cp = verify_checkpoint(note, verifier)
    except FormatError as e:  # an error page served with 200, another file: say where from
        raise FormatError(f"{log.url}checkpoint: not a signed checkpoint: {e}") from e
    except SignatureError:
        handovers = _fetch_handovers(get)
        vkey, cp = _follow_rotation(note, vkey, handovers)
    what = f"log {cp.origin} at {log.url}"
    # (2)
    reader = TileReader(get, cp.size)
    try:
        root = reader.root()
    except FileNotFoundError as e:
        raise ProofError(f"{what}: a tile the checkpoint of size {cp.size} needs is missing: "
                         f"{e}") from e  # fmt: skip
    if root != cp.root:
        raise ProofError(
            f"{what}: the served tiles give root {root.hex()[:16]}… for size {cp.size}, but the "
            f"signed checkpoint says {cp.root.hex()[:16]}…: the published tree is not the signed "
            "one"
        )
    # (3) A key noted in the state whose floor was removed is no first sight (rev25).
    lost = lost_floor(given) if state is None else None
    state = state or TrustState.open(given)
    if lost is not None and state.floor() is None:
        drop_lost(state, what, lost)
    carried: Checkpoint | None = None
    if state.vkey != vkey:  # the key was rotated: this user's state of the new key
        before = state.floor_checkpoint()
        state = state.sibling(vkey)
        if state.floor() is None:
            try:
                continue_trust(state, note, handovers, reader.consistency_proof, what=what)
            except TamperError as e:
                raise ConsistencyError(str(e), old=None, new=note) from e
            carried = before
    old = state.floor_checkpoint()
    proof: list[bytes] = []
    if old is not None and 0 < old.size < cp.size:
        try:
            proof = reader.consistency_proof(old.size, cp.size)
        except FileNotFoundError as e:
            raise ProofError(f"{what}: a tile for the consistency proof from size {old.size} "
                             f"is missing: {e}") from e  # fmt: skip
    try:
        advanced = state.check_extends(note, proof, what=what)
    except ConsistencyError as e:
        # The two signed checkpoints are the evidence of the log's misbehaviour: the old one is
        # in the state, the new one travels with the error (the command prints it).
        raise ConsistencyError(
            f"{e}; nothing was remembered: keep both signed checkpoints as evidence",
            old=state.floor(), new=note, proof=proof,
        ) from e
    # (4)
    if advanced:
        state.advance_floor(note, proof, what=what)
    if carried is not None:  # remembered by continue_trust: report what was seen before
        old, advanced = carried, True
    # (5)
    cosigned = witness_key = None
    if witness is not None:
        cosigned = cosign_note(note, witness, now=now)
        witness_key = witness_vkey(witness)
    return MonitorResult(
        log.url, cp.origin, cp.size, cp.root, None if old is None else old.size,
        None if old is None else old.root, advanced, log.fetched, note, cosigned, witness_key,
        vkey, tuple(state.rollbacks()),
    )  # fmt: skip


def _fetch_handovers(get: Callable[[str], bytes]) -> list[bytes]:
    """The log's key handovers, ``key-handovers/1``, ``2``, ... up to the first 404."""
    out: list[bytes] = []
    while len(out) < 1000:
        try:
            out.append(get(f"key-handovers/{len(out) + 1}"))
        except FileNotFoundError:
            break
    return out


def _follow_rotation(note: bytes, vkey: str, handovers: list[bytes]) -> tuple[str, Checkpoint]:
    """The key among those ``vkey`` handed over to (`verify.log_key.key_chain`) that signed
    ``note``, and the checkpoint.

    Raises:
        SignatureError: no key of the chain signed it (the key was replaced, not rotated).
        FormatError, VerificationError: a bad handover, or two successors of one key.
    """
    from trajledger.verify.log_key import key_chain

    for h in key_chain(vkey, handovers):
        try:
            return h.new, verify_checkpoint(note, verifier_from_vkey(h.new))
        except SignatureError:
            continue
    verify_checkpoint(note, verifier_from_vkey(vkey))  # raises the SignatureError
    raise AssertionError("unreachable")


# -- applying what the log says ---------------------------------------------------------------


def watch_updates(
    ledger: LedgerHome,
    policy: TrustPolicy,
    signers: list[Signer],
    log: HttpLog,
    result: MonitorResult,
    *,
    fetch: Callable[[str], bytes] | None = None,
) -> Changes | None:
    """Apply the watched log's extension to ``ledger``, as an import of it would.

    Preconditions: `monitor` checked ``result`` (the checkpoint, its tiles, its consistency with
    the floor, which it advanced).

    Steps:
        1. The size applied of this log (`updates.origin_state`); none (nothing ever imported
           from it): 0 when the ledger holds records another log brought, which this one may
           revoke (`first_contact`), else nothing to do (None); met first, nothing read about
           what the ledger holds: None too, nothing applied (the size applied is recorded: the
           log was examined up to it). The log's keys before its key rotated
           (`first_contact.rotated_from`: its handovers that lead to its key) are its own too,
           as an import's bundle's are; a key without a size applied starts where such a key's
           stopped, when the tree checked under it is a prefix of this one (a consistency proof
           from the tiles: `first_contact.applied_across`), else from the first entry.
        2. Read every entry from there to the checkpoint's size from the entry bundles, one
           bundle at a time; their leaf hashes, after the tree's right edge at the size
           applied, must give the signed root (the tiles are fetched again: what the server
           answered `monitor` proves nothing about this answer); each inclusion proof recorded
           is checked against it. Only the entries that can matter here are kept (the log's
           policies, entries about what the ledger holds and withdrawals of approvals it holds:
           all `updates.select` and the key compromises look at in an extension), so memory
           follows them, not the extension. From `READ_BAR_FROM` entries on, a bar is drawn
           over them (``ledger.progress``).
        3. Fetch the published envelope (``envelopes/<hex>``, a 404 is "not published") of each
           kept entry; choose what to take in (`updates.select`).
        4. Without ``signers``: nothing is recorded; what would be taken in is listed as
           pending. With them: take it in (`updates.apply_update`), and advance the size
           applied.

    Raises:
        ProofError: the served entries (or tiles) are not those of the signed tree.
        LedgerError: the log cannot be fetched; StoreError, LogError: the ledger cannot be
            written; PolicyError: ``signers`` may not sign an import.
    """
    from trajledger.verify.digest import digest_bytes
    from trajledger.verify.errors import ProofError
    from trajledger.verify.log_entry import LogEntry
    from trajledger.verify.merkle import leaf_hash, verify_inclusion

    from .catalog import origin_name
    from .first_contact import (
        applied_across,
        applied_for,
        brought,
        first_start,
        marked,
        relayed,
        rotated_from,
        saw,
    )
    from .progress import no_progress
    from .update_compromises import own_signed, pending_compromises
    from .update_keys import policy_keys
    from .update_reads import import_records
    from .updates import (
        NOT_TAKEN,
        Changes,
        Update,
        apply_update,
        held,
        label,
        origin_state,
        select,
        withdraws,
    )

    get = fetch or log.fetch
    # The tiles are fetched again (a new reader): a server may answer otherwise than it did
    # to `monitor`, and a level-0 tile under a full tile of level 1 never gave the root. So the
    # entries themselves, after the right edge of the tree before them, must give the signed
    # root (as an update bundle's extension must): none can be replaced, dropped or added.
    reader = TileReader(get, result.size)
    # (1)
    origin = origin_state(ledger, result.vkey)
    applied = applied_for(origin)  # 0: records wait to be read against it
    served = functools.cache(lambda: _fetch_handovers(get))
    if applied is None and first_start(ledger, None) is not None:  # after a rotation: where
        # its old key's read stopped, its tree proven a prefix (hist39 finding 6)
        applied = applied_across(ledger, result.vkey, None, served(), verify_checkpoint(
            result.note, verifier_from_vkey(result.vkey)), reader.consistency_proof)
    first = applied is None  # never applied: from its first entry (`first_contact`)
    applied = first_start(ledger, applied)
    if applied is None or applied >= result.size:
        return None
    logs = rotated_from(ledger, result.vkey, served)
    read = marked({result.vkey, *logs}) if applied == 0 else frozenset()  # cleared after
    # (2)
    edge = reader.compact_range(applied)
    entries: dict[int, bytes] = {}
    leaves: dict[int, bytes] = {}
    signed_by: set[str] = set()  # the log's keys (`first_contact.saw`)
    owners: dict[int, bytes] = {}  # its policies, import records, refusals (`own`)
    unreadable: ProvenanceError | None = None  # raised once the entries proved the root
    fetched: dict[str, bytes] = {}  # envelopes as served (3)
    start = applied
    # a first contact reads the log from entry 0 (1M entries: minutes): drawn, as `home`'s
    # first use of a long log is (out37's Left)
    bar = (ledger.progress or no_progress) if result.size - applied >= READ_BAR_FROM \
        else no_progress
    with bar(result.size - applied,
             f"reading log {origin_name(result.vkey)}'s entries") as advance:
        while start < result.size:
            end = min(result.size, (start // TILE_WIDTH + 1) * TILE_WIDTH)
            raws = reader.entries(start, end)
            mine = ledger.trust_state()  # what it holds, once a bundle (not an entry: vend43)
            hashes = [leaf_hash(raw) for raw in raws]
            edge = edge.extend(hashes)
            for i, raw, h in zip(range(start, end), raws, hashes, strict=True):
                try:
                    entry = LogEntry.from_bytes(raw)
                except ProvenanceError as error:
                    unreadable = unreadable or error
                    continue
                signed_by.update(entry.signers)
                if entry.kind in NOT_TAKEN:
                    owners[i] = raw
                about = entry.kind != "trust-policy" and (held(ledger, entry.subject, mine)
                                                          or withdraws(ledger, entry, mine))
                if about or entry.kind == "trust-policy":
                    entries[i], leaves[i] = raw, h
                first = first and not about
            advance(end - start)
            start = end
    if edge.root() != result.root:
        raise ProofError(f"log {result.origin} at {log.url}: entries {applied} to "
                         f"{result.size - 1} as served do not give the root of its checkpoint "
                         f"of size {result.size}: the served log is not the signed tree")
    if unreadable is not None:
        raise unreadable  # the signed tree holds an entry that cannot be read

    def envelope(digest: str, into: dict[str, bytes]) -> bytes | None:  # as served, checked
        if digest in fetched or ledger.store.exists(digest):
            return fetched.get(digest)  # (one in the store: read there)
        try:
            data = get(f"envelopes/{digest[7:]}")
        except FileNotFoundError:
            return None  # not published: a revocation then fails closed here
        if digest_bytes(data) != digest:
            raise ProofError(f"log {result.origin} at {log.url}: envelope {digest} "
                             f"hashes to {digest_bytes(data)}")
        into[digest] = data
        return data

    def own() -> set[str]:  # its own keys: those whose signatures of its policies, import
        # records and refusals verified, not its entries' list (rev53's Left); the envelopes
        # fetched for it alone are not kept
        return own_signed(ledger, {result.vkey, *logs}, owners,
                          lambda d: fetched.get(d) or envelope(d, {}))

    if first:  # met first, nothing in it about what the ledger holds: nothing applied, but
        # examined up to its size (rev35 finding 1: else every monitor read it all again)
        ownkeys = own()
        origin.advance_floor(result.note, what=f"log {result.origin} at {log.url}",
                             applied=result.size)
        saw({result.vkey, *logs}, signed_by, applied, read, ownkeys)
        return None
    # (3)
    for raw in entries.values():
        envelope(LogEntry.from_bytes(raw).envelope, fetched)
    ownkeys = own()
    taken, consulted = select(ledger, entries, extension=applied, asked=set(),
                              have=lambda d: d in fetched or ledger.store.exists(d),
                              logs={result.vkey, *logs})
    # (4)
    what = f"log {origin_name(result.vkey)} at {log.url}"
    if not taken and not consulted:
        origin.advance_floor(result.note, what=what, applied=result.size)
        saw({result.vkey, *logs}, signed_by, applied, read, ownkeys)
        return Changes(origin_name(result.vkey))
    if not signers:
        changes = Changes(origin_name(result.vkey))
        for i in taken:
            e = LogEntry.from_bytes(entries[i])
            if e.kind in ("revocation", "erasure"):
                changes.pending.append({"digest": e.subject, "logIndex": i, "kind": e.kind,
                                        "label": label(ledger, e.subject)})
        # the keys its policy changed, each run until one with keys takes the policy in (upd45)
        seen = Update(result.vkey, result.note, entries, taken, consulted, lambda i: (),
                      fetched, None, result.size, logs=logs)
        policy_keys(ledger, policy, seen, imports := import_records(ledger), {}, changes)
        pending_compromises(ledger, policy, seen, imports, changes)  # and compromises (upd46)
        return changes

    def inclusion(i: int) -> list[bytes]:  # checked: it goes into the signed import record
        proof = reader.inclusion_proof(i, result.size)
        verify_inclusion(i, result.size, leaves[i], proof, result.root)
        return proof

    update = Update(result.vkey, result.note, entries, taken, consulted, inclusion, fetched,
                    None, result.size, logs=logs)
    brought(ledger, [entries[i] for i in taken], {result.vkey, *logs}, fetched.get,
            policy.role("approver").keyids)  # unread against other logs

    def floor() -> None:  # and the log's keys; read from 0, what waited to be read is
        origin.advance_floor(result.note, what=what, applied=result.size)
        saw({result.vkey, *logs}, signed_by, applied, read, ownkeys)

    done = apply_update(ledger, policy, signers, update, what=what, floor=floor)
    relayed(done.changes, {result.vkey, *logs})  # a stop another log signed: named
    return done.changes
