"""What a training run ran with: the source tree's git state and the Python environment's lock.

Scope: facts a checkpoint's SLSA provenance records about the code and environment of a run,
each as an in-toto ResourceDescriptor with a ``role`` annotation (`verify.kinds.CHECKPOINT_ROLES`
lists the roles that are artifacts of the log; these are not, and lineage shows them as
information):

- ``source``: the git working tree a run started in: its commit (``digest.gitCommit``), the
  remote ``origin`` without credentials (``uri``), whether the tree was dirty and, when it was,
  the digest of what differs from the commit (``git diff --binary HEAD`` and every untracked,
  not ignored file with its content digest), so that a dirty run is still pinned to bytes.
- ``dependency-lock``: the ``name==version`` lines of every distribution installed where
  trajledger runs, sorted, carried whole (``content``, base64) with their sha256; and a lock
  file a command leaves in its output directory for its own environment (PEP 751
  ``pylock.toml`` / ``pylock.<name>.toml``, or ``requirements.lock`` from ``pip freeze``).

Non-scope: recording (``runner.train``). Git is run read-only (``--no-optional-locks``) and a
missing git, or a directory outside any work tree, gives no ``source`` rather than an error.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from trajledger.verify.digest import hash_file
from trajledger.verify.predicates import ResourceDescriptor

__all__ = [
    "COMMAND_LOCK_NAMES",
    "GitSource",
    "command_lock",
    "environment_lock",
    "git_source",
    "lock_descriptor",
]

COMMAND_LOCK_NAMES: Final = re.compile(r"pylock\.toml|pylock\.[^/.]+\.toml|requirements\.lock")
"""Top-level output files taken as the lock of a command's own environment."""

_GIT_TIMEOUT: Final = 120.0
_CHUNK: Final = 1 << 20


@dataclass(frozen=True)
class GitSource:
    """The state of a git working tree.

    Attributes:
        commit: ``HEAD``'s full hex object name.
        dirty: tracked files differ from the commit, or untracked (not ignored) files exist.
        diff_digest: ``sha256:<hex>`` of the differences (see the module doc); None when clean.
        untracked: how many untracked, not ignored files there were.
        remote: the ``origin`` remote's URL without user or password; None without one.
    """

    commit: str
    dirty: bool
    diff_digest: str | None
    untracked: int
    remote: str | None

    def descriptor(self) -> ResourceDescriptor:
        """The provenance dependency: role ``source``."""
        annotations: dict[str, object] = {"role": "source", "dirty": self.dirty}
        if self.diff_digest is not None:
            annotations["diff"] = self.diff_digest
            annotations["untrackedFiles"] = self.untracked
        return ResourceDescriptor(
            name="source",
            uri=f"git+{self.remote}" if self.remote else None,
            digest={"gitCommit": self.commit},
            annotations=annotations,
        )


def _git_env() -> dict[str, str]:
    """git's environment: this process's without the keys' passphrases (git runs what the work
    tree's configuration names: ``core.fsmonitor``, diff drivers, filters; it needs no key,
    like a training command: ``runner.workdir.HIDDEN_ENV``), never prompting, in the C locale."""
    from .workdir import HIDDEN_ENV

    env = {k: v for k, v in os.environ.items() if not k.startswith(HIDDEN_ENV)}
    return {**env, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


def _git(cwd: Path, *args: str) -> bytes | None:
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", *args],
            cwd=cwd,
            capture_output=True,
            timeout=_GIT_TIMEOUT,
            check=False,
            env=_git_env(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _without_credentials(url: str) -> str:
    """``https://user:token@host/x`` -> ``https://host/x`` (a token must not reach a log)."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1", url)


def git_source(cwd: Path) -> GitSource | None:
    """The git state of the work tree holding ``cwd``; None outside one (or without git).

    Steps:
        1. ``HEAD``'s commit (none yet, or not a work tree: None).
        2. Tracked changes: ``git diff --binary HEAD``, hashed as it streams.
        3. Untracked, not ignored files (``git ls-files --others --exclude-standard``): each
           path and the sha256 of its content go into the same hash.
        4. The ``origin`` URL, credentials removed.
    """
    # (1)
    head = _git(cwd, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    top = _git(cwd, "rev-parse", "--show-toplevel")
    if not head or not top:
        return None
    commit = head.decode("ascii", "replace").strip()
    root = Path(top.decode("utf-8", "surrogateescape").strip())
    # (2)
    h = hashlib.sha256()
    changed = _diff_into(root, h)
    if changed is None:
        return None
    # (3)
    listing = _git(root, "ls-files", "-z", "--others", "--exclude-standard")
    untracked = sorted(p for p in (listing or b"").split(b"\0") if p)
    for rel in untracked:
        h.update(b"untracked " + rel + b" " + _file_digest(root / os.fsdecode(rel)) + b"\n")
    # (4)
    remote = _git(root, "config", "--get", "remote.origin.url")
    url = _without_credentials(remote.decode("utf-8", "replace").strip()) if remote else None
    dirty = changed or bool(untracked)
    return GitSource(
        commit,
        dirty,
        "sha256:" + h.hexdigest() if dirty else None,
        len(untracked),
        url or None,
    )


def _diff_into(root: Path, h: hashlib._Hash) -> bool | None:
    """Stream ``git diff --binary HEAD`` into ``h``; whether it was non-empty (None: git failed)."""
    try:
        proc = subprocess.Popen(
            ["git", "--no-optional-locks", "diff", "--binary", "--no-ext-diff", "HEAD"],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_git_env(),
        )
    except OSError:
        return None
    assert proc.stdout is not None
    size = 0
    with proc.stdout:
        while chunk := proc.stdout.read(_CHUNK):
            size += len(chunk)
            h.update(chunk)
    return size > 0 if proc.wait() == 0 else None


def _file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    try:
        if path.is_symlink():
            h.update(b"link " + os.fsencode(os.readlink(path)))
        else:
            with open(path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
    except OSError as e:
        h.update(f"unreadable: {e.strerror}".encode())
    return h.hexdigest().encode("ascii")


def environment_lock() -> bytes:
    """The sorted ``name==version`` lines of every distribution installed here (UTF-8).

    Each distribution's metadata is read and parsed once (``Distribution.metadata`` parses its
    file again on every access, and ``version`` is one more access): a third of the work."""
    lines = set()
    for dist in importlib.metadata.distributions():
        meta = dist.metadata
        if meta["Name"]:
            lines.add(f"{meta['Name'].lower()}=={meta['Version']}")
    return "\n".join(sorted(lines)).encode("utf-8")


def lock_descriptor(name: str, data: bytes, **annotations: object) -> ResourceDescriptor:
    """A ``dependency-lock`` dependency carrying the lock whole, with its sha256."""
    return ResourceDescriptor(
        name=name,
        digest={"sha256": hashlib.sha256(data).hexdigest()},
        content=base64.b64encode(data).decode("ascii"),
        media_type="text/plain; charset=utf-8",
        annotations={"role": "dependency-lock", **annotations},
    )


def command_lock(files: Mapping[str, Path]) -> list[ResourceDescriptor]:
    """The lock files a command left at the top of its output directory.

    Args:
        files: the output files by relative path.

    Returns:
        One ``dependency-lock`` dependency per lock file, naming it by path and digest (its
        bytes are a file of the checkpoint).
    """
    out = []
    for path in sorted(files):
        if COMMAND_LOCK_NAMES.fullmatch(path):
            out.append(ResourceDescriptor.of(f"command-environment:{path}",
                                             hash_file(files[path]).digest,
                                             role="dependency-lock", file=path))
    return out
