"""The ledger's handle, `LedgerHome`: a ledger home directory opened for this user.

Layout::

    <home>/ledger.toml     settings (origin, store location, whether keys are encrypted, group
                           sharing); pinned in the user's state at first use (`_pin_settings`)
    <home>/keys/           signing keys (NAME.key encrypted PKCS#8, mode 0600; NAME.pub)
    <home>/objects/        the object store (unless ledger.toml points elsewhere)
    <home>/log/            the transparency log (C2SP tlog-tiles layout)
    <home>/log-key/        the log's Ed25519 key (log.key, log.pub; next.key, next.pub only
                           while `LedgerHome.rotate_log_key` runs)

Scope: create (atomically) and open a home, check the modes of its directories and key files,
pin its settings (``ledger.config``) and its log key in the user's state, open its store and its
log against this user's floor, keep this user's state of the log up to date, rotate the log's
key, upgrade a ledger of an older trajledger.
Non-scope: everything that records, indexes, verifies or exchanges: the services above it take
the handle, and `trajledger.Ledger` composes them (docs/ARCHITECTURE.md: the handle's floor
imports nothing above it).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from trajledger.verify.errors import FormatError
from trajledger.verify.ledger_dir import read_regular
from trajledger.verify.note import verifier_from_vkey

from .access import LOG_KEY_DIR, private_umask, refuse_writable_ledger
from .config import (
    CONFIG_NAME,
    KEYS_ENCRYPTED,
    KEYS_PLAIN,
    LedgerConfig,
    default_origin,
    init_refusal,
    ledger_path,
    no_ledger,
    setting_changes,
)
from .errors import AlreadyRecordedError, LedgerError, TamperError, next_step, read_failure
from .first_use import announce as announce_first_use
from .first_use import judge as first_use_judge
from .first_use import lost_floor
from .fs import (
    fsync_dir,
    is_stale,
    move_into_place,
    remove_tree,
    temp_name,
    tmp_entries,
    write_file_atomic,
    write_output,
)
from .keys import KeyStore
from .store import ObjectStore
from .user_state import (
    REQUIRE_PIN_ENV,
    fingerprint,
    known_origin,
    notice,
    origin_dir,
    private_dir,
    read_state_file,
    refuse_foreign,
    require_pin,
    scratch_dir,
    state_dir,
    state_step,
)

if TYPE_CHECKING:
    from trajledger.verify.log_key import Handover
    from trajledger.verify.statement import Statement

    from .keys import Signer
    from .log import EntrySpec, Log
    from .log.checked import CheckedNotes
    from .progress import ProgressFactory
    from .trust_state import TrustState

__all__ = [
    "LOG_KEY_DIR",
    "LOG_KEY_NAME",
    "REQUIRE_PIN_ENV",
    "LedgerHome",
    "envelope_statement",
]

SETTINGS_PIN = ".settings.json"
"""The settings a user pinned of a log's ledger, in the state's directory of that origin."""

LOG_KEY_NAME = "log"
"""The log's Ed25519 key, ``log-key/log.key``: apart from the artifact signing keys in ``keys/``
(it signs checkpoints, nothing else). Encrypted with its passphrase (``TRAJLEDGER_PASSPHRASE_LOG``,
``TRAJLEDGER_PASSPHRASE``, or a passphrase file: `keys.passphrase_sources`) when one is given at
``init`` (and then needed to append), else plain, because the log signs unattended."""
NEXT_LOG_KEY_NAME = "next"
"""The log's next key, ``log-key/next.key``, during a rotation (`LedgerHome.rotate_log_key`): it
replaces ``log.key`` once the handover is published."""


_BAR_FROM = 2_000
"""Entries behind from which reading a log into the user's state draws a bar."""


def _encrypt_log_key(keys: KeyStore) -> bool:
    """Whether a new log key is encrypted: its passphrase is set or asked for and given."""
    return keys.require_encrypted or keys.has_passphrase(LOG_KEY_NAME)


def _note_size(note: bytes) -> int:
    """A checkpoint note's tree size (its second line), unverified; 0 when there is none."""
    lines = note.split(b"\n", 2)
    return int(lines[1]) if len(lines) > 2 and lines[1].isdigit() else 0


def _inside(store: str) -> bool:
    """A relative store directory inside the ledger (made with it at ``init``)."""
    norm = os.path.normpath(store)
    return not os.path.isabs(norm) and norm != ".." and not norm.startswith("../")


def envelope_statement(ledger: LedgerHome, envelope: str) -> Statement | None:
    """The statement of the stored envelope ``envelope``, parsed but not verified; None when it
    is not one, or not in the store (a caller comparing records treats it as different). A read
    the disk failed (`errors.read_failure`) raises its `StoreError`: nothing is known of it."""
    from trajledger.verify.dsse import MAX_ENVELOPE_BYTES, Envelope
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.statement import Statement

    try:
        return Statement.from_bytes(Envelope.from_bytes(
            ledger.store.get(envelope, limit=MAX_ENVELOPE_BYTES)).payload)
    except ProvenanceError as e:
        if read_failure(e):
            raise
        return None


def _read_or_none(store: ObjectStore, digest: str, failed: bool = False) -> bytes | None:
    """A stored blob's bytes, unverified, or None when it is missing or unreadable (``failed``:
    a read the disk failed, `errors.read_failure`, raises its `StoreError` instead)."""
    try:
        return store.get(digest)
    except (OSError, LedgerError) as e:
        if failed and read_failure(e):
            raise
        return None


def local_blob_reader(root: Path) -> Callable[[str], bytes | None]:
    """`LedgerHome.read_blob` of the local store at ``root``, made in another process (the
    workers of a long first use: `trust_state.TrustState.sync`)."""
    return functools.partial(_read_or_none, ObjectStore(root))


def _refuse_a_filled_store(root: Path, store: str, *, remote: bool) -> None:
    """Refuse a store outside the ledger that already holds an object (a directory made with
    the ledger is new): ``gc --yes`` removes, as orphans, the objects its own log does not
    name, so a store shared by two ledgers loses each one's objects to the other's gc. A
    remote store is listed only when ``remote`` (``trajledger init`` reaches it anyway).

    Raises:
        LedgerError: the store holds an object.
    """
    if _inside(store) or ("://" in store and not remote):
        return
    # (a relative store is named from the ledger directory, which may not exist yet)
    where = store if "://" in store else Path(os.path.normpath(root.absolute() / store))
    found = next(ObjectStore(where).iter_digests(), None)
    if found is not None:
        raise LedgerError(
            f"--store {store}: already holds objects (another ledger's?): a ledger's 'gc --yes' "
            "removes what its own log does not name, so two ledgers cannot share a store; give "
            "an empty or new directory"
        )


class LedgerHome:
    """An open ledger home: its paths, settings, keys, object store, log and this user's
    trusted state of the log. Use `init` to create one and `open` to use it.

    The floor of the ledger package: it imports nothing that records, indexes or exchanges;
    the services above take it (``ledger: LedgerHome``), and the public `trajledger.Ledger`
    composes them on top of it.
    """

    def __init__(self, root: Path, config: LedgerConfig, keys: KeyStore) -> None:
        """Use `LedgerHome.open` or `LedgerHome.init` (or `trajledger.Ledger`'s)."""
        self.root = root
        self.config = config
        self.keys = keys
        self._store: ObjectStore | None = None
        self._log: Log | None = None
        self._state: TrustState | None = None
        self._pinned_ahead: set[str] = set()
        self.progress: ProgressFactory | None = None
        """Draws a bar for long work of this object's own (``(total, label) -> context of
        advance(n)``): reading a large log into the user's state. The CLI sets it."""
        self.own_process = False
        """This object's process is a command's own (the CLI sets it): work may be spread over
        forked processes (re-hashing a lineage's blobs, `ledger.rehash`)."""

    @property
    def store(self) -> ObjectStore:
        """The object store."""
        if self._store is None:
            loc = self.config.store
            self._store = ObjectStore(loc if "://" in loc else self.root / loc)
        return self._store

    @property
    def scratch(self) -> Path:
        """Where commands write what they will hash, store and sign (`user_state.scratch_dir`)."""
        return scratch_dir(self.root, shared=self.config.group_writable)

    @property
    def log_dir(self) -> Path:
        """Where the log lives."""
        return self.root / "log"

    @property
    def log(self) -> Log:
        """The transparency log, opened on first use; its key is loaded only to append.

        Steps:
            1. The log's key: ``log-key/log.pub`` (or the log's own ``vkey`` file in a copy
               without it); its origin must be the ledger's.
            2. This user's trust in it (the state directory): the floor seen before, or carried
               over from the key it took over from. With neither, this is the first use of the
               log: refused when ``TRAJLEDGER_REQUIRE_PIN=1`` and the key was not pinned ahead;
               else the log is read and pinned now, and that is announced once (`notice`).
            3. A plaintext ``log-key/log.key`` where the ledger's keys are encrypted (or a
               passphrase for it is set) is refused: someone without the passphrase made it.

        Raises:
            LogError: the ledger has no log, or it is damaged.
            LedgerError: ``log-key/log.pub`` is damaged (`log_vkey`).
            TamperError: the log key's origin is not the ledger's, a first use that must be
                pinned, a planted plaintext log key.
        """
        if self._log is None:
            from trajledger.verify.kinds import KINDS

            from .log import Log, OneRecord
            # (1)
            required = require_pin()  # a value that means nothing is refused, first use or not
            vkey = self.log_vkey()
            # The newest checkpoint this user has seen is a floor the log must extend (kept
            # outside the ledger), and what this process publishes raises it. A key seen for
            # the first time carries over the floor of the key it took over from.
            # Without log-key/log.pub (a copy shared without it), the log's own vkey file
            # names the key: the user's state of that key still holds the floor.
            state_key = vkey if vkey is not None else self._published_vkey()
            if state_key is not None and state_key.split("+", 1)[0] != self.config.origin:
                raise TamperError(
                    f"{self.log_dir / 'vkey'}: the log's key is of {state_key.split('+')[0]!r}, "
                    f"but this ledger's origin is {self.config.origin!r}; nothing was changed",
                    self.log_dir / "vkey",
                )
            # (2)
            lost = lost_floor(state_key) if state_key is not None else None
            state = self.log_state(state_key) if state_key is not None else None
            if state is not None and state.floor() is None:
                self._continue_trust(state)
            first_use = state is not None and state.floor() is None and not state.pinned()
            if first_use and state is not None:
                try:
                    first_use = first_use_judge(
                        state, f"log {self.config.origin} ({self.log_dir})", self.log_dir / "vkey",
                        pinned_ahead=self._pinned_ahead, required=required, lost=lost)
                except TamperError:
                    self._state = None  # closed (and removed, when its floor was lost)
                    raise
            # (3)
            self._refuse_plain_log_key()
            self._log = Log.open(
                self.log_dir,
                signer=self._log_signer,
                vkey=vkey,
                cache_dir=self.cache_dir,
                cleanup=self.sweep_leftovers,
                floor=state.floor() if state is not None else None,
                on_publish=None if state is None else functools.partial(self._published, state),
                checked=self.checked,
            )
            self._log.one_record = OneRecord(
                frozenset(k.name for k in KINDS.values() if k.lineage), self._one_record)
            self._log.reload_signer = functools.partial(self._log_signer, ask=False)
            if first_use and state is not None:
                announce_first_use(self.config.origin, self.trust_state())
        return self._log

    def _one_record(self, spec: EntrySpec, same: Sequence[tuple[int, str]]) -> int | None:
        """One record per artifact digest and origin (`Log.one_record`, under the log's lock,
        for every writer: the CLI, the library, a Ray writer, a recorder), for the artifact
        kinds (`verify.kinds.Kind.lineage`: records about a digest, approvals, revocations...,
        are many).

        Steps:
            1. Records of the same kind and digest logged here by an import are another log's
               (an import record lists their envelopes): not this origin's, not compared.
            2. A record of this origin whose signed metadata other than times is the same
               (`log.spec.differences`) is the one the new entry would repeat: its index is
               returned and nothing is appended; other metadata is refused.

        Raises:
            AlreadyRecordedError: the digest is recorded with other signed metadata.
        """
        from .log.spec import differences

        # (1)
        state = self.trust_state()

        def imported(i: int, env: str) -> bool:
            return i < state.size and any(
                (e := state.entry(j)) is not None and e.kind == "import"
                for j in state.listing(env)
            )

        mine = envelope_statement(self, spec.envelope)
        for i, env in same:
            if imported(i, env):
                continue
            # (2)
            theirs = envelope_statement(self, env)
            diff = (differences(spec.kind, theirs, mine) if theirs is not None and mine is not None
                    else ["the signed statement cannot be read"])
            if not diff:
                return i
            raise AlreadyRecordedError(
                f"{spec.kind} {spec.subject}: already recorded at log index {i} with other "
                f"signed metadata ({'; '.join(diff)}); a digest names one record of this log, "
                "so nothing was recorded",
                i,
            )
        return None

    def expect_log_keys(self, vkeys: Sequence[str]) -> None:
        """Log keys the user pinned ahead by holding them (a ``--policy`` file's log role): the
        first use of this ledger's log under one of them is not a blind one."""
        self._pinned_ahead |= set(vkeys)

    def log_keys(self, *, ask: bool = True) -> KeyStore:
        """The log's key directory: its keys go by ``log`` for their passphrase
        (``TRAJLEDGER_PASSPHRASE_LOG``; a prompt, unless not ``ask``: `Log.reload_signer`)."""
        return KeyStore(
            self.root / LOG_KEY_DIR,
            self.keys._ask if ask else None,
            label=LOG_KEY_NAME,
            require_encrypted=self.keys.require_encrypted,
            group_writable=self.config.group_writable,
        )

    def _refuse_plain_log_key(self) -> None:
        """A plaintext ``log-key/*.key`` where keys are encrypted is refused; in a ledger of
        trajledger 0.1.0 (no ``keys`` setting), one note names the upgrade."""
        keys = self.log_keys()
        plain = keys.plaintext()
        if not plain:
            return
        set_env = keys.passphrase_given(LOG_KEY_NAME)
        if self.config.keys == KEYS_ENCRYPTED or set_env:
            why = (
                "this ledger's keys are encrypted (ledger.toml)"
                if self.config.keys == KEYS_ENCRYPTED
                else "a passphrase for it is set"
            )
            raise TamperError(
                f"{plain[0]}: the log's key is not encrypted, but {why}: a key planted by "
                "someone without the passphrase, or a ledger replaced by another; nothing was "
                "read or changed. If you wrote it yourself, encrypt it with 'trajledger key "
                "encrypt --log'",
                plain[0],
            )

    def trust_state(self, *, on_progress: Callable[[int], None] | None = None) -> TrustState:
        """The user's trusted state of this ledger's log, extended to its signed checkpoint.

        The first use reads the whole log (``on_progress`` is called as entries are indexed);
        later ones read only what was appended since. See `ledger.trust_state`.

        Raises:
            TamperError: the log was rolled back or forked since this user last saw it, or its
                entries do not give its signed root.
            LogError: the log cannot be read.
        """
        # Read once (ci47: each read opens two files), first: a rotation published meanwhile
        # is followed. Its size, unverified, only chooses whether to draw a bar.
        note = self.log.checkpoint_bytes()
        state = self._current_state()
        behind = _note_size(note) - state.size
        if on_progress is None and self.progress is not None and behind >= _BAR_FROM:
            with self.progress(behind, "reading the log into your state") as advance:
                seen = [0]

                def step(done: int) -> None:
                    advance(done - seen[0])
                    seen[0] = done

                return self.trust_state(on_progress=step)
        blob = self.read_blob
        for attempt in range(8):
            try:
                state.sync(note, self.log.entries, blob,
                           what=f"{self.log_dir / 'checkpoint'}", on_progress=on_progress,
                           blob_reader=(functools.partial(local_blob_reader, self.store.root)
                                        if self.store.is_local else None))
                break
            except TamperError:
                # Another process may have published (and raised the floor) after this one
                # read the checkpoint: it is then on disk, newer. The same note is a rollback.
                newer = self.log.checkpoint_bytes()
                state = self._current_state()  # (a rotation followed: the new key's)
                if newer == note or attempt == 7:
                    raise
                note = newer
        return state

    def _published(self, opened: TrustState, note: bytes) -> None:
        """The log's ``on_publish``: this user's floor raised in ``opened`` (the key the log was
        opened under's), or in the key's it followed a rotation to (`_current_state`)."""
        (opened if self.log.followed is None else self._current_state()).published(note)

    def _current_state(self) -> TrustState:
        """This user's state of the log's key, continued after a rotation the log followed."""
        state = self.log_state(self.log.vkey)
        if self.log.followed is not None and state.floor() is None:
            self._continue_trust(state)
        return state

    def rebuild_trust_state(
        self, *, on_progress: Callable[[int], None] | None = None
    ) -> TrustState:
        """`trust_state`, derived again from the whole log, the floor kept (``trajledger
        reindex``): the old rows are forgotten in the transaction that derives the new ones, so
        the user's commands running meanwhile read the old rows or the new, never none (which
        would answer nothing revoked, built on or held out)."""
        self.log_state(self.log.vkey).rebuild(at_next_sync=True)  # the state trust_state syncs
        return self.trust_state(on_progress=on_progress)

    def read_blob(self, digest: str, *, failed: bool = False) -> bytes | None:
        """A stored blob's bytes, unverified (what a record lists: never what to believe), or
        None when it is missing or unreadable (``failed``: a read the disk failed raises)."""
        return _read_or_none(self.store, digest, failed)

    def log_state(self, vkey: str) -> TrustState:
        """This user's state of the log with verifier key ``vkey`` (this ledger's, or one it
        rotated from), opened once and kept, as it is, without reading the log (`trust_state`
        extends it to the signed checkpoint)."""
        from .trust_state import TrustState

        if self._state is None or self._state.vkey != vkey:
            self._state = TrustState.open(vkey)
            self._state.progress = self.progress
            self._state.checked = self.checked
        return self._state

    @functools.cached_property
    def checked(self) -> CheckedNotes:
        """Verifies the log's checkpoint notes for this handle, each note once by each key:
        its log, its trust state and the verifier built over that state (`TrustedLog`) share it
        (ci47 finding 6: one `verify` verified the same note four times)."""
        from .log.checked import CheckedNotes

        return CheckedNotes()

    @property
    def cache_dir(self) -> Path:
        """Where derived data lives (catalog, lookup cache, audit index): ``<ledger>/index/``."""
        return self.root / "index"

    def log_vkey(self) -> str | None:
        """The log's verifier key from ``log-key/log.pub`` and the origin.

        A log whose ``vkey`` file differs from it is refused as tampered. During a key rotation
        (`rotate_log_key`), once the handover is published, the ``vkey`` file names the next
        key (``log-key/next.pub``): that one is the log's. None when there is no ``log.pub``:
        ``log-key/`` holds the log's private key, so a copy of a ledger may come without it;
        the log's own ``vkey`` file is then used. A key file that is there is never skipped: a
        damaged one is an error, not a reason to trust the log's own file.

        Raises:
            LedgerError: ``log.pub`` or ``next.pub`` cannot be read, or is not an Ed25519 key.
        """
        nxt = self._log_key_vkey(NEXT_LOG_KEY_NAME)
        if nxt is not None:
            try:
                published = read_regular(self.log_dir / "vkey").decode("utf-8").strip()
            except (OSError, UnicodeDecodeError):
                published = None
            if published == nxt:
                return nxt
        return self._log_key_vkey(LOG_KEY_NAME)

    def _log_key_vkey(self, name: str) -> str | None:
        from trajledger.verify.errors import FormatError

        from .encode import vkey_string

        path = self.root / LOG_KEY_DIR / f"{name}.pub"
        if not path.exists() and not path.is_symlink():
            return None
        pub = self.log_keys().public(name)
        try:
            return vkey_string(self.config.origin, pub.raw_ed25519())
        except FormatError as e:
            raise LedgerError(f"{path}: the log key: {e}") from e

    def _log_signer(self, *, ask: bool = True) -> Signer:
        """The log's private key: ``next`` while a rotation that published it is unfinished."""
        keys = self.log_keys(ask=ask)
        nxt = self._log_key_vkey(NEXT_LOG_KEY_NAME)
        if nxt is not None and nxt == self.log_vkey() and (
            self.root / LOG_KEY_DIR / f"{NEXT_LOG_KEY_NAME}.key"
        ).exists():
            return keys.signer(NEXT_LOG_KEY_NAME)
        return keys.signer(LOG_KEY_NAME)

    def _published_vkey(self) -> str | None:
        """The verifier key the log's own ``vkey`` file names, or None when unreadable (the
        log then refuses to open, saying why)."""
        try:
            text = read_regular(self.log_dir / "vkey").decode("utf-8").strip()
            verifier_from_vkey(text)
        except (OSError, UnicodeDecodeError, FormatError):
            return None
        return text

    def _pin_path(self, root: Path | None = None) -> Path:
        import hashlib

        where = str(self.root.resolve())
        return ((root or state_dir()) / "ledgers"
                / f"{hashlib.sha256(where.encode()).hexdigest()[:32]}.json")

    def _settings_path(self, root: Path | None = None) -> Path:
        return origin_dir(self.config.origin, root) / SETTINGS_PIN

    def _settings_pin(self) -> dict[str, Any]:
        return {
            "origin": self.config.origin,
            "store": self.config.store_pin,
            "keys": self.config.keys,
            "group_writable": self.config.group_writable,
        }

    def _pin_settings(self, *, replace: bool = False, accept: bool = False) -> list[str]:
        """Remember, for this user, which log this ledger directory holds (its origin, pinned
        per directory) and the settings of that log's ledger that decide what is trusted (the
        store's location, whether keys are encrypted, group sharing; pinned per log, so a copy
        or a move of the ledger keeps them); a later use that finds them changed is refused.

        Without it, someone able to write the directory could replace the whole ledger with one
        of their own (another origin, their own keys and policy), point the store elsewhere
        (new blobs go there, ``erase`` deletes only that copy), or declare plaintext keys or a
        group-writable ledger acceptable. Rotating the log's key keeps the origin (the trust
        state follows the handover); `init` replaces the pins. A stronger setting (keys now
        encrypted, group sharing ended) is taken as it is.

        Args:
            replace: forget what was pinned (a new ledger made here).
            accept: take a deliberate change of the store or of group sharing (`trajledger
                trust --settings`); a different origin is still refused.

        Returns:
            What changed against the pin (with ``accept``: what was accepted).

        Raises:
            TamperError: another origin, another store, keys no longer encrypted or group write
                allowed since this user last used the ledger.
            LedgerError: a pin cannot be read or written.
        """
        import json

        state = state_dir()  # (checked once: ci47)
        config, pin, settings = (self.root / CONFIG_NAME, self._pin_path(state),
                                 self._settings_path(state))
        now = self._settings_pin()
        changes: list[str] = []
        try:
            for path in (pin, settings):
                private_dir(path.parent)
                refuse_foreign(path)
            known = not replace and pin.exists()
            if known:
                doc = json.loads(read_state_file(pin))
                if doc.get("origin") != now["origin"]:
                    raise TamperError(
                        f"{config}: this ledger directory held the log "
                        f"{doc.get('origin')!r} when you last used it, now {now['origin']!r}: "
                        "the ledger was replaced by another; nothing was changed. If you "
                        f"replaced it on purpose, remove {pin} and run again",
                        config,
                    )
            else:
                where = {"root": str(self.root.resolve()), "origin": now["origin"]}
                write_file_atomic(pin, json.dumps(where).encode(), mode=0o600)
            if not replace and settings.exists():
                old = json.loads(read_state_file(settings))
                changes = setting_changes(old, now)
                if changes and not accept:
                    raise TamperError(
                        f"{config}: {'; '.join(changes)}; nothing was read or changed. If you "
                        "changed it on purpose, accept it with 'trajledger trust --settings'",
                        config,
                    )
                if old == now:
                    return changes
            elif known:
                notice(
                    f"{config}: your state (from an older trajledger) pinned this ledger's "
                    f"origin only; its store {now['store']!r} and key settings are now pinned "
                    f"too ({settings})"
                )
            write_file_atomic(settings, json.dumps(now).encode(), mode=0o600)
        except (OSError, ValueError, AttributeError) as e:
            step = next_step(e) if isinstance(e, OSError) else ""  # (a full disk: what to do)
            if isinstance(e, OSError) and not step:  # in the user's state: where it is (out52)
                step = state_step()
            raise LedgerError(f"{pin}: cannot read or write this ledger's pin: {e}{step}") from e
        return changes

    @classmethod
    def accept_settings(cls, root: str | os.PathLike[str]) -> list[str]:
        """Pin a ledger's settings as they are now, after a deliberate change (``trajledger
        trust --settings``): a moved store, group sharing set. Another origin is still refused
        (that is another ledger: remove its pin to use it).

        Returns:
            The changes accepted.

        Raises:
            LedgerError: no ledger, invalid settings, paths writable by others.
            TamperError: the directory holds another log than the one pinned.
        """
        root = Path(root)
        path = root / CONFIG_NAME
        try:
            config = LedgerConfig.from_toml(path.read_bytes(), path)
        except OSError as e:
            raise LedgerError(f"{path}: cannot read: {e.strerror}") from e
        refuse_writable_ledger(root, config)
        return cls(root, config, KeyStore(root / "keys"))._pin_settings(accept=True)

    def trusted(self) -> dict[str, Any]:
        """What this user holds about this ledger (``trajledger trust``): its pinned settings,
        its log key's fingerprint, whether it was pinned ahead and the floor's size."""
        import json

        pin = self._settings_path()
        doc = json.loads(read_state_file(pin)) if pin.exists() else {}
        vkey = self.log_vkey() or self._published_vkey()
        out: dict[str, Any] = {
            "ledger": str(self.root),
            "origin": self.config.origin,
            "store": doc.get("store"),
            "keys": doc.get("keys"),
            "group_writable": doc.get("group_writable"),
            "log_key": fingerprint(vkey) if vkey else None,
            "vkey": vkey,
            "pinned": None,
            "floor": None,
            "rollbacks": [],
        }
        if vkey is not None:
            state = self.log_state(vkey)
            floor = state.floor_checkpoint()
            out["pinned"] = state.pinned()
            out["floor"] = floor.size if floor is not None else None
            out["rollbacks"] = state.rollbacks()  # accepted ('trust --accept-rollback')
        return out

    def upgrade(self, *, plain: bool = False) -> list[str]:
        """Bring a ledger of trajledger 0.1.0 up to date (``trajledger upgrade``).

        Steps:
            1. Unless ``plain``: encrypt every plaintext private key (``keys/``, ``log-key/``),
               each with its passphrase.
            2. Record ``keys = "encrypted"`` (or ``"plain"``) in ``ledger.toml``, and pin it.

        Returns:
            One line per step taken.

        Raises:
            KeyError_: a key cannot be loaded, has no passphrase, or is a link (nothing recorded).
            LedgerError: ``keys = "encrypted"`` is recorded and ``plain`` was asked.
        """
        want = KEYS_PLAIN if plain else KEYS_ENCRYPTED
        if self.config.keys == want:
            return [f"{self.root / CONFIG_NAME}: keys = {want!r} already; nothing to do"]
        if self.config.keys == KEYS_ENCRYPTED:
            raise LedgerError(
                f"{self.root / CONFIG_NAME}: records encrypted keys; a ledger is not "
                "downgraded to plaintext keys"
            )
        steps = []
        # (1)
        if not plain:
            todo = [(s, p) for s in (self.keys, self.log_keys()) for p in s.plaintext_to_encrypt()]
            for store, path in todo:  # (a key file that is a link refused before any is changed)
                store.encrypt(path.stem)
                steps.append(f"{path}: encrypted")
        # (2)
        self.config = replace(self.config, keys=want)
        write_file_atomic(self.root / CONFIG_NAME, self.config.to_toml())
        self.keys.require_encrypted = want == KEYS_ENCRYPTED
        self._pin_settings()
        steps.append(f"{self.root / CONFIG_NAME}: keys = {want!r} recorded")
        return steps

    def _continue_trust(self, state: TrustState) -> None:
        """Carry this user's floor of the log's earlier keys over to ``state``, a key without
        one (`trust_handover.continue_trust`, with the log's handovers and proofs)."""
        from .log import Log
        from .trust_handover import continue_trust

        earlier = state.siblings()
        for other in earlier:
            other.close()
        if not earlier:
            return  # the first key of this log this user sees: nothing to carry
        reader = Log.open(self.log_dir, vkey=state.vkey, cache_dir=self.cache_dir)
        try:
            continue_trust(
                state,
                reader.checkpoint_bytes(),
                reader.key_handovers(),
                reader.consistency_proof,
                what=str(self.log_dir / "checkpoint"),
                # A key the user pinned itself is trusted on its own (two logs may share an
                # origin name); one pinned by no one must be handed over to.
                distinct=(state.vkey,) if state.pinned() or state.vkey in self._pinned_ahead
                else (),
            )
        finally:
            reader.close()

    def rotate_log_key(self) -> Handover:
        """Replace the log's key (after a compromise, or routinely), keeping the log.

        Steps:
            1. Create the next key, ``log-key/next.key`` (encrypted as at ``init``: where the
               ledger's keys are encrypted or the log key's passphrase is available), unless an
               interrupted rotation left one.
            2. Publish the handover (`Log.rotate_key`): the current tree signed by the old key
               and the next one, naming both; ``log/vkey`` then names the next key.
            3. Make the next key the log's key: ``log.pub``, then ``log.key`` replaced (the old
               private key is gone), then ``next.pub`` removed.
            4. This user's trust in the log continues under the new key: the next use carries
               the floor over (`trust_handover.continue_trust`).

        Running it again after an interruption at any step finishes the same rotation.

        Returns:
            The handover.

        Raises:
            LogError: the log cannot be written or its key loaded.
            KeyError_: no passphrase for an encrypted key.
            TamperError: the log's files contradict what was signed or committed.
        """
        keys = self.log_keys()
        directory = self.root / LOG_KEY_DIR
        # (1)
        if not (directory / f"{NEXT_LOG_KEY_NAME}.pub").exists():  # (or finish it)
            keys.create_or_finish(NEXT_LOG_KEY_NAME, encrypt=_encrypt_log_key(keys))
        if (directory / f"{NEXT_LOG_KEY_NAME}.key").exists():
            new = keys.signer(NEXT_LOG_KEY_NAME)
        else:  # step 3 was interrupted after the private key moved
            new = keys.signer(LOG_KEY_NAME)
        # (2)
        handover = self.log.rotate_key(new)
        # (3)
        try:
            pub = (directory / f"{NEXT_LOG_KEY_NAME}.pub").read_bytes()
            write_output(directory / f"{LOG_KEY_NAME}.pub", pub)  # (a killed one's temp gone)
            if (nxt := directory / f"{NEXT_LOG_KEY_NAME}.key").exists():
                os.replace(nxt, directory / f"{LOG_KEY_NAME}.key")
            os.unlink(directory / f"{NEXT_LOG_KEY_NAME}.pub")
            fsync_dir(directory)
        except OSError as e:
            raise LedgerError(
                f"{directory}: cannot install the new log key: {e.strerror}; run "
                "'trajledger log rotate-key' again to finish"
            ) from e
        # (4)
        if self._log is not None:
            self._log.close()
        self._log = None
        self._state = None
        return handover

    def sweep_leftovers(self) -> None:
        """Remove what killed writers left that no live writer can own (`fs.is_stale`) where
        writers put it now: temp objects of the store (``objects/sha256/.tmp-*``),
        ``<ledger>/tmp/*`` and `scratch` (a shared ledger's). Run by the log's writer under its
        lock, before its first append; cheap (a few directories listed); ``ledger.fsck`` finds
        leftovers everywhere."""
        if self.store.is_local:
            self.store.drop_temp_files()
        for parent in dict.fromkeys((self.root / "tmp", self.scratch)):
            for path in tmp_entries(parent):
                if is_stale(path):
                    remove_tree(path)

    @classmethod
    def init(
        cls,
        root: str | os.PathLike[str],
        *,
        origin: str | None = None,
        store: str = "objects",
        passphrase: Callable[[str], bytes | None] | None = None,
        check_store: bool = False,
    ) -> Self:
        """Create a ledger home. Refuses to touch an existing one.

        The log is created with it, with a new Ed25519 log key (see `LOG_KEY_NAME`).

        Args:
            root: the ledger directory (a `str` or a path).
            origin: the log origin (default `default_origin`).
            store: a directory relative to ``root``, or a remote URI (``s3://bucket/prefix``;
                S3 settings from the AWS variables, ``ledger.remote``).
            passphrase: asks for a key's passphrase (the log key's, asked as ``log``).
            check_store: check that a remote store is reachable first (``trajledger init``).

        Steps:
            1. Make the ledger in a temporary directory beside ``root``: the log key, encrypted
               when its passphrase is set (``TRAJLEDGER_PASSPHRASE_LOG`` or
               ``TRAJLEDGER_PASSPHRASE``) or given by ``passphrase`` (then ``keys =
               "encrypted"`` is recorded; else ``"plain"``), the log, the store directory and
               ``ledger.toml``.
            2. Move it into place.
            3. Pin its settings and its log key in this user's state.

        A failure at any step removes what the earlier ones made: no ``ledger.toml``, no half
        a ledger, nothing in the user's state; running it again then works.

        Raises:
            LedgerError: ``root`` already holds a ledger, or the origin is invalid.
            StoreError: ``check_store`` and the remote store cannot be reached.
        """
        from .log import Log
        from .trust_state import TrustState

        root = ledger_path(root)
        if (refused := init_refusal(root)) is not None:
            raise LedgerError(refused)
        if root.exists() and not root.is_dir():
            raise LedgerError(f"{root}: exists and is not a directory")
        if origin is not None:
            known = known_origin(origin)
            if known is not None:
                raise LedgerError(
                    f"origin {origin!r} already names another log you use (noted in {known}): "
                    "an origin names one log; choose another --origin, or remove that directory "
                    "to forget the other log"
                )
        config = LedgerConfig(origin or default_origin(), store)
        LedgerConfig.from_toml(config.to_toml(), root / CONFIG_NAME)  # validate the origin
        if check_store and "://" in store and not store.startswith("file://"):
            from .remote import require_reachable

            require_reachable(store)
        _refuse_a_filled_store(root, store, remote=check_store)
        # (1) Everything is made in a directory beside ``root``, then moved into place: a
        # failure at any step leaves nothing (no ledger.toml, no half a ledger).
        private_umask(config)
        root.absolute().parent.mkdir(parents=True, exist_ok=True)
        build = root.absolute().parent / temp_name(".init")
        undo: list[Callable[[], None]] = [lambda: remove_tree(build)]
        try:
            build.mkdir(mode=0o700)
            keys = KeyStore(build / LOG_KEY_DIR, passphrase, label=LOG_KEY_NAME)
            encrypt = _encrypt_log_key(keys)
            config = replace(config, keys=KEYS_ENCRYPTED if encrypt else KEYS_PLAIN)
            log_key = keys.create(LOG_KEY_NAME, encrypt=encrypt)
            Log.create(build / "log", config.origin, log_key, cache_dir=build / "index").close()
            if "://" not in store and _inside(store):
                (build / store).mkdir(parents=True, exist_ok=True)
            write_file_atomic(build / CONFIG_NAME, config.to_toml())
            for d in (build, *(p for p in build.iterdir() if p.is_dir())):
                os.chmod(d, 0o700 if d.name in (LOG_KEY_DIR, "keys") else 0o755)
            # (2) Into place: the whole directory at once (a new or empty ``root``), else its
            # parts, ledger.toml last (a directory without it is no ledger).
            undo += move_into_place(build, root, last=CONFIG_NAME)
            if "://" not in store and not _inside(store) and not (root / store).exists():
                (root / store).mkdir(parents=True)
                undo.append(lambda: remove_tree(root / store))
            # (3) This user's state: the settings and the log key are pinned (this user made
            # them: no first-use notice later).
            ledger = cls(root, config, KeyStore(root / "keys", passphrase,
                                                require_encrypted=encrypt))
            for made in (ledger._pin_path(), ledger._settings_path()):
                undo.append(lambda made=made: remove_tree(made))  # type: ignore[misc]
            ledger._pin_settings(replace=True)
            vkey = ledger.log_vkey()
            assert vkey is not None
            undo.append(lambda: TrustState.forget(vkey))
            state = TrustState.open(vkey)
            state.pin("created by you ('trajledger init')")
            state.close()
        except BaseException:
            for step in reversed(undo):
                with contextlib.suppress(OSError):
                    step()
            raise
        return ledger  # `log` opens it on first use, with this user's floor

    @classmethod
    def attached(cls, root: Path, config: LedgerConfig, log: Log) -> Self:
        """A view of a ledger whose log is served by another process.

        For processes that record into a ledger owned by a single writer elsewhere
        (``trajledger.integrations.ray``): blobs go to ``config.store`` (a URI or an absolute
        directory shared with the writer), log reads and appends go to ``log``, and derived
        caches live under ``root`` (a private directory of this process). It has no keys.
        """
        ledger = cls(root, config, KeyStore(root / "keys"))
        ledger._log = log
        return ledger

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        passphrase: Callable[[str], bytes | None] | None = None,
    ) -> Self:
        """Open an existing ledger home.

        Steps:
            1. Read ``ledger.toml``.
            2. Refuse directories, settings and key files others (or the group, unless the
               ledger is shared through it) may write; take that write out of the process's
               umask (`access.private_umask`), so nothing made later in the ledger is.
            3. Check the settings against this user's pin of them (`_pin_settings`); pin them
               at this user's first use of the directory.
            4. A ledger of trajledger 0.1.0 that has private keys but records nothing about
               their encryption gets one note naming ``trajledger upgrade``.

        Args:
            root: the ledger directory (a `str` or a path).
            passphrase: asks for a key's passphrase.

        Raises:
            LedgerError: there is none at ``root``, its settings are invalid, or a path is
                writable by others.
            TamperError: the settings differ from this user's pin of them.
        """
        # (1)
        path = (root := ledger_path(root)) / CONFIG_NAME
        try:
            data = read_regular(path)
        except FileNotFoundError as e:
            raise LedgerError(no_ledger(root)) from e
        except OSError as e:
            raise LedgerError(f"{path}: cannot read: {e.strerror}") from e
        config = LedgerConfig.from_toml(data, path)
        # (2)
        refuse_writable_ledger(root, config)
        private_umask(config)
        keys = KeyStore(root / "keys", passphrase, require_encrypted=config.keys == KEYS_ENCRYPTED,
                        group_writable=config.group_writable)
        ledger = cls(root, config, keys)
        # (3)
        ledger._pin_settings()
        # (4)
        if config.keys is None and (keys.list_private() or ledger.log_keys().list_private()):
            plain = keys.plaintext() + ledger.log_keys().plaintext()
            notice(
                f"{path}: records no key encryption (a ledger of trajledger 0.1.0)"
                + (f", and {len(plain)} private key(s) are not encrypted (the log's included)"
                   if any(p.parent.name == LOG_KEY_DIR for p in plain)
                   else f", and {len(plain)} private key(s) are not encrypted" if plain else "")
                + ": run 'trajledger upgrade' (it encrypts plaintext keys and records it, so a "
                "planted plaintext key is refused)"
            )
        return ledger
