"""Recording artifacts: the one path every artifact takes into the ledger.

Scope: `record_files` turns files into an artifact: each blob is copied into the object store
(hashed while copying: one read), the manifest binds names, sizes and digests, an in-toto
statement about the manifest digest carries the predicate (the manifest inline plus the
artifact's own fields), the keys sign it into a DSSE envelope, the envelope is stored, and an
entry naming both digests is appended to the log. `record_statement` does the same for a
statement about a digest that is already known (an approval, a revocation, an erasure...).
Later features (rollout batches, datasets, checkpoints, imports) record through these two.

Bad input leaves the ledger unchanged: arguments are checked before anything is written, and no
entry is appended unless every blob and the envelope are stored. Blobs are content-addressed,
so a blob left by a failed attempt is harmless; the manifest blob, envelope and entry are only
written once every file is stored.

Non-scope: the meaning of predicates (their own modules build them), verification (``verify/``).

Spec: DESIGN §2-4; schemas/log-entry.v1.md (the entry); in-toto Statement v1; DSSE.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from trajledger.verify import kinds, predicates
from trajledger.verify.digest import FileDigest, digest_bytes, parse_digest, result_of
from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import KINDS, LogEntry
from trajledger.verify.manifest import FileEntry, Manifest, check_path

from .encode import envelope_bytes
from .errors import AlreadyRecordedError, LedgerError, LogError, StoppedAfterRecordError
from .files import collect_files, media_type_for, same_as_listed
from .keys import Signer
from .log import EntrySpec
from .signing import AnySigner, canonical_json, sign_statement

if TYPE_CHECKING:
    from .home import LedgerHome

__all__ = [
    "KIND_BY_PREDICATE",
    "LATIN_SHAPES",
    "LOOKALIKE_SCRIPTS",
    "JudgedAgain",
    "Recorded",
    "StillStored",
    "check_subject_name",
    "judged_again",
    "judged_now",
    "kind_for",
    "letter_script",
    "lookalike",
    "record_files",
    "record_statement",
    "statement_entry",
]

KIND_BY_PREDICATE: dict[str, str] = {}
"""The log entry kind of each predicate type (every version). SLSA provenance is a checkpoint
(``files`` and the others are one kind each); a predicate type maps to the first kind that
declares it."""
for _kind in kinds.KINDS.values():
    for _type in _kind.predicate_types:
        KIND_BY_PREDICATE.setdefault(_type, _kind.name)


@dataclass(frozen=True)
class Recorded:
    """What recording an artifact produced.

    Attributes:
        digest: the artifact's identity: the statement subject's ``sha256:<hex>`` (for files,
            the manifest digest).
        envelope_digest: ``sha256:<hex>`` of the envelope bytes, a blob in the store.
        index: the log index of the entry (an earlier index when the same envelope, or a
            record of the same digest with the same signed metadata, was already logged).
        manifest: the manifest, for `record_files`.
    """

    digest: str
    envelope_digest: str
    index: int
    manifest: Manifest | None = None
    new: bool = True
    """False when the same record was already in the log (at ``index``): of writers racing
    with the same digest and signed metadata, one records and the others find it."""

    @property
    def where(self) -> str:
        """``recorded at log index N``, or ``already recorded at log index N``."""
        return f"{'' if self.new else 'already '}recorded at log index {self.index}"


def kind_for(predicate_type: str) -> str:
    """Return the log entry kind of a predicate type.

    Raises:
        FormatError: the predicate type is not one trajledger records.
    """
    kind = KIND_BY_PREDICATE.get(predicate_type)
    if kind is None:
        raise FormatError(
            f"predicate type {predicate_type!r} is not one trajledger records, want one of "
            f"{sorted(KIND_BY_PREDICATE)}"
        )
    return kind


def _signers(signers: AnySigner | Sequence[AnySigner]) -> list[AnySigner]:
    out = list(signers) if isinstance(signers, Sequence) else [signers]
    if not out:
        raise ValueError("recording needs at least one signer")
    return out


def _check_kind(predicate_type: str, kind: str | None) -> str:
    expected = kind_for(predicate_type)
    if kind is None:
        return expected
    if kind not in KINDS:
        raise FormatError(f"log entry kind {kind!r} is unknown, want one of {sorted(KINDS)}")
    return kind


def check_subject_name(name: str) -> None:
    """A subject name is printable text: not empty, no control character (an escape sequence
    in a signed name would be recorded for good, and is nobody's name), and not spelt so that
    it looks like another name (`lookalike`)."""
    if not name:
        raise FormatError("subject name is empty")
    if any("\ud800" <= c <= "\udfff" for c in name):
        return  # a lone surrogate: refused where the statement is encoded ('lone surrogate')
    if not name.isprintable():
        raise FormatError(f"subject name {name!r} holds a control character")
    problem = lookalike(name)
    if problem:
        raise FormatError(f"subject name {name!r} {problem}; spell it in one script, in NFKC form, "
                          "in words that do not read as Latin ones")


LOOKALIKE_SCRIPTS = frozenset({"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC",
                               "LISU", "SMALL CAPITAL"})
"""Scripts whose letters share shapes (Latin ``a``, Cyrillic ``а``, Greek ``α``...): a name
mixing them can be made to look like another (UTS #39's "moderately restrictive" profile).
Latin's small capitals (``ᴄᴀᴛ``) count as a script of their own (`letter_script`)."""


_CHEROKEE = dict(zip("ᎠᎡᎢᎥᎩᎪᎫᎬᎳᎷᎻᏀᏂᏃᏏᏒᏔᏕᏙᏚᏝᏞᏟᏢᏦᏧᏳᏴ",
                     "DRTiYAJEWMHGhZbRWSVSLLCPKdGB", strict=True))
LATIN_SHAPES = dict(zip(
    "асԁеһіјӏорԛѕԝхуүѵАВСЕНІЈӀКМОРԚЅТԜХУҮ"  # Cyrillic
    "αικνορυΑΒΕΖΗΙΚΜΝΟΡΤΥΧ"  # Greek
    "հոսօզՍՕ"  # Armenian
    "ꓐꓑꓓꓔꓖꓗꓙꓚꓜꓝꓟꓠꓡꓢꓣꓦꓧꓪꓫꓬꓮꓰꓲꓳꓴ"  # Lisu
    "ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘꞯʀꜱᴛᴜᴠᴡʏᴢ",  # Latin small capitals
    "acdehijlopqswxyyvABCEHIJlKMOPQSTWXYY"
    "aikvopuABEZHIKMNOPTYX"
    "hnuoqUO"
    "BPDTGKJCZFMNLSRVHWXYAEIOU"
    "abcdefghijklmnopqrstuvwyz", strict=True)) | _CHEROKEE | {
        c.lower(): latin.lower() for c, latin in _CHEROKEE.items()}  # its small letters
"""Letters of other scripts drawn like a Latin letter (UTS #39's confusables, the whole-script
ones a browser's IDN rule uses; Cherokee, Lisu and Latin small capitals by hand, left31): a
word wholly of them reads as Latin (``сор`` as ``cop``, ``ᏟᎪᎢ`` as ``CAT``)."""


INVISIBLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f"
                       "\uffa0\U000e0100-\U000e01ef]")
"""Printable characters that draw nothing (Unicode's default-ignorable ones Python counts as
printable: the combining grapheme joiner, variation selectors, Hangul fillers, Khmer's
inherent vowels, Mongolian's free variation selectors; and the blank Braille pattern):
``cat`` followed by one looks like ``cat`` (rev29); U+FE0E/FE0F after a symbol (an emoji's
presentation) is allowed. The others (zero-width spaces and
joiners, bidirectional marks) are format characters, refused as not printable."""


def letter_script(letter: str) -> str:
    """The script of ``letter`` as `LOOKALIKE_SCRIPTS` names them: its Unicode name's first
    word, but ``SMALL CAPITAL`` for Latin's small capitals (``ᴄ`` is drawn like ``c``)."""
    import unicodedata

    name = unicodedata.name(letter, "?")
    return "SMALL CAPITAL" if " SMALL CAPITAL " in name else name.split(" ", 1)[0]


def lookalike(name: str) -> str:
    """Why ``name`` could pass for another name, or ``""``.

    Names are told apart by people reading listings, approvals and reports. Three spellings of
    one look are refused: a name not in Unicode normal form NFKC (``café`` with a combining
    accent beside ``café``; fullwidth ``ｃａｒｔｐｏｌｅ``), one with a word (a run of
    letters) that mixes scripts that share shapes (``cаrtpole`` with a Cyrillic ``а``, beside
    ``cartpole``), and a word of another script drawn wholly with `LATIN_SHAPES` (Cyrillic
    ``сор``, read as ``cop``). Words each in one script with a letter of its own (``среда@v1``),
    or Latin beside any script outside `LOOKALIKE_SCRIPTS` (``训练v2``), pass.
    """
    import unicodedata

    normal = unicodedata.normalize("NFKC", name)
    if normal != name:
        odd = ", ".join(sorted({f"U+{ord(c):04X}" for c in name if c not in normal}))
        return (f"is not in Unicode normal form NFKC ({odd or 'its order of marks'}): it looks "
                f"like {normal!r}, which is another name")
    if hidden := sorted({f"U+{ord(c):04X}" for at, c in enumerate(name) if INVISIBLE.fullmatch(c)
                         and not (at and unicodedata.category(name[at - 1]) == "So"
                                  and c in "\ufe0e\ufe0f")}):  # an emoji's presentation
        return (f"holds a character that draws nothing ({', '.join(hidden)}): it looks like "
                f"{INVISIBLE.sub('', name)!r}, which is another name")
    word = ""
    for c in name + " ":
        if c.isalpha():
            word += c
            continue
        scripts = {letter_script(letter) for letter in word}
        mixed = sorted(scripts & LOOKALIKE_SCRIPTS)
        if len(mixed) > 1:
            return (f"mixes letters of the {' and '.join(s.title() for s in mixed)} scripts in "
                    f"{word!r}, whose shapes look alike (Cyrillic 'а', Latin 'a'): it can pass "
                    "for another name")
        if mixed and mixed != ["LATIN"] and all(letter in LATIN_SHAPES for letter in word):
            latin = "".join(LATIN_SHAPES[letter] for letter in word)
            return (f"is written in {mixed[0].title()} letters drawn like Latin ones: "
                    f"{word!r} reads as the Latin {latin!r}, so it can pass for another name")
        word = ""
    return ""


def _check_json(value: Mapping[str, Any], what: str) -> None:
    try:
        canonical_json(dict(value))
    except (TypeError, ValueError) as e:
        # rfc8785 refuses NaN, infinities, integers beyond 2^53 and non-JSON types (its
        # FormatError says "cannot be canonicalised" itself: said once, out40).
        why = str(e).removeprefix("cannot be canonicalised (RFC 8785): ")
        raise FormatError(f"{what}: cannot be canonicalised (RFC 8785): {why}") from e


def _signer_ids(signers: Sequence[AnySigner]) -> tuple[tuple[str, str], ...]:
    """``(name, keyid)`` of each key signer (keyless signers are judged by the verifier)."""
    return tuple((s.name, s.keyid) for s in signers if isinstance(s, Signer))


def _check_signers(
    ledger: LedgerHome, kind: str, signers: Sequence[AnySigner], action: str | None
) -> None:
    from .policy_state import check_signers

    check_signers(ledger, kind, list(_signer_ids(signers)), action)


def record_files(
    ledger: LedgerHome,
    paths_or_files: Sequence[str | os.PathLike[str]] | Mapping[str, Path | FileDigest],
    signers: AnySigner | Sequence[AnySigner],
    predicate_type: str = predicates.FILES,
    predicate_extra: Mapping[str, Any] | None = None,
    kind: str | None = None,
    name: str | None = None,
    *,
    on_file: Callable[[FileDigest], None] | None = None,
    on_open: Callable[[str, os.stat_result], None] | None = None,
    inline_manifest: bool = True,
    file_subjects: bool = False,
    action: str | None = None,
    store_files: bool = True,
    check: Callable[[int], None] | None = None,
    holds: Sequence[str] = (),
    since: int | None = None,
    listed: Mapping[str, os.stat_result] | None = None,
) -> Recorded:
    """Record files as one artifact, signed and logged.

    Steps:
        1. Check the arguments: signers, predicate type and kind, the extra predicate fields
           (JSON that RFC 8785 can canonicalise, no ``manifest`` key); open the log and load
           its key, so that nothing is stored when it cannot be appended to.
        2. Expand the paths (`collect_files`) or take the name-to-file map as given; a file
           listed is copied only if the one opened is the one listed (`same_as_listed`).
        3. Copy every file into the store, hashing while copying (or move a pre-hashed one);
           then make the copies' names durable, all in one pass (`ObjectStore.sync_names`).
        4. Build the manifest and store its canonical bytes (the artifact digest's preimage).
        5. Sign the statement ``subject (name, manifest digest)`` (then, with
           ``file_subjects``, one subject per file: its manifest path and sha256), predicate
           ``{"manifest": ..., **predicate_extra}``, with every signer.
        6. Store the envelope and append its log entry. Under the log's lock, just before
           the append, every blob the record names (its files, and ``holds``) must still be
           stored and listed by no erasure appended since ``since`` (`_refuse_lost`): an
           `erase` of the same bytes deletes under that lock, so the record either comes first
           (and the erase keeps the blob for it) or is refused, never logged without its data.

    Args:
        ledger: the open ledger.
        paths_or_files: files and directories to expand, or a map of manifest names to files;
            a file given as a `FileDigest` was hashed while it was written: it is moved into
            the store (consumed), not copied and hashed again.
        signers: the key(s) that sign the statement.
        predicate_type: the statement's predicateType (default the plain files predicate).
        predicate_extra: the artifact's own predicate fields, next to ``manifest``.
        kind: the log entry kind; default the kind of ``predicate_type``.
        name: the subject name; default the first path's name.
        on_file: called after each file is stored (progress).
        on_open: called with a file's name and the ``fstat`` of the file the store opened,
            before it is read (`ObjectStore.put_file`'s ``opened``).
        inline_manifest: put the manifest in the predicate (so the envelope verifies files on
            its own). Off for standard predicates such as SLSA provenance, which must keep
            their own shape; the manifest blob in the store binds the files either way.
        file_subjects: list every file as a subject after the manifest digest (SLSA
            provenance: tools that check a model file against the attestation find its digest
            there). The first subject stays the artifact's identity and the log entry's subject.
        action: what the user asked, for a refusal's message (`policy_state.check_signers`).
        store_files: put the files in the store (default). False for a sealed batch: the
            manifest lists the plaintext files (each a `FileDigest`, hashed as written), the
            caller stores their ciphertexts.
        check: a precondition run under the log's lock just before the append, with the
            committed size (`Log.append`); raising aborts with no entry appended.
        holds: blobs the caller stored that the record names besides its files (a sealed
            batch's ciphertexts, a batch's features file): checked like them.
        since: the log size when the caller first looked at these blobs (a batch's
            `artifacts._refuse_recorded_otherwise`); default, the size when this starts.
        listed: for a map of names to files, their ``lstat`` from `collect_files` (``listed``):
            each file opened must be the one listed (paths given are listed here).

    Returns:
        The artifact digest, the envelope digest and the log index.

    Raises:
        FormatError: an unknown predicate type or kind, a predicate that cannot be
            canonicalised or that sets ``manifest``, an invalid file name.
        PolicyError: a blob the record names was erased meanwhile (`_refuse_lost`).
        LedgerError: a missing or unreadable path, a link, no files.
        StoreError: the store cannot be written.
        LogError: the log cannot be appended to.
        PolicyError: a signing key is revoked by the ledger's policy in force, or holds no
            role the kind needs (`policy_state.check_signers`).
        ValueError: no signer.
    """
    # (1)
    keys = _signers(signers)
    entry_kind = _check_kind(predicate_type, kind)
    extra = dict(predicate_extra or {})
    if "manifest" in extra:
        raise FormatError("predicate: 'manifest' is set by trajledger, remove it from the input")
    _check_json(extra, "predicate")
    ledger.log.require_signer()
    _check_signers(ledger, entry_kind, keys, action)
    begun = ledger.log.size if since is None else since
    # (2)
    files: dict[str, Path | FileDigest]
    listed = dict(listed or {})
    if isinstance(paths_or_files, Mapping):
        files = dict(paths_or_files)
        for n in files:
            check_path(n, f"file name {n!r}")
        first = next(iter(sorted(files)), "files")
    else:
        files = dict(collect_files(paths_or_files, listed).items())
        first = Path(paths_or_files[0]).resolve().name if paths_or_files else "files"
    subject_name = name if name is not None else (first or "files")
    check_subject_name(subject_name)
    if file_subjects and subject_name in files:
        raise FormatError(
            f"subject name {subject_name!r} is also a file's name; subject names must be unique"
        )
    # (3)
    names = sorted(files)
    store = ledger.store
    named: set[Path] = set()  # (the directories that gained an object's name: synced below)
    with ThreadPoolExecutor(max_workers=min(4, max(1, len(names)))) as pool:
        digests = []

        def put(n: str) -> FileDigest:
            f = files[n]
            if not store_files:
                if not isinstance(f, FileDigest):
                    raise FormatError(f"{n}: a file not stored must be given with its digest")
                return f
            if isinstance(f, FileDigest):
                return store.adopt_file(f.path, f)
            opened = None if on_open is None else partial(on_open, n)
            if n in listed:
                opened = partial(_opened_listed, f, listed[n], opened)
            return store.put_file(f, names=named, opened=opened)

        for future in [pool.submit(put, n) for n in names]:
            d = result_of(future)  # Ctrl-C is seen, whichever thread the kernel hands it to
            digests.append(d)
            if on_file is not None:
                on_file(d)
    store.sync_names(named)  # (every name durable before the manifest or the log names it)
    # (4)
    manifest = Manifest.from_files(
        [
            FileEntry(n, d.size, d.sha256, media_type_for(n))
            for n, d in zip(names, digests, strict=True)
        ]
    )
    manifest_digest = store.put_bytes(manifest.canonical_bytes())  # (canonicalised once)
    # (5) (6)
    predicate = {"manifest": manifest.to_json(), **extra} if inline_manifest else extra
    subjects = [(subject_name, manifest_digest)]
    if file_subjects:
        subjects += [(f.path, f.digest) for f in manifest.files]
    named_blobs = {*(f.digest for f in manifest.files if store_files), *holds, manifest_digest}
    recorded = _sign_store_append(
        ledger, subjects, manifest_digest, predicate_type, predicate, keys, entry_kind,
        check=StillStored(ledger, frozenset(named_blobs), begun, check,
                          _signer_ids(keys), entry_kind, action),
    )
    return Recorded(recorded.digest, recorded.envelope_digest, recorded.index, manifest,
                    recorded.new)


def _opened_listed(path: Path, listed: os.stat_result,
                   then: Callable[[os.stat_result], None] | None, opened: os.stat_result) -> None:
    same_as_listed(path, listed, opened)
    if then is not None:
        then(opened)


@dataclass(frozen=True)
class StillStored:
    """A record's precondition under the log's lock: `_refuse_lost` of ``blobs`` since
    ``since``; when a trust-policy record was appended since ``since`` (the size when the
    signers were checked), the ``signers`` checked again under the policy now in force (a
    successor may have taken their role away or revoked a key meanwhile: the record would
    never verify; rev13 finding 5); then the caller's own ``then``. A value rather than a
    closure, so that a Ray writer actor runs the same check for its workers' records
    (`integrations.ray`)."""

    ledger: LedgerHome = field(repr=False)
    blobs: frozenset[str]
    since: int
    then: Callable[[int], None] | None = None
    signers: tuple[tuple[str, str], ...] = ()
    kind: str = ""
    action: str | None = None

    def __call__(self, size: int) -> None:
        _refuse_lost(self.ledger, self.blobs, self.since, size)
        if self.signers and any(LogEntry.from_bytes(self.ledger.log.entry(i)).kind
                                == "trust-policy" for i in range(self.since, size)):
            from .policy_state import check_signers

            check_signers(self.ledger, self.kind, list(self.signers), self.action)
        if self.then is not None:
            self.then(size)


class JudgedAgain:
    """The rule of a check judged before a record is made and again under the log's lock
    (`judged_now` makes one): ``judge`` runs now, and the ``check`` (run by `Log.append` under
    the writer lock, as `record_files` / `record_statement` take it) runs it again only when
    the committed size is not ``since``, the size read before judging: a revocation or a
    successor policy that another writer appended between this check and the append (a few
    milliseconds, or the whole time an input is read) is then judged before the record lands
    over it, and an entry appended while judging counts; a log that did not grow costs
    nothing. A subclass that is a value (`artifacts.NamedLineages`) crosses to a Ray writer
    actor, which judges its workers' records under its own lock (`integrations.ray`)."""

    since: int

    def judge(self) -> None:
        """The check: raises when it fails."""
        raise NotImplementedError

    def __call__(self, size: int) -> None:
        if size != self.since:
            self.judge()


J = TypeVar("J", bound=JudgedAgain)


def judged_now(ledger: LedgerHome, make: Callable[[int], J]) -> J:
    """``make(size)``, the log's size read first, judged now (`JudgedAgain`)."""
    check = make(ledger.log.size)
    check.judge()
    return check


@dataclass(frozen=True)
class _Judged(JudgedAgain):
    """`JudgedAgain` of a callable (`judged_again`)."""

    fn: Callable[[], None]
    since: int

    def judge(self) -> None:
        self.fn()


def judged_again(ledger: LedgerHome, judge: Callable[[], None]) -> Callable[[int], None]:
    """Run ``judge`` (a check that raises, such as a lineage verification) now, and return a
    ``check`` that runs it again under the log's lock when the log grew meanwhile
    (`JudgedAgain`'s rule)."""
    return judged_now(ledger, lambda since: _Judged(judge, since))


def _refuse_lost(ledger: LedgerHome, blobs: frozenset[str], since: int, size: int) -> None:
    """Under the log's lock: refuse a record whose blobs an erasure appended since ``since``
    lists (the erase deleted them after this record stored or found them: storing them again
    would restore erased data), or that the store no longer holds (deleted meanwhile: by such
    an erase, or by 'gc --yes --min-age 0'). A stat per blob, and the entries appended
    meanwhile (usually none).

    Raises:
        PolicyError: an erasure appended meanwhile lists one of the blobs.
        LedgerError: one of the blobs is no longer stored.
    """
    from trajledger.verify.errors import PolicyError

    from .home import envelope_statement

    for i in range(since, size):
        entry = LogEntry.from_bytes(ledger.log.entry(i))
        if entry.kind != "erasure":
            continue
        statement = envelope_statement(ledger, entry.envelope)
        listed = blobs.intersection(statement.predicate.get("blobs", ()) if statement else ())
        if listed:
            raise PolicyError(
                f"blob {min(listed)[:19]}…: the erasure at log index {i}, recorded while this "
                "record was being made, deleted it; recording it now would restore erased "
                "data: nothing was recorded"
            )
    lost = sorted(b for b in blobs if not ledger.store.exists(b))
    if lost:
        raise LedgerError(
            f"blob {lost[0][:19]}…: deleted from the store while this record was being made "
            f"({len(lost)} blob(s); by 'gc --yes --min-age 0'?); nothing was recorded: record "
            "it again"
        )


def record_statement(
    ledger: LedgerHome,
    subject_name: str,
    subject_digest: str,
    predicate_type: str,
    predicate: Mapping[str, Any],
    signers: AnySigner | Sequence[AnySigner],
    kind: str | None = None,
    *,
    check: Callable[[int], None] | None = None,
    action: str | None = None,
) -> Recorded:
    """Record a signed statement about an existing digest (approval, revocation, erasure...).

    Steps:
        1. Check the arguments: signers, subject, predicate type and kind, the predicate; open
           the log and load its key.
        2. Sign the statement, store the envelope, append its log entry.

    Args:
        ledger: the open ledger.
        subject_name: the subject's name in the statement.
        subject_digest: ``sha256:<hex>`` the statement is about.
        predicate_type: the statement's predicateType.
        predicate: the predicate object.
        signers: the key(s) that sign it.
        kind: the log entry kind; default the kind of ``predicate_type``.
        check: a precondition run under the log's lock just before the append, with the
            committed size (`Log.append`); raising aborts with no entry appended.
        action: what the user asked, for a refusal's message (`policy_state.check_signers`).

    Returns:
        The subject digest, the envelope digest and the log index.

    Raises:
        FormatError: a malformed digest or empty name, an unknown predicate type or kind, a
            predicate that cannot be canonicalised.
        StoreError, LogError: the store or the log cannot be written.
        PolicyError: a signing key is revoked by the ledger's policy in force, or holds no
            role the kind needs (`policy_state.check_signers`).
        ValueError: no signer.
    """
    # (1)
    keys = _signers(signers)
    parse_digest(subject_digest, "subject digest")
    if not subject_name:  # (not check_subject_name: an import names what another signed)
        raise FormatError("subject name is empty")
    entry_kind = _check_kind(predicate_type, kind)
    _check_json(predicate, "predicate")
    ledger.log.require_signer()
    since = ledger.log.size
    _check_signers(ledger, entry_kind, keys, action)
    # (2)
    return _sign_store_append(
        ledger, [(subject_name, subject_digest)], subject_digest, predicate_type, dict(predicate),
        keys, entry_kind,
        check=StillStored(ledger, frozenset(), since, check, _signer_ids(keys), entry_kind,
                          action),
    )


def statement_entry(
    ledger: LedgerHome, subject_name: str, subject_digest: str, predicate_type: str,
    predicate: Mapping[str, Any], signers: Sequence[AnySigner], kind: str,
) -> tuple[EntrySpec, StillStored]:
    """`record_statement` but the append: the statement checked, signed and its envelope
    stored; its log entry and the check to run under the log's lock, for a caller that
    appends it in one group commit with the entries it names (`updates.apply_update`: an
    import record and the other log's records it lists, in the log whole or not at all)."""
    keys = _signers(signers)
    parse_digest(subject_digest, "subject digest")
    entry_kind = _check_kind(predicate_type, kind)
    _check_json(predicate, "predicate")
    ledger.log.require_signer()
    since = ledger.log.size
    _check_signers(ledger, entry_kind, keys, None)
    spec, _ = _sign_store(ledger, [(subject_name, subject_digest)], subject_digest,
                          predicate_type, dict(predicate), keys, entry_kind)
    return spec, StillStored(ledger, frozenset(), since, None, _signer_ids(keys), entry_kind)


def _sign_store(
    ledger: LedgerHome, subjects: Sequence[tuple[str, str]], subject_digest: str,
    predicate_type: str, predicate: dict[str, Any], signers: Sequence[AnySigner], kind: str,
) -> tuple[EntrySpec, bool]:
    """The signed statement's envelope stored; its log entry, and whether the store held
    those bytes before."""
    # The first subject is the artifact's identity: the log entry's subject.
    assert subjects[0][1] == subject_digest
    # Keyless signatures' Sigstore bundles are stored before the envelope that names them.
    envelope = sign_statement(
        subjects,
        predicate_type,
        predicate,
        signers,
        on_bundle=lambda b: (ledger.keys.note_keyless(b), ledger.store.put_bytes(b)),
    )
    data = envelope_bytes(envelope)
    stored_before = ledger.store.exists(digest_bytes(data))
    spec = EntrySpec(
        kind=kind,
        subject=subject_digest,
        envelope=ledger.store.put_bytes(data),
        signers=tuple(s.keyid for s in envelope.signatures),
    )
    return spec, stored_before


def _sign_store_append(
    ledger: LedgerHome,
    subjects: Sequence[tuple[str, str]],
    subject_digest: str,
    predicate_type: str,
    predicate: dict[str, Any],
    signers: Sequence[AnySigner],
    kind: str,
    *,
    check: Callable[[int], None] | None = None,
) -> Recorded:
    spec, stored_before = _sign_store(ledger, subjects, subject_digest, predicate_type,
                                      predicate, signers, kind)
    envelope_digest = spec.envelope
    try:
        appended = ledger.log.append([spec], check=check)
    except AlreadyRecordedError:
        # Refused before the append: no entry names the envelope (an entry naming these very
        # bytes would be the same record, not refused), and one made here is nobody's.
        if not stored_before:
            ledger.store.delete(envelope_digest)
        raise
    (index,) = appended
    try:
        logged = LogEntry.from_bytes(ledger.log.entry(index)).envelope
    except LogError as e:  # (recorded: it must not read as if it were not; tamper stays tamper)
        raise StoppedAfterRecordError(f"{kind} of {subject_digest[:19]}… is recorded at log "
                                      f"index {index}, but its entry could not be read back: "
                                      f"{e}") from e
    # New only if this append made the entry, as judged under the log's lock: one logged
    # before, by this process or another racing it in the same second, is not (rev41 finding 5).
    return Recorded(subject_digest, logged, index, new=appended.made[0])
