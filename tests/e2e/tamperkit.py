"""Helpers shared by the tamper tests (tests/e2e/test_tamper_*.py, test_read_only.py).

Scope: a click runner that keeps stderr apart (`testkit.new_runner`); pinning a copied ledger's
log key ahead for this test's user (`pin_log`: the user knows the ledger; no first-use note); the
byte mutations (flip one byte, truncate); a bundle's members read and written back, its index
made to agree (`bundle_members`, `write_bundle`); writing over a read-only store blob; swapping two
files; a snapshot of a directory's bytes and modes; a pristine tree that work copies are put
back to between tamperings (`Pristine`); building a quickstart ledger in process with
its own user state directory; running command lines in a child process that file modes bind even
as root (run as a script, this file is that child).
Non-scope: what a test concludes from a mutation (each test module classifies for itself).

Not a test module (pytest collects ``test_*.py`` only): tests import it as ``tamperkit``
(tests/e2e/conftest.py puts this directory on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

if str(Path(__file__).parents[1]) not in sys.path:  # run as a script: testkit is beside e2e/
    sys.path.insert(0, str(Path(__file__).parents[1]))

import testkit
from testkit import new_runner

PASSPHRASE = "tamper matrix passphrase (TEST ONLY)"
"""Encrypts the quickstart's keys, as the attacker model of issue 9 has them."""


def pin_log(home: Path) -> None:
    """``trajledger trust VKEY`` of the ledger at ``home``, for the user of this test (its
    ``TRAJLEDGER_STATE_DIR``): a copy of a ledger the test built is one whose key its user
    knows, so its first use is no blind one (and prints no note)."""
    from trajledger.runner.cli import main

    vkey = (home / "log" / "vkey").read_text().strip()
    r = new_runner().invoke(main, ["trust", vkey])
    assert r.exit_code == 0, r.output


def bundle_members(path: Path) -> list[tuple[str, bytes]]:
    """The members of a test-made (trusted) bundle in tar order, as (name, bytes)."""
    import io
    import tarfile

    import zstandard

    raw = zstandard.ZstdDecompressor().stream_reader(path.read_bytes()).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return [(i.name, tar.extractfile(i).read()) for i in tar]  # type: ignore[union-attr]


def write_bundle(path: Path, members: list[tuple[str, bytes]], *, reindex: bool = False) -> Path:
    """Write ``members`` (``bundle.json`` first) to ``path`` as a bundle: a pax tar, zstd.

    With ``reindex``, ``bundle.json`` is rewritten to list the other members with their sizes
    and digests (its subject, origin, key, time and omitted list kept): a tamperer who edits
    members and makes the unsigned index agree, so that only the signed records can tell."""
    import dataclasses

    import zstandard

    from trajledger.ledger.encode import bundle_index_bytes
    from trajledger.verify.bundle_index import BundleIndex, Member

    if reindex:
        old = BundleIndex.from_bytes(members[0][1])
        listed = sorted(
            (Member(n, len(d), hashlib.sha256(d).hexdigest()) for n, d in members[1:]),
            key=lambda m: m.name,
        )
        index = dataclasses.replace(old, members=tuple(listed))
        members = [("bundle.json", bundle_index_bytes(index)), *members[1:]]
    path.write_bytes(zstandard.ZstdCompressor().compress(tar_bytes(members)))
    return path


def tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    """``members`` as a pax tar, in their order (a bundle's container before zstd)."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def flip(data: bytes) -> bytes:
    """The middle byte with its low bit flipped (an empty file becomes one byte)."""
    if not data:
        return b"\x01"
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


def truncate(data: bytes) -> bytes:
    """The first half."""
    return data[: len(data) // 2]


def overwrite(path: Path, data: bytes) -> None:
    """Write ``data`` over ``path``, read-only or not (store blobs are mode 0444)."""
    with contextlib.suppress(OSError):
        os.chmod(path, 0o644)
    path.write_bytes(data)


def swap(a: Path, b: Path) -> None:
    """Exchange the bytes of two files."""
    da, db = a.read_bytes(), b.read_bytes()
    overwrite(a, db)
    overwrite(b, da)


def snapshot(root: Path, *, skip: tuple[str, ...] = ()) -> dict[str, tuple[str, int]]:
    """``{relative path: (sha256 hex, mode)}`` of every file under ``root`` (links not
    followed), leaving out the paths under the top-level directories named in ``skip``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):  # links to directories not followed
        if dirpath == str(root):
            dirnames[:] = [d for d in dirnames if d not in skip]
            filenames = [f for f in filenames if f not in skip]
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                out[os.path.relpath(path, root).replace(os.sep, "/")] = (
                    digest, stat.S_IMODE(st.st_mode)
                )
    return dict(sorted(out.items()))


def snapshot_changed(
    before: dict[str, tuple[str, int]],
    root: Path,
    changed: list[str],
    *,
    skip: tuple[str, ...] = (),
) -> dict[str, tuple[str, int]]:
    """`snapshot` of ``root`` where ``root`` is the tree ``before`` was taken of but for the
    files ``changed`` (relative paths): only those are read."""
    out = dict(before)
    for rel in changed:
        p = root / rel
        if rel.split("/", 1)[0] in skip:
            continue
        if p.is_file() and not p.is_symlink():
            out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(p.stat().st_mode))
        else:
            out.pop(rel, None)
    return out


class Pristine:
    """A directory tree (no symbolic links in it) as it was when taken, and work copies of it
    put back to it between tamperings.

    `reset` makes ``work`` what a fresh ``shutil.copytree`` of the tree as taken makes: the
    same directories and files, each file's bytes, and every directory's and file's permission
    bits and modification time. It touches only what differs (deleting and copying
    a whole ledger again costs more than a decision on it): a file is kept when its type, mode,
    size, modification time and bytes are the pristine one's (the bytes are compared each time:
    a write in place within the clock's granularity may keep the size and the time); anything
    else is deleted and written again, and a directory that is no longer pristine gets its
    mode and times back.
    """

    def __init__(self, root: Path) -> None:
        self.dirs: dict[str, os.stat_result] = {".": root.lstat()}
        self.files: dict[str, tuple[os.stat_result, bytes]] = {}
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames]:
                path = os.path.join(dirpath, name)
                rel, st = os.path.relpath(path, root), os.lstat(path)
                if stat.S_ISDIR(st.st_mode):
                    self.dirs[rel] = st
                else:
                    assert stat.S_ISREG(st.st_mode), f"{path}: not a directory or a file"
                    self.files[rel] = (st, Path(path).read_bytes())

    def _same(self, path: str, rel: str) -> bool:
        if rel in self.dirs:
            return os.path.isdir(path) and not os.path.islink(path)
        if rel not in self.files:
            return False
        want, data = self.files[rel]
        st = os.lstat(path)
        return (st.st_mode, st.st_size, st.st_mtime_ns) == (
            want.st_mode, want.st_size, want.st_mtime_ns
        ) and Path(path).read_bytes() == data

    def reset(self, work: Path) -> None:
        """Make ``work`` (made when absent) a fresh copy of the pristine tree."""
        work.mkdir(exist_ok=True)
        kept: set[str] = set()  # the pristine files found as they were
        for dirpath, dirnames, filenames in os.walk(work, topdown=False):
            for name in [*filenames, *dirnames]:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, work)
                if self._same(path, rel):
                    kept.add(rel)
                    continue
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
        for rel in sorted(self.dirs):  # parents first
            with contextlib.suppress(FileExistsError):
                os.mkdir(os.path.join(work, rel))
        for rel in self.files.keys() - kept:
            st, data = self.files[rel]
            path = os.path.join(work, rel)
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, stat.S_IMODE(st.st_mode))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        for rel in sorted(self.dirs, reverse=True):  # children first: theirs touch the parent
            st, want = os.lstat(work / rel), self.dirs[rel]
            if (st.st_mode, st.st_mtime_ns) != (want.st_mode, want.st_mtime_ns):
                os.chmod(work / rel, stat.S_IMODE(want.st_mode))
                os.utime(work / rel, ns=(want.st_atime_ns, want.st_mtime_ns))


@dataclass(frozen=True)
class Quickstart:
    """A quickstart ledger as ``trajledger quickstart`` builds it, and its user's state."""

    home: Path
    state: Path
    checkpoint: str
    """The final checkpoint's digest (the quickstart's last stdout line)."""
    dataset: str = "cartpole-train@2"
    """The dataset the final checkpoint was trained on."""


def build_quickstart(root: Path, *, lookup_tail: int | None = None) -> Quickstart:
    """``trajledger quickstart`` (10 episodes) into ``root/ledger``, in process, with keys
    encrypted under `PASSPHRASE` and the user state in ``root/state``.

    Args:
        root: an empty directory.
        lookup_tail: write the log's lookup cache every this many entries (it is written
            every 1024 otherwise, so a quickstart ledger has none on disk).
    """
    from trajledger.ledger.log import lookup

    home, state = root / "ledger", root / "state"
    state.mkdir()
    with pytest.MonkeyPatch.context() as m:
        m.setenv(testkit.STATE_ENV, str(state))
        if lookup_tail is not None:
            m.setattr(lookup, "TAIL", lookup_tail)
        checkpoint = testkit.quickstart(home, passphrase=PASSPHRASE)
    return Quickstart(home, state, checkpoint)


def run_elsewhere(
    commands: list[list[str]], env: dict[str, str], *, without_dac_override: bool
) -> list[dict[str, Any]]:
    """Run trajledger command lines in one child process, in process there (click's runner);
    ``[{"args", "exit", "stdout", "stderr"}]``.

    Args:
        commands: the argument lists.
        env: environment variables to set in the child.
        without_dac_override: when run as root, drop the capabilities that let root write
            where file modes say no (``setpriv``), so that a read-only directory is read-only
            for the child too.
    """
    prefix = []
    if without_dac_override and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot make a directory read-only")
        prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner"]
    r = subprocess.run(
        [*prefix, sys.executable, __file__],
        input=json.dumps(commands),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    results: list[dict[str, Any]] = json.loads(r.stdout)
    return results


def _run_commands() -> None:
    """`run_elsewhere`'s child: argument lists as JSON on stdin, results as JSON on stdout."""
    from trajledger.runner.cli import main

    runner = new_runner()
    out = []
    for args in json.load(sys.stdin):
        r = runner.invoke(main, args)
        out.append({"args": args, "exit": r.exit_code, "stdout": r.stdout, "stderr": r.stderr})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    _run_commands()
