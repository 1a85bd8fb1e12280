"""A command's working directories: verified data in, read-only; outputs out, hashed.

Scope: what any "run a command on admitted data" needs (``train -- COMMAND`` now, an evaluation
by command later):

- `write_data_dir`: the verified bytes of a dataset's batches in a fresh directory that
  ``datasets.load_dataset(DIR, "steps")`` (and pyarrow, pandas, polars, DuckDB) read::

      manifest.json                          what is here: dataset, batches, every file's digest
      README.md                              dataset card: configs "steps" and "episodes"
      batches/00000-<12 hex>/steps.parquet   the first batch's files, as recorded
      batches/00000-<12 hex>/episodes.parquet
      batches/00001-<12 hex>/...

  Batch directories sort in the dataset's order. A file is hard-linked from the local object
  store when it can be (same filesystem, an object this user owns and no one else may write),
  else written from the bytes admission verified; a linked file is hashed once linked, so
  what the command reads is what was verified. Files are
  made read-only (0444) and directories 0555.
- `write_tree`: the same for any verified files (a checkpoint's, for a run that starts from a
  parent checkpoint or an evaluation), linked or copied from the store and hashed when not in
  memory; up to `HELD_BYTES` of the linked ones are kept in memory as they are hashed, to put
  their object back (out56); a file past that is cloned (a reflink) or copied, not linked, so
  that a command writing it in place leaves the store as it was (out58).
- `check_data_dir`: after the command, every file re-hashed against what was written; a
  changed, removed or added file is a `DataDirChangedError` naming each one. A changed file
  that was hard-linked also changed the store's object: it is put back from the verified bytes
  (or, when they were not held in memory, named for ``trajledger fsck --repair``); a linked
  file made writable made the store's object so: its mode is put back (0444) with an
  `InputModeWarning`. `Workspace.changed` runs the same check after a command that failed
  (out54).
- `output_files`: the regular files of an output directory by relative path (links and special
  files refused: a link could point anywhere).
- `Workspace`: the directories of one run together, in a temporary directory of the ledger
  (same filesystem as a local store: links work): inputs written by the functions above, each
  named to the command by an environment variable, an output directory (``--output`` or a new
  one), a logs directory; ``check()`` re-hashes every input; leaving removes the inputs and the
  temporary directory (a given output directory is kept). Entering first removes what dead runs
  left in that ``tmp/`` (``ledger.fs.is_stale``): a run killed outright leaves its inputs, an
  evaluation's unsealed suite among them, where the next command could read them.

The dataset card's YAML front matter is written as JSON (YAML 1.2 is a superset of JSON; the
card parser reads it). Hugging Face ``datasets`` has no Arrow ``map`` type, and reading a
Parquet file that holds one fails (``extras``, ``judge_scores``): the card lists the other
columns and their features, so ``load_dataset(DIR, "steps")`` reads the files as stored, without
the map columns; pyarrow reads every column.

Non-scope: admission (`runner.admission`), running the command (`runner.command`), recording
(`runner.train`). The directory is not a sandbox: a command running as the user can change it
(the check after the run says so) or anything else the user can.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from trajledger.ledger.errors import LedgerError, StoreError, cannot_write
from trajledger.ledger.fs import is_stale, remove_tree, temp_dir, tmp_entries
from trajledger.verify.digest import digest_bytes, hash_file
from trajledger.verify.errors import DigestMismatchError, VerificationError
from trajledger.verify.manifest import FileEntry, Manifest

if TYPE_CHECKING:
    import pyarrow as pa

    from trajledger.ledger.store import ObjectStore

    from .admission import AdmittedBatch

__all__ = [
    "DATA_DIR_FORMAT",
    "HIDDEN_ENV",
    "DataDir",
    "DataDirChangedError",
    "TreeFile",
    "Workspace",
    "check_data_dir",
    "check_output_dir",
    "output_files",
    "write_data_dir",
    "write_tree",
]

DATA_DIR_FORMAT: Final = "trajledger.data-dir/1"
"""The ``format`` of a data directory's ``manifest.json``."""

HIDDEN_ENV: Final = "TRAJLEDGER_PASSPHRASE"
"""Variables a command does not inherit (every name beginning so: this one, each per-key
``TRAJLEDGER_PASSPHRASE_*``, and ``TRAJLEDGER_PASSPHRASEFILE[_*]``, naming passphrase files): it
needs no key, and its logs may print them. The git commands that describe the
source tree run without them too (``runner.buildinfo``)."""

HELD_BYTES: Final = 64 << 20
"""How many bytes of a directory's files linked from the store, not in memory already (a
checkpoint's), `write_tree` keeps in memory as it hashes them (one read), so that an object a
command changes through its link is put back from them (out56); a file past the budget (a
large model's) is not linked but cloned or copied (out58): the command's own, whatever it
writes."""

MANIFEST_NAME: Final = "manifest.json"
CARD_NAME: Final = "README.md"
BATCH_FILES: Final = ("steps.parquet", "episodes.parquet")

# Arrow type names (`str(pa.DataType)`) that Hugging Face ``datasets`` names the same way.
_HF_DTYPES: Final = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "string", "large_string", "binary", "large_binary"}
)
_HF_FLOATS: Final = {"halffloat": "float16", "float": "float32", "double": "float64"}


class DataDirChangedError(VerificationError):
    """A command changed the directory of verified data it was given (nothing is recorded).

    Attributes:
        problems: one line per changed, removed or added file.
        repaired: store objects that were hard-linked, changed with them, and put back.
    """

    def __init__(self, message: str, problems: Sequence[str], repaired: Sequence[str]) -> None:
        super().__init__(message)
        self.problems = tuple(problems)
        self.repaired = tuple(repaired)


class InputModeWarning(UserWarning):
    """A command made files of its read-only input writable, and with them the store's objects
    they are hard links to (one inode): their mode was put back (0444), the run goes on; or a
    run stopped before its inputs were checked had them changed (what was put back named)."""


class KeptOutputWarning(UserWarning):
    """A run that failed or was stopped left files in the user's ``--output`` directory, which
    is kept (out56): they are named, with the way to run again."""


@dataclass(frozen=True)
class TreeFile:
    """A file to put in a directory: its path there, digest and size, and its verified bytes
    when they are in memory (else it is linked or copied from the store and hashed)."""

    path: str
    digest: str
    size: int
    data: bytes | None = None


@dataclass(frozen=True)
class DataDir:
    """A written directory of verified files.

    Attributes:
        path: the directory.
        manifest: every file written (``manifest.json`` included), as the check expects it.
        linked: paths hard-linked to a store object, and that object's digest.
        verified: verified bytes in memory by digest (to repair a store object that shared a
            changed file's inode).
    """

    path: Path
    manifest: Manifest
    linked: Mapping[str, str]
    verified: Mapping[str, bytes]

    @property
    def hard_linked(self) -> int:
        """How many files are hard links to the object store."""
        return len(self.linked)


def write_data_dir(
    dest: Path,
    store: ObjectStore,
    dataset: Mapping[str, Any],
    batches: Sequence[AdmittedBatch],
) -> DataDir:
    """Write the verified batches into the new directory ``dest`` (see the module doc).

    Steps:
        1. One directory per batch, in dataset order, holding its files (`write_tree`).
        2. The dataset card and ``manifest.json`` (the dataset, each batch with its log index
           and files, and the manifest of every other file).

    Args:
        dest: the directory to create.
        store: the ledger's object store (hard links from it when local).
        dataset: what ``manifest.json`` says of the dataset (name, version, digest, logIndex).
        batches: the admitted batches, in the dataset's order, with their verified bytes.

    Raises:
        LedgerError: ``dest`` exists or cannot be written.
    """
    from trajledger.verify.manifest import check_path

    # (1)
    files: list[TreeFile] = []
    listing: list[dict[str, Any]] = []
    for i, batch in enumerate(batches):
        rel_dir = f"batches/{i:05d}-{batch.digest.removeprefix('sha256:')[:12]}"
        described: dict[str, Any] = {}
        for name in sorted(batch.files):
            data = batch.files[name]
            check_path(name, f"batch {batch.digest[:19]}… file name")
            digest = digest_bytes(data)
            files.append(TreeFile(f"{rel_dir}/{name}", digest, len(data), data))
            described[name] = {"digest": {"sha256": digest.removeprefix("sha256:")},
                               "size": len(data)}
        listing.append({"digest": batch.digest, "logIndex": batch.index,
                        "directory": rel_dir, "files": described})
    # (2)
    card = _card(dataset, batches)
    files.append(TreeFile(CARD_NAME, digest_bytes(card), len(card), card))

    def describe(inner: Manifest) -> bytes:
        body = {
            "format": DATA_DIR_FORMAT,
            "dataset": dict(dataset),
            "batches": listing,
            "manifest": inner.to_json(),
        }
        return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode("utf-8")

    return write_tree(dest, store, files, describe=describe)


def write_tree(
    dest: Path,
    store: ObjectStore,
    files: Sequence[TreeFile],
    *,
    describe: Callable[[Manifest], bytes] | None = None,
) -> DataDir:
    """Write verified files into the new directory ``dest``, read-only.

    Steps:
        1. Create ``dest`` (it must not exist).
        2. Each file: a hard link to its store object when the store is local and on the same
           filesystem, kept only if the link hashes to the file's digest (its bytes kept in
           memory, read as they are hashed, up to `HELD_BYTES` in all, when not given: to put
           the object back if a command writes it through the link); else written from its
           verified bytes; else (past the budget) cloned or copied from the store and hashed
           (a mismatch fails).
        3. With ``describe``: ``manifest.json``, its bytes ``describe(manifest of the files)``.
        4. Files 0444, directories 0555.

    Raises:
        LedgerError: ``dest`` exists or cannot be written.
        DigestMismatchError: a file copied from the store does not hash to its digest.
    """
    from trajledger.verify.manifest import check_path

    # (1)
    try:
        dest.mkdir(mode=0o755)
    except OSError as e:
        raise LedgerError(f"{dest}: cannot create the directory: {e.strerror}") from e
    entries: list[FileEntry] = []
    linked: dict[str, str] = {}
    verified: dict[str, bytes] = {}
    budget = HELD_BYTES
    try:
        for f in files:
            # (2)
            path = dest / check_path(f.path, f"file name {f.path!r}")
            path.parent.mkdir(parents=True, exist_ok=True)
            keep = f.data is None and f.size <= budget
            # Past the budget a file not in memory (a large model's) is not linked: the
            # command gets a file of its own, a reflink where the filesystem has them, else a
            # copy, so that one it writes in place leaves the store's object as it was (out58).
            if ((f.data is not None or keep)
                    and (held := _link(store, f.digest, path, f.size, keep)) is not None):
                linked[f.path] = f.digest
                if keep:
                    verified[f.digest], budget = held, budget - f.size
            elif f.data is not None:
                _write(path, f.data)
            else:
                _copy(store, f.digest, path)
                got = hash_file(path)
                if got.size != f.size or got.digest != f.digest:
                    raise DigestMismatchError(
                        f"{f.path}: copied from the store, hashes to {got.digest} ({got.size} "
                        f"bytes), want {f.digest} ({f.size} bytes)",
                        subject=f.path, expected=f.digest, observed=got.digest,
                    )
                os.chmod(path, 0o444)
            if f.data is not None:
                verified[f.digest] = f.data
            entries.append(FileEntry(f.path, f.size, f.digest.removeprefix("sha256:")))
        # (3)
        if describe is not None:
            raw = describe(Manifest.from_files(list(entries)))
            _write(dest / MANIFEST_NAME, raw)
            entries.append(FileEntry(MANIFEST_NAME, len(raw), digest_bytes(raw)[7:]))
        full = Manifest.from_files(entries)
        # (4)
        for d, _dirs, _files in os.walk(dest, topdown=False):
            os.chmod(d, 0o555)
    except OSError as e:
        remove_tree(dest)
        raise LedgerError(cannot_write(str(dest), e)) from e
    except BaseException:
        remove_tree(dest)
        raise
    return DataDir(dest, full, linked, verified)


def _link(store: ObjectStore, digest: str, path: Path, size: int, keep: bool) -> bytes | None:
    """Hard-link the store's object to ``path`` if it can be done and the link holds exactly
    the verified bytes, and return them when ``keep`` (read once, as they are hashed), else
    ``b""``; otherwise leave nothing at ``path`` and return None."""
    if not store.is_local:
        return None
    try:
        os.link(store.path_of(digest), path, follow_symlinks=False)
    except OSError:
        return None  # another filesystem, no such object, links not supported: copy
    try:
        # A regular file holding exactly the verified bytes (an object replaced by a symbolic
        # link would hand over whatever it points to), that only this user may write: in a
        # shared ledger an object another member stored is theirs, and they could rewrite it
        # while the command reads it and put it back before the check after the run (rev14).
        st = os.lstat(path)
        if (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
                and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            if keep:
                held = path.read_bytes()
                if len(held) == size and digest_bytes(held) == digest:
                    return held
            else:
                got = hash_file(path)
                if got.size == size and "sha256:" + got.sha256 == digest:
                    return b""
    except OSError:
        pass
    path.unlink(missing_ok=True)
    return None


def _copy(store: ObjectStore, digest: str, path: Path) -> None:
    """The store's object as a new file ``path`` of its own: a clone sharing its blocks until
    either is written (``FICLONE``: btrfs, XFS, bcachefs; no time, no space) where the
    filesystem has them, else a copy (`ObjectStore.copy_to`)."""
    if store.is_local:
        import fcntl

        try:
            with open(store.path_of(digest), "rb") as src, open(path, "xb") as out:
                fcntl.ioctl(out.fileno(), _FICLONE, src.fileno())
            return
        except OSError:  # no reflinks here (ext4), another filesystem, no such object: copy
            path.unlink(missing_ok=True)
    store.copy_to(digest, path)


_FICLONE: Final = 0x40049409
"""Linux's ``ioctl`` that makes a file a clone of another (``linux/fs.h``)."""


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _features(schema: pa.Schema) -> tuple[list[str], list[dict[str, Any]]]:
    """The columns ``datasets`` can read and their features (card YAML), others left out."""
    import pyarrow as pa

    def dtype(t: pa.DataType) -> str | None:
        name = str(t)
        if name in _HF_DTYPES:
            return name
        if name in _HF_FLOATS:
            return _HF_FLOATS[name]
        if pa.types.is_timestamp(t):
            return name  # "timestamp[us, tz=UTC]", as datasets spells it
        return None

    columns: list[str] = []
    features: list[dict[str, Any]] = []
    for f in schema:
        t = f.type
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            inner = dtype(t.value_type)
            if inner is None:
                continue
            features.append({"name": f.name, "list": inner})
        else:
            d = dtype(t)
            if d is None:
                continue
            features.append({"name": f.name, "dtype": d})
        columns.append(f.name)
    return columns, features


def _card(dataset: Mapping[str, Any], batches: Sequence[AdmittedBatch]) -> bytes:
    """The dataset card: YAML front matter (as JSON) with configs ``steps`` and ``episodes``."""
    configs: list[dict[str, Any]] = []
    infos: list[dict[str, Any]] = []
    left_out: dict[str, list[str]] = {}
    for config, table in (("steps", "steps"), ("episodes", "episodes")):
        if not batches:
            break
        schema = getattr(batches[0], table).schema
        columns, features = _features(schema)
        left_out[config] = [n for n in schema.names if n not in columns]
        entry: dict[str, Any] = {
            "config_name": config,
            "data_files": [{"split": "train", "path": f"batches/*/{config}.parquet"}],
            "columns": columns,
        }
        if config == "steps":
            entry["default"] = True
        configs.append(entry)
        infos.append({"config_name": config, "features": features})
    front = json.dumps({"configs": configs, "dataset_info": infos}, indent=1, sort_keys=True)
    name = str(dataset.get("name", "")).replace("\n", " ")
    version = str(dataset.get("version", "")).replace("\n", " ")
    skipped = "; ".join(f"{c}: {', '.join(n)}" for c, n in left_out.items() if n) or "none"
    text = f"""---
{front}
---
# {name}@{version}: verified data

The rollout batches of dataset `{name}@{version}` (`{dataset.get("digest", "")}`), as the
trajledger admission gate verified them: each `batches/*/steps.parquet` and
`episodes.parquet` holds the recorded bytes (their digests are in `manifest.json`). This
directory is read-only; a run that changes it is not recorded.

```python
import os, datasets
data = os.environ["TRAJLEDGER_DATA_DIR"]
steps = datasets.load_dataset(data, "steps", split="train")        # one row per step / message
episodes = datasets.load_dataset(data, "episodes", split="train")  # one row per episode
```

`datasets` has no Arrow map type, so these columns are left out of the configs
({skipped}); read them with `pyarrow.parquet.read_table`. Schema: trajledger's
`schemas/rollout.v2.md`.
"""
    return text.encode("utf-8")


def check_data_dir(data: DataDir, store: ObjectStore, *, what: str = "the data directory") -> None:
    """Re-hash the data directory against what was written.

    Steps:
        1. List its regular files (a link or special file is a change).
        2. Compare with the manifest: sizes, then digests (`verify.tree.diff_tree`); when
           they agree, a linked file that is no longer its object's inode (a new file put in
           its place) has its object re-hashed (`_replaced`).
        3. Put back each store object that was hard-linked to a changed file, from the verified
           bytes (the link shared the object's inode).
        0. First, the mode of each store object that was hard-linked: a command that made its
           file writable (``chmod``) made the object so; put back to 0444, with a warning.

    Raises:
        DataDirChangedError: a file was changed, removed or added (every one named).
    """
    from trajledger.ledger.files import collect_files
    from trajledger.verify.tree import diff_tree

    # (0)
    _put_back_modes(data, store, what)
    # (1)
    try:
        files = collect_files([data.path])
    except LedgerError as e:
        problems = [str(e)]
        diff = None
    else:
        # (2)
        diff = diff_tree(data.manifest, files)
        problems = diff.problems() or _replaced(data, store)
    if not problems:
        return
    # (3)
    repaired: list[str] = []
    for rel, digest in sorted(data.linked.items()):
        try:
            store.check_object(digest)
            continue
        except (DigestMismatchError, StoreError):
            pass
        if digest in data.verified:
            store.put_bytes(data.verified[digest])
            repaired.append(f"{rel}: the store's object {digest[:19]}… shared the file and was "
                            "changed with it; it was put back from the verified bytes")
        else:
            repaired.append(f"{rel}: the store's object {digest[:19]}… shared the file and was "
                            "changed with it; restore it with 'trajledger fsck --repair --from "
                            "BUNDLE|LEDGER'")
    lines = [*problems, *repaired]
    raise DataDirChangedError(
        f"{what} was changed by the command: {len(problems)} problem(s); nothing was recorded\n"
        + "\n".join(f"{data.path.name}/{p}" if diff is not None else p for p in lines),
        problems,
        repaired,
    )


def _replaced(data: DataDir, store: ObjectStore) -> list[str]:
    """The linked files a command replaced by another file (not the store object's inode any
    more) after writing the object through them: the directory reads as written, the object
    does not (rev52 finding 3: left damaged, the run recorded). An object still linked is the
    file the directory's re-hash read."""
    out = []
    for rel, digest in sorted(data.linked.items()):
        try:
            here, there = os.lstat(data.path / rel), os.lstat(store.path_of(digest))
            if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
                continue
            store.check_object(digest)
        except (OSError, DigestMismatchError, StoreError):
            out.append(f"{rel}: replaced by another file after the store's object it was "
                       "linked to was written through it")
    return out


def _put_back_modes(data: DataDir, store: ObjectStore, what: str) -> None:
    """Make each store object ``data`` hard-linked read-only (0444) again if a command changed
    its mode through the link; warn naming the files (`InputModeWarning`)."""
    import warnings

    changed: list[str] = []
    for rel, digest in sorted(data.linked.items()):
        with contextlib.suppress(OSError):  # gone, or not the object's inode: the check says
            path = store.path_of(digest)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != 0o444:
                os.chmod(path, 0o444)
                changed.append(f"{rel} ({stat.S_IMODE(st.st_mode):04o})")
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3
                                          else "")
        warnings.warn(f"{what}: the command changed the mode of {len(changed)} read-only "
                      f"file(s), hard links to the ledger's store: {shown}; the store's objects "
                      "were made read-only again (0444)", InputModeWarning, stacklevel=3)


def output_files(directory: Path, shown: str | None = None) -> dict[str, Path]:
    """The regular files under ``directory`` by ``/``-separated relative path (none when it
    holds only directories); ``shown`` names it in messages (default: its path).

    One walk, `collect_files`'; only when it refuses is the output looked at again, for a line
    naming it as the command knows it (`collect_files` names a path under a temporary
    directory gone by the time the line is read) and in `files`' words.

    Raises:
        LedgerError: a link or special file (named), or an unreadable directory.
    """
    from trajledger.ledger.files import collect_files

    try:
        return collect_files([directory])
    except LedgerError as e:
        refused = e
    shown = shown or str(directory)

    def unlisted(e: OSError) -> None:
        where = os.path.relpath(e.filename, directory) if e.filename else "."
        raise LedgerError(f"{shown}: cannot list {where}: {e.strerror}") from refused

    regular = False
    for root, dirs, names in os.walk(directory, onerror=unlisted):
        for name in (*dirs, *names):
            path = os.path.join(root, name)
            with contextlib.suppress(FileNotFoundError):
                mode = os.lstat(path).st_mode
                regular = regular or stat.S_ISREG(mode)
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                    raise LedgerError(
                        f"{shown}: {os.path.relpath(path, directory)} is {kind}: only regular "
                        "files are recorded (write the file itself there, not a link to it); "
                        "nothing was recorded") from refused
    if regular:
        raise refused
    return {}  # (only directories: no file, as an empty output)


def _kept(output: Path) -> str:
    """``N file(s) (a, b, …)``: the regular files under ``output`` (a few named), or ""."""
    names: list[str] = []
    for root, _dirs, files in os.walk(output):
        names += sorted(os.path.relpath(os.path.join(root, n), output) for n in files)
    if not names:
        return ""
    shown = ", ".join(n if n.isprintable() else ascii(n)[1:-1] for n in names[:3])
    return f"{len(names)} file(s) ({shown}{', …' if len(names) > 3 else ''})"


def check_output_dir(output: Path) -> None:
    """An output directory given by the user must be new or empty (so that only what the
    command writes is recorded).

    Raises:
        LedgerError: it is a file, a link, or holds anything.
    """
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise LedgerError(f"--output {output}: not a directory")
    if output.is_dir():
        names = sorted(p.name for _, p in zip(range(4), output.iterdir(), strict=False))
        if names:  # (what is there, and the way on after a stopped run: out43 finding 9)
            held = ", ".join(map(repr, names[:3])) + (", …" if len(names) > 3 else "")
            raise LedgerError(
                f"--output {output}: not empty (it holds {held}); give a new or empty "
                "directory, so that only what the command writes is recorded (the files of a run "
                "stopped before it ended were never recorded: remove them and run again)"
            )


class Workspace:
    """One command run's directories (see the module doc). Use as a context manager::

        with Workspace(ledger.scratch, ledger.store) as ws:
            ws.add("TRAJLEDGER_DATA_DIR", lambda d: write_data_dir(d, store, ...), "data")
            result = run_command(argv, env=ws.environment(os.environ), keep_logs=ws.logs)
            ws.check()
            files = ws.outputs()

    Attributes:
        output: the command's output directory (``TRAJLEDGER_OUTPUT_DIR``).
        logs: where kept logs go.
        inputs: the verified input directories by environment variable.
    """

    def __init__(self, parent: Path, store: ObjectStore, *, output: Path | None = None) -> None:
        """Plan a workspace in ``parent``; ``output``: the user's output directory (checked by
        `check_output_dir`), else a new one in the workspace."""
        if output is not None:
            check_output_dir(output)
        self._parent = parent
        self._store = store
        self._given = output
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.root = Path()
        self.output = Path()
        self.logs = Path()
        self.inputs: dict[str, DataDir] = {}
        self._handed = False  # the inputs named to a command (`environment`)
        self._checked = False  # and checked after it (`check`)

    def __enter__(self) -> Workspace:
        # What dead runs left beside the new directories goes first: a run killed outright
        # (SIGKILL, the OOM killer) leaves its inputs, an evaluation's unsealed suite among
        # them, which the command about to start could otherwise read next to its own. A
        # leftover this user may not remove is another user's, private to them (0700).
        for path in tmp_entries(self._parent):
            if is_stale(path):
                with contextlib.suppress(OSError):
                    remove_tree(path)
        self._tmp = temp_dir(self._parent)
        self.root = Path(self._tmp.name)
        self.output = self._given if self._given is not None else self.root / "output"
        self.output.mkdir(parents=True, exist_ok=True)
        self.logs = self.root / "logs"
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import warnings

        if error is not None and self._handed and not self._checked:
            # A run stopped (Ctrl-C, SIGTERM) or failed after its command had the inputs: what
            # it wrote through a hard link is the store's object, put back before they go
            # (out54 finding 1), with a warning; the error stays the one raised. Another
            # Ctrl-C meanwhile is held until that is done (out56): it would leave the object
            # as the command left it.
            from trajledger._signals import held

            lines = ""
            with held() as arrived, contextlib.suppress(Exception):
                lines = self.changed()
            if lines:
                again = (f" ({len(arrived)} stop signal(s) held until it was done)" if arrived
                         else "")
                warnings.warn("the command changed its inputs before it was stopped; "
                              + lines.strip().replace("\n", "; ") + again, InputModeWarning,
                              stacklevel=2)
        if error is not None and self._given is not None and (kept := _kept(self.output)):
            # The user's --output is kept whatever happens (out56): after a failure, say so,
            # or the next run with that directory is refused (not empty) with no word why.
            warnings.warn(f"--output {self._given} keeps {kept} the command wrote, though the "
                          "run failed: to run again, remove them or give another --output",
                          KeptOutputWarning, stacklevel=2)
        for d in self.inputs.values():
            remove_tree(d.path)
        if self._tmp is not None:
            self._tmp.cleanup()

    def add(self, variable: str, write: Callable[[Path], DataDir], name: str) -> DataDir:
        """Write an input directory ``name`` with ``write(path)``; the command finds it in
        ``variable``."""
        written = write(self.root / name)
        self.inputs[variable] = written
        return written

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` without the passphrases (`HIDDEN_ENV`), with each input's variable and
        ``TRAJLEDGER_OUTPUT_DIR``."""
        self._handed = True
        env = {k: v for k, v in base.items() if not k.startswith(HIDDEN_ENV)}
        # Absolute: the command may change directory.
        env.update({k: str(d.path.absolute()) for k, d in self.inputs.items()})
        env["TRAJLEDGER_OUTPUT_DIR"] = str(self.output.absolute())
        return env

    def check(self) -> None:
        """Re-hash every input (`check_data_dir`), each whatever another's result: a command
        may change several, and each store object that shared a changed file is put back or
        named only by its own input's check.

        Raises:
            DataDirChangedError: an input changed: every change of every input named.
        """
        changed: list[DataDirChangedError] = []
        for variable, d in self.inputs.items():
            try:
                check_data_dir(d, self._store, what=f"${variable} ({d.path})")
            except DataDirChangedError as e:
                changed.append(e)
        # Checked only once every input was: a check stopped half-way (Ctrl-C during the
        # re-hash of a large dataset after an exit 0) leaves the repair to `__exit__` (out56).
        self._checked = True
        if len(changed) == 1:
            raise changed[0]
        if changed:
            raise DataDirChangedError("\n".join(str(e) for e in changed),
                                      [p for e in changed for p in e.problems],
                                      [r for e in changed for r in e.repaired])

    def changed(self) -> str:
        """After a command that failed (a non-zero exit): `check`, whose repairs a failure must
        not skip (a file written in place through a hard link changed the store's object, out54
        finding 1); a newline and its lines, or "" when every input is as written."""
        try:
            self.check()
        except DataDirChangedError as e:
            return "\n" + str(e)
        return ""

    def outputs(self) -> dict[str, Path]:
        """The output directory's files (`output_files`), named as the command knows it; a file
        that is a hard link to an input's file (so to the store's object, one inode: out54
        finding 3) is refused, naming it, before anything is stored; so is anything the command
        wrote in the run's temporary directory beside its inputs (out56).

        Raises:
            LedgerError: a link, a special file, a hard link to an input's file, or a file
                beside the inputs.
        """
        shown = "$TRAJLEDGER_OUTPUT_DIR" if self._given is None else str(self.output)
        # What the command wrote beside its directories, in the run's own temporary directory
        # (`$TRAJLEDGER_OUTPUT_DIR/../shard.bin`, a rank of a launcher saving its part of the
        # model there): removed when the run ends, unseen, and the checkpoint recorded without
        # it (out56).
        own = {d.path.name for d in self.inputs.values()} | {self.logs.name, "output"}
        with contextlib.suppress(OSError):
            if strays := sorted(n for n in os.listdir(self.root) if n not in own):
                names = ", ".join(n if n.isprintable() else ascii(n)[1:-1] for n in strays[:3])
                raise LedgerError(
                    f"the command wrote {names}{', …' if len(strays) > 3 else ''} in the run's "
                    f"temporary directory ({self.root}), beside its inputs, which is removed "
                    "when the run ends: only what is under $TRAJLEDGER_OUTPUT_DIR is recorded "
                    "(a rank that saves its part of the model elsewhere leaves it out of the "
                    "checkpoint): write every file of the checkpoint there; nothing was recorded")
        files = output_files(self.output, shown if self._given is None else None)
        inputs: dict[tuple[int, int], str] = {}
        for variable, d in self.inputs.items():
            for rel in d.linked:
                with contextlib.suppress(OSError):
                    st = os.lstat(d.path / rel)
                    inputs[(st.st_dev, st.st_ino)] = f"${variable}/{rel}"
        for name, path in files.items() if inputs else ():
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if st.st_nlink > 1 and (held := inputs.get((st.st_dev, st.st_ino))):
                    raise LedgerError(
                        f"{shown}: {name} is a hard link to {held}, a file of the ledger's "
                        "store (one inode: writing either writes both): write a copy there "
                        "(shutil.copyfile; cp without -l); nothing was recorded")
        return files
