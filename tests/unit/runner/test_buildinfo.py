"""What a run ran with: git state (clean, dirty, untracked, credentials), environment locks."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from trajledger.runner.buildinfo import (
    command_lock,
    environment_lock,
    git_source,
    lock_descriptor,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "train.py").write_text("print('train')\n")
    (root / ".gitignore").write_text("out/\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    return root


def test_outside_a_work_tree_there_is_no_source(tmp_path: Path) -> None:
    assert git_source(tmp_path) is None


def test_a_clean_tree(repo: Path) -> None:
    (repo / "out").mkdir()
    (repo / "out" / "ignored.bin").write_bytes(b"x")  # ignored files do not make it dirty
    src = git_source(repo / "out")  # any directory of the tree
    assert src is not None
    assert src.commit == _git(repo, "rev-parse", "HEAD")
    assert (src.dirty, src.diff_digest, src.untracked, src.remote) == (False, None, 0, None)
    d = src.descriptor().to_json()
    assert d == {"name": "source", "digest": {"gitCommit": src.commit},
                 "annotations": {"role": "source", "dirty": False}}


def test_a_dirty_tree_is_pinned_to_its_changes(repo: Path) -> None:
    (repo / "train.py").write_text("print('changed')\n")
    first = git_source(repo)
    assert first is not None and first.dirty and first.diff_digest is not None
    (repo / "train.py").write_text("print('changed again')\n")
    second = git_source(repo)
    assert second is not None and second.diff_digest != first.diff_digest
    assert second.descriptor().annotations["diff"] == second.diff_digest


def test_untracked_files_make_it_dirty_and_their_content_counts(repo: Path) -> None:
    (repo / "new.py").write_text("a = 1\n")
    one = git_source(repo)
    (repo / "new.py").write_text("a = 2\n")
    two = git_source(repo)
    assert one is not None and two is not None
    assert one.dirty and one.untracked == 1
    assert one.diff_digest != two.diff_digest


def test_a_remote_is_named_without_credentials(repo: Path) -> None:
    _git(repo, "remote", "add", "origin", "https://user:s3cret@git.example.invalid/lab/x.git")
    src = git_source(repo)
    assert src is not None and src.remote == "https://git.example.invalid/lab/x.git"
    assert src.descriptor().uri == "git+https://git.example.invalid/lab/x.git"
    assert "s3cret" not in str(src.descriptor().to_json())


def test_git_runs_without_the_passphrases(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev9 finding 3: git runs what the work tree's configuration names (``core.fsmonitor``,
    diff drivers, filters), and it ran with the keys' passphrases in its environment, which
    the training command itself never gets. A hook that records what it sees sees none."""
    seen = tmp_path / "seen"
    hook = tmp_path / "hook.sh"
    hook.write_text(f'#!/bin/sh\nenv >> "{seen}"\nexit 1\n')
    hook.chmod(0o755)
    _git(repo, "config", "core.fsmonitor", str(hook))
    (repo / "train.py").write_text("print('changed')\n")  # a diff: the index is refreshed
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", "every key's (TEST ONLY)")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE_TRAINER", "the trainer's (TEST ONLY)")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", "/run/every-TEST-ONLY")  # fix10's files
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE_TRAINER", "/run/trainer-TEST-ONLY")
    src = git_source(repo)
    assert src is not None and src.dirty
    text = seen.read_text()  # the hook ran
    assert "PATH=" in text and "TRAJLEDGER_PASSPHRASE" not in text and "TEST ONLY" not in text
    assert "TEST-ONLY" not in text


def test_a_repository_without_a_commit_has_no_source(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    assert git_source(tmp_path) is None


def test_the_environment_lock_and_its_descriptor() -> None:
    lock = environment_lock()
    lines = lock.decode().splitlines()
    assert lines == sorted(lines) and any(line.startswith("cryptography==") for line in lines)
    d = lock_descriptor("python-environment", lock)
    assert base64.b64decode(d.content or "") == lock
    assert d.digest == {"sha256": hashlib.sha256(lock).hexdigest()}
    assert d.role == "dependency-lock"


def test_a_command_lock_is_taken_from_the_top_of_the_output(tmp_path: Path) -> None:
    for name in ("pylock.toml", "pylock.gpu.toml", "requirements.lock", "model.bin"):
        (tmp_path / name).write_text(name)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pylock.toml").write_text("nested")
    files = {p.relative_to(tmp_path).as_posix(): p for p in tmp_path.rglob("*") if p.is_file()}
    locks = command_lock(files)
    assert [d.annotations["file"] for d in locks] == [
        "pylock.gpu.toml", "pylock.toml", "requirements.lock",
    ]
    assert locks[1].sha256 == "sha256:" + hashlib.sha256(b"pylock.toml").hexdigest()
