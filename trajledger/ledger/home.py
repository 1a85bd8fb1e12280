"""The ledger home directory and its settings.

Layout::

    <home>/ledger.toml     settings (origin, store location)
    <home>/keys/           signing keys (NAME.key encrypted PKCS#8, mode 0600; NAME.pub)
    <home>/objects/        the object store (unless ledger.toml points elsewhere)
    <home>/log/            the transparency log (C2SP tlog-tiles layout)
    <home>/log-key/        the log's Ed25519 key (log.key, log.pub; next.key, next.pub only
                           while `Ledger.rotate_log_key` runs)

Scope: create and open a home, read and write ``ledger.toml``.
"""

from __future__ import annotations

import os
import secrets
import socket
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from .errors import LedgerError, TamperError
from .fs import fsync_dir, write_file_atomic
from .keys import KeyStore
from .store import ObjectStore

if TYPE_CHECKING:
    from trajledger.verify.log_key import Handover
    from trajledger.verify.policy import TrustPolicy

    from .artifacts import BatchResult, DatasetResult
    from .cards import ProducerCard
    from .contamination import ProgressFactory
    from .exchange import ExportResult, ImportResult
    from .keys import Signer
    from .log import Log
    from .record import Recorded
    from .trust_state import TrustState

__all__ = ["FORMAT_VERSION", "STATE_DIR_ENV", "Ledger", "LedgerConfig", "state_dir"]

STATE_DIR_ENV = "TRAJLEDGER_STATE_DIR"

FORMAT_VERSION = 1
CONFIG_NAME = "ledger.toml"
LOG_KEY_DIR = "log-key"
LOG_KEY_NAME = "log"
"""The log's Ed25519 key, ``log-key/log.key``: apart from the artifact signing keys in ``keys/``
(it signs checkpoints, nothing else). Encrypted with TRAJLEDGER_PASSPHRASE when that is set at
``init`` (and then needed to append), else plain, because the log signs unattended."""
NEXT_LOG_KEY_NAME = "next"
"""The log's next key, ``log-key/next.key``, during a rotation (`Ledger.rotate_log_key`): it
replaces ``log.key`` once the handover is published."""


def _refuse_writable_by_others(root: Path) -> None:
    """Refuse a ledger whose directories other users may write: they could replace evidence or
    keys between a check and its use.

    Raises:
        LedgerError: the ledger, its keys, log or objects directory is writable by others.
    """
    import stat

    for d in (root, root / "keys", root / LOG_KEY_DIR, root / "log", root / "objects"):
        try:
            mode = d.stat().st_mode
        except OSError:
            continue
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            raise LedgerError(
                f"{d}: writable by other users (mode {stat.S_IMODE(mode):04o}); run "
                f"'chmod o-w {d}'"
            )


def state_dir() -> Path:
    """The user's trajledger state directory, outside every ledger.

    It holds what write access to a ledger directory must not be able to change: the newest
    checkpoint of each log this user has seen (a floor: the log only grows) and the status of
    each log derived from verified entries. ``$TRAJLEDGER_STATE_DIR``, else
    ``$XDG_STATE_HOME/trajledger``, else ``~/.local/state/trajledger``.
    """
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "trajledger"


def _toml_str(value: str) -> str:
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    # TOML forbids raw control characters, DEL (U+007F) included, in basic strings.
    out = "".join(c if " " <= c != "\x7f" else f"\\u{ord(c):04x}" for c in out)
    return f'"{out}"'


def default_origin() -> str:
    """A unique log origin: ``trajledger/<host>/<8 random hex>`` (no spaces, no '+')."""
    host = "".join(c for c in socket.gethostname() if c.isalnum() or c in ".-")[:40] or "host"
    return f"trajledger/{host}/{secrets.token_hex(4)}"


@dataclass(frozen=True)
class LedgerConfig:
    """Settings from ``ledger.toml``."""

    origin: str
    store: str = "objects"
    format: int = FORMAT_VERSION

    def to_toml(self) -> bytes:
        """The TOML text of these settings."""
        return (
            "# trajledger ledger settings\n[ledger]\n"
            f"format = {self.format}\n"
            f"origin = {_toml_str(self.origin)}\n"
            f"# where blobs live: a directory relative to this file, or a URI (s3://bucket/prefix)\n"
            f"store = {_toml_str(self.store)}\n"
        ).encode()

    @classmethod
    def from_toml(cls, data: bytes, where: Path) -> LedgerConfig:
        """Parse and check ``ledger.toml``.

        Raises:
            LedgerError: not TOML, missing or ill-typed settings, an unknown format version.
        """
        try:
            doc: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise LedgerError(f"{where}: not valid TOML: {e}") from e
        except RecursionError as e:
            raise LedgerError(f"{where}: not valid TOML: nested too deeply") from e
        section = doc.get("ledger")
        if not isinstance(section, dict):
            raise LedgerError(f"{where}: no [ledger] section")
        fmt = section.get("format")
        if fmt != FORMAT_VERSION:
            raise LedgerError(
                f"{where}: format {fmt!r}, this trajledger reads format {FORMAT_VERSION}"
            )
        origin = section.get("origin")
        store = section.get("store", "objects")
        if (
            not isinstance(origin, str)
            or not origin
            or any(c.isspace() or c == "+" for c in origin)
        ):
            raise LedgerError(f"{where}: origin must be a non-empty string without spaces or '+'")
        if not isinstance(store, str) or not store:
            raise LedgerError(f"{where}: store must be a non-empty string")
        return cls(origin, store, fmt)


class Ledger:
    """An open ledger home. Use `init` to create one and `open` to use it."""

    def __init__(self, root: Path, config: LedgerConfig, keys: KeyStore) -> None:
        """Use `Ledger.open` or `Ledger.init`."""
        self.root = root
        self.config = config
        self.keys = keys
        self._store: ObjectStore | None = None
        self._log: Log | None = None
        self._state: TrustState | None = None

    @property
    def store(self) -> ObjectStore:
        """The object store."""
        if self._store is None:
            loc = self.config.store
            self._store = ObjectStore(loc if "://" in loc else self.root / loc)
        return self._store

    @property
    def log_dir(self) -> Path:
        """Where the log lives."""
        return self.root / "log"

    @property
    def log(self) -> Log:
        """The transparency log, opened on first use; its key is loaded only to append.

        Raises:
            LogError: the ledger has no log, or it is damaged.
            LedgerError: ``log-key/log.pub`` is damaged (`log_vkey`).
        """
        if self._log is None:
            from .log import Log

            vkey = self.log_vkey()
            # The newest checkpoint this user has seen is a floor the log must extend (kept
            # outside the ledger), and what this process publishes raises it. A key seen for
            # the first time carries over the floor of the key it took over from.
            # Without log-key/log.pub (a copy shared without it), the log's own vkey file
            # names the key: the user's state of that key still holds the floor.
            state_key = vkey if vkey is not None else self._published_vkey()
            self._pin_origin()
            if state_key is not None and state_key.split("+", 1)[0] != self.config.origin:
                raise TamperError(
                    f"{self.log_dir / 'vkey'}: the log's key is of {state_key.split('+')[0]!r}, "
                    f"but this ledger's origin is {self.config.origin!r}; nothing was changed",
                    self.log_dir / "vkey",
                )
            state = self._trust(state_key) if state_key is not None else None
            if state is not None and state.floor() is None:
                self._continue_trust(state)
            self._log = Log.open(
                self.log_dir,
                signer=self._log_signer,
                vkey=vkey,
                cache_dir=self.cache_dir,
                cleanup=self.sweep_leftovers,
                floor=state.floor() if state is not None else None,
                on_publish=state.published if state is not None else None,
            )
        return self._log

    def trust_state(self, *, on_progress: Callable[[int], None] | None = None) -> TrustState:
        """The user's trusted state of this ledger's log, extended to its signed checkpoint.

        The first use reads the whole log (``on_progress`` is called as entries are indexed);
        later ones read only what was appended since. See `ledger.trust_state`.

        Raises:
            TamperError: the log was rolled back or forked since this user last saw it, or its
                entries do not give its signed root.
            LogError: the log cannot be read.
        """
        state = self._trust(self.log.vkey)
        store = self.store

        def blob(digest: str) -> bytes | None:
            try:
                return store.get(digest) if store.exists(digest) else None
            except (OSError, LedgerError):
                return None

        note = self.log.checkpoint_bytes()
        for attempt in range(8):
            try:
                state.sync(note, self.log.entries, blob,
                           what=f"{self.log_dir / 'checkpoint'}", on_progress=on_progress)
                break
            except TamperError:
                # Another process may have published (and raised the floor) after this one
                # read the checkpoint: it is then on disk, newer. The same note is a rollback.
                newer = self.log.checkpoint_bytes()
                if newer == note or attempt == 7:
                    raise
                note = newer
        return state

    def _trust(self, vkey: str) -> TrustState:
        from .trust_state import TrustState

        if self._state is None or self._state.vkey != vkey:
            self._state = TrustState.open(vkey)
        return self._state

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
                published = (self.log_dir / "vkey").read_text("utf-8").strip()
            except (OSError, UnicodeDecodeError):
                published = None
            if published == nxt:
                return nxt
        return self._log_key_vkey(LOG_KEY_NAME)

    def _log_key_vkey(self, name: str) -> str | None:
        from trajledger.verify.errors import FormatError
        from trajledger.verify.note import vkey_string

        path = self.root / LOG_KEY_DIR / f"{name}.pub"
        if not path.exists() and not path.is_symlink():
            return None
        pub = KeyStore(self.root / LOG_KEY_DIR).public(name)
        try:
            return vkey_string(self.config.origin, pub.raw_ed25519())
        except FormatError as e:
            raise LedgerError(f"{path}: the log key: {e}") from e

    def _log_signer(self) -> Signer:
        """The log's private key: ``next`` while a rotation that published it is unfinished."""
        keys = KeyStore(self.root / LOG_KEY_DIR)
        nxt = self._log_key_vkey(NEXT_LOG_KEY_NAME)
        if nxt is not None and nxt == self.log_vkey() and (
            self.root / LOG_KEY_DIR / f"{NEXT_LOG_KEY_NAME}.key"
        ).exists():
            return keys.signer(NEXT_LOG_KEY_NAME)
        return keys.signer(LOG_KEY_NAME)

    def _published_vkey(self) -> str | None:
        """The verifier key the log's own ``vkey`` file names, or None when unreadable (the
        log then refuses to open, saying why)."""
        from trajledger.verify.errors import FormatError
        from trajledger.verify.note import verifier_from_vkey

        try:
            text = (self.log_dir / "vkey").read_text("utf-8").strip()
            verifier_from_vkey(text)
        except (OSError, UnicodeDecodeError, FormatError):
            return None
        return text

    def _pin_origin(self, *, replace: bool = False) -> None:
        """Remember which log this ledger directory holds (its origin), for this user; a later
        use that finds another log there is refused.

        Without it, someone able to write the directory could replace the whole ledger with one
        of their own (another origin, their own keys and policy): this user's trust state,
        kept per log, would then start afresh and trust it. Rotating the log's key keeps the
        origin (the trust state follows the handover); `init` replaces the pin.

        Raises:
            TamperError: this directory held a log of another origin when this user last used it.
            LedgerError: the pin cannot be read or written.
        """
        import hashlib
        import json

        where = str(self.root.resolve())
        pin = state_dir() / "ledgers" / f"{hashlib.sha256(where.encode()).hexdigest()[:32]}.json"
        origin = self.config.origin
        try:
            if not replace and pin.exists():
                doc = json.loads(pin.read_text("utf-8"))
                if doc.get("origin") == origin:
                    return
                raise TamperError(
                    f"{self.root / CONFIG_NAME}: this ledger directory held the log "
                    f"{doc.get('origin')!r} when you last used it, now {origin!r}: the ledger "
                    "was replaced by another; nothing was changed. If you replaced it on "
                    f"purpose, remove {pin} and run again",
                    self.root / CONFIG_NAME,
                )
            pin.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_file_atomic(pin, json.dumps({"root": where, "origin": origin}).encode())
        except (OSError, ValueError, AttributeError) as e:
            raise LedgerError(f"{pin}: cannot read or write this ledger's pin: {e}") from e

    def _continue_trust(self, state: TrustState) -> None:
        """Carry this user's floor of the log's earlier keys over to ``state``, a key without
        one (`trust_state.continue_trust`, with the log's handovers and proofs)."""
        from .log import Log
        from .trust_state import continue_trust

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
            )
        finally:
            reader.close()

    def rotate_log_key(self) -> Handover:
        """Replace the log's key (after a compromise, or routinely), keeping the log.

        Steps:
            1. Create the next key, ``log-key/next.key`` (encrypted when TRAJLEDGER_PASSPHRASE
               is set, as at ``init``), unless an interrupted rotation left one.
            2. Publish the handover (`Log.rotate_key`): the current tree signed by the old key
               and the next one, naming both; ``log/vkey`` then names the next key.
            3. Make the next key the log's key: ``log.pub``, then ``log.key`` replaced (the old
               private key is gone), then ``next.pub`` removed.
            4. This user's trust in the log continues under the new key: the next use carries
               the floor over (`trust_state.continue_trust`).

        Running it again after an interruption at any step finishes the same rotation.

        Returns:
            The handover.

        Raises:
            LogError: the log cannot be written or its key loaded.
            KeyError_: no passphrase for an encrypted key.
            TamperError: the log's files contradict what was signed or committed.
        """
        from .keys import PASSPHRASE_ENV

        keys = KeyStore(self.root / LOG_KEY_DIR)
        directory = self.root / LOG_KEY_DIR
        # (1)
        if not (directory / f"{NEXT_LOG_KEY_NAME}.pub").exists():
            keys.create(NEXT_LOG_KEY_NAME, encrypt=bool(os.environ.get(PASSPHRASE_ENV)))
        if (directory / f"{NEXT_LOG_KEY_NAME}.key").exists():
            new = keys.signer(NEXT_LOG_KEY_NAME)
        else:  # step 3 was interrupted after the private key moved
            new = keys.signer(LOG_KEY_NAME)
        # (2)
        handover = self.log.rotate_key(new)
        # (3)
        try:
            pub = (directory / f"{NEXT_LOG_KEY_NAME}.pub").read_bytes()
            write_file_atomic(directory / f"{LOG_KEY_NAME}.pub", pub)
            nxt = directory / f"{NEXT_LOG_KEY_NAME}.key"
            if nxt.exists():
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
        """Remove what killed writers left (temp objects, ``tmp/`` directories) that no live
        writer can own; run by the log's writer under its lock (see ``ledger.fsck``)."""
        from .fsck import sweep_leftovers

        sweep_leftovers(self)

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
            passphrase: asks for a key's passphrase.
            check_store: check that a remote store is reachable first (``trajledger init``).

        Raises:
            LedgerError: ``root`` already holds a ledger, or the origin is invalid.
            StoreError: ``check_store`` and the remote store cannot be reached.
        """
        root = Path(root)
        if (root / CONFIG_NAME).exists():
            raise LedgerError(f"{root}: a ledger already exists here")
        if origin is not None:
            from .trust_state import known_origin

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
        root.mkdir(parents=True, exist_ok=True)
        write_file_atomic(root / CONFIG_NAME, config.to_toml())
        ledger = cls(root, config, KeyStore(root / "keys", passphrase))
        if "://" not in store:
            (root / store).mkdir(parents=True, exist_ok=True)
        from .keys import PASSPHRASE_ENV
        from .log import Log

        log_keys = KeyStore(root / LOG_KEY_DIR)
        log_key = log_keys.create(LOG_KEY_NAME, encrypt=bool(os.environ.get(PASSPHRASE_ENV)))
        Log.create(ledger.log_dir, config.origin, log_key, cache_dir=ledger.cache_dir)
        ledger._pin_origin(replace=True)  # a new ledger here: whatever was here before is gone
        return ledger  # `log` opens it on first use, with this user's floor

    @classmethod
    def attached(cls, root: Path, config: LedgerConfig, log: Log) -> Ledger:
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

        Args:
            root: the ledger directory (a `str` or a path).
            passphrase: asks for a key's passphrase.

        Raises:
            LedgerError: there is none at ``root`` or its settings are invalid.
        """
        root = Path(root)
        path = root / CONFIG_NAME
        try:
            data = path.read_bytes()
        except FileNotFoundError as e:
            raise LedgerError(
                f"{root}: no ledger here; run 'trajledger init' or pass --ledger DIR"
            ) from e
        except OSError as e:
            raise LedgerError(f"{path}: cannot read: {e.strerror}") from e
        _refuse_writable_by_others(root)
        return cls(root, LedgerConfig.from_toml(data, path), KeyStore(root / "keys", passphrase))

    def record_batch(
        self,
        table_or_rows: Any,
        *,
        env: str,
        policy: str,
        key: str | None = None,
        signer: Signer | None = None,
        evaluator: str | None = None,
        episodes: Any = None,
        **options: Any,
    ) -> BatchResult:
        """Record rollouts as one signed, logged batch; see `ledger.artifacts.record_batch`.

        Args:
            table_or_rows: a step table (pyarrow), one mapping per step, or input file paths.
            env: the registered environment (``NAME@VERSION``, digest or unique prefix).
            policy: the policy / model version that acted.
            key: the name of a signing key in this ledger's key store; or give ``signer``.
            signer: a loaded signing key; or give ``key``.
            evaluator: the registered evaluator, if any.
            episodes: episode attributes (a table with a table or rows, a file with files).
            **options: ``name``, ``fmt``, ``consent``, ``licence``, ``retention``,
                ``generator``, ``on_chunk`` (see `ledger.artifacts.record_batch`).

        Returns:
            The recorded batch (``.digest``, ``.recorded.index``, ``.stats``).

        Raises:
            TypeError: neither or both of ``key`` and ``signer``.
            KeyError_: the key cannot be loaded.
            PolicyError, RolloutValidationError, FormatError: as `record_batch`.
        """
        from .artifacts import record_batch

        if (key is None) == (signer is None):
            raise TypeError("record_batch: give exactly one of key= (a key name) or signer=")
        if signer is None:
            assert key is not None
            signer = self.keys.signer(key)
        return record_batch(
            self,
            table_or_rows,
            env=env,
            policy=policy,
            signer=signer,
            evaluator=evaluator,
            episodes=episodes,
            **options,
        )

    # -- helpers -----------------------------------------------------------------------------

    def _key(self, key: str | Signer) -> Signer:
        from .keys import Signer

        return key if isinstance(key, Signer) else self.keys.signer(key)

    def policy(self, policy: str | Path | TrustPolicy | None = None) -> TrustPolicy:
        """The trust policy to apply: ``policy`` (a file followed through the log's history,
        or a `TrustPolicy` as given), else the ledger's policy in force.

        Raises:
            LedgerError: none given and none recorded. TamperError: a policy record is damaged.
        """
        from trajledger.verify.policy import TrustPolicy

        from .policy_state import load_policy

        if isinstance(policy, TrustPolicy):
            return policy
        return load_policy(self, Path(policy) if policy is not None else None)[0]

    # -- recording ---------------------------------------------------------------------------

    def register_environment(
        self,
        name: str,
        version: str,
        *,
        key: str | Signer,
        files: Sequence[Path] = (),
        source: str | None = None,
        gym_id: str | None = None,
        rules: Path | None = None,
        observation_space: Mapping[str, Any] | None = None,
        action_space: Mapping[str, Any] | None = None,
        env_spec: Mapping[str, Any] | None = None,
    ) -> Recorded:
        """``trajledger env register``: see `trajledger.ledger.artifacts.register_environment`."""
        from .artifacts import register_environment

        return register_environment(
            self, name, version, self._key(key), files=files, source=source,
            gymnasium_id=gym_id, rules=rules, observation_space=observation_space,
            action_space=action_space, env_spec=env_spec,
        )

    def register_evaluator(
        self,
        name: str,
        version: str,
        kind: str,
        *,
        key: str | Signer,
        model_id: str | None = None,
        rubric: Path | None = None,
        prompt: Path | None = None,
        files: Sequence[Path] = (),
    ) -> Recorded:
        """``trajledger evaluator register``: see `ledger.artifacts.register_evaluator`."""
        from .artifacts import register_evaluator

        return register_evaluator(
            self, name, version, kind, self._key(key), model_id=model_id, rubric=rubric,
            prompt=prompt, files=files,
        )

    def create_dataset(
        self,
        name: str,
        version: str,
        split: str,
        batches: Sequence[str],
        *,
        key: str | Signer,
        purpose: str = "train",
        card: Path | ProducerCard | None = None,
        progress: ProgressFactory | None = None,
    ) -> DatasetResult:
        """``trajledger dataset create``: see `trajledger.ledger.artifacts.create_dataset`;
        ``card`` is a ``card.toml`` file or a `ProducerCard` (`trajledger.ledger.cards`)."""
        from .artifacts import create_dataset
        from .cards import ProducerCard

        if card is not None and not isinstance(card, ProducerCard):
            card = ProducerCard.from_file(Path(card))
        return create_dataset(self, name, version, split, batches, self._key(key),
                              purpose=purpose, card=card, progress=progress)

    def card(
        self,
        ref: str,
        fmt: str = "hf",
        *,
        policy: str | Path | TrustPolicy | None = None,
        skip_data: bool = False,
    ) -> bytes:
        """``trajledger card``: the dataset's card as a Hugging Face ``README.md`` (``hf``) or a
        Croissant JSON-LD file (``croissant``), from its verified records; see
        `trajledger.ledger.cards.dataset_card` and `trajledger.ledger.card_formats.render`."""
        from .card_formats import FORMATS, render
        from .cards import dataset_card

        if fmt not in FORMATS:
            raise ValueError(f"card format {fmt!r}, want one of {', '.join(FORMATS)}")
        facts = dataset_card(self, ref, self.policy(policy), data="size" if skip_data else "hash")
        return render(facts, fmt)

    def approve(
        self,
        ref: str,
        *,
        key: str | Signer,
        purpose: str = "train",
        expires: str = "30d",
        note: str | None = None,
    ) -> Recorded:
        """``trajledger approve``: see `trajledger.ledger.status.approve`."""
        from .status import approve

        return approve(self, ref, self._key(key), purpose=purpose, expires=expires, note=note)

    def revoke(self, ref: str, *, key: str | Signer, reason: str) -> Recorded:
        """``trajledger revoke``: see `trajledger.ledger.status.revoke`."""
        from .status import revoke

        return revoke(self, ref, self._key(key), reason=reason)

    def erase(self, ref: str, *, key: str | Signer, reason: str) -> tuple[Recorded, int]:
        """``trajledger erase``: the erasure record and how many blobs were deleted; see
        `trajledger.ledger.status.erase`."""
        from .status import erase

        return erase(self, ref, self._key(key), reason=reason)

    def set_policy(self, path: Path, *, keys: Sequence[str | Signer]) -> Recorded:
        """``trajledger policy set``: see `trajledger.ledger.status.record_policy`."""
        from .status import record_policy

        return record_policy(self, Path(path), [self._key(k) for k in keys])

    # -- exchange ------------------------------------------------------------------------------

    def export(
        self,
        ref: str,
        out: Path,
        *,
        data: bool = True,
        policy: str | Path | TrustPolicy | None = None,
        consistency_from: Sequence[int] = (),
    ) -> ExportResult:
        """``trajledger export``: an evidence bundle; see
        `trajledger.ledger.exchange.export_bundle`."""
        from .exchange import export_bundle

        return export_bundle(self, ref, Path(out), data=data, policy=self.policy(policy),
                             consistency_from=consistency_from)

    def import_bundle(
        self,
        path: Path,
        *,
        keys: Sequence[str | Signer],
        policy: str | Path | TrustPolicy | None = None,
    ) -> ImportResult:
        """``trajledger import``: verify, then take a bundle in; see
        `trajledger.ledger.exchange.import_bundle`."""
        from .exchange import import_bundle

        return import_bundle(self, Path(path), self.policy(policy), [self._key(k) for k in keys])
