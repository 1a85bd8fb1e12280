"""rev50 finding 9: ``show REF --content NAME``'s refusal to write to a terminal tells a command
whose words are shell words every shell reads (`shell_word`); docs/SECURITY.md, "Review of
2026-12-07, thirty-eighth round (rev50)"."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import click
import pytest

NAME = "A\\'\"; touch pwned; #"
"""A carried content's name (its signer's text): fish reads ``\\'`` in single quotes as a
quote."""


def test_the_redirect_step_runs_nothing_in_fish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: ``shlex.join``: ``'trajledger show sha256:… --content 'A\\'"'"'"; touch pwned;
    #' > FILE'``, which fish ran as ``touch pwned`` (the name comes from the record's carries
    line, pasted)."""
    from trajledger.ledger import artifact_cli

    monkeypatch.setattr(artifact_cli, "is_terminal", lambda _stream: True)
    info = {"predicate": {"byproducts": [
        {"name": NAME, "content": base64.b64encode(b"\x1b]0;title\x07").decode()}]}}
    with pytest.raises(click.UsageError) as e:
        artifact_cli._print_carried("sha256:" + "a" * 64, info, NAME)
    told = re.search(r"redirect it: '(trajledger show .*) > FILE'$", e.value.message)
    assert told, e.value.message
    for shell in ("bash", "dash", "zsh", "fish"):
        if shutil.which(shell) is None:
            continue
        r = subprocess.run([shell, "-c", "printf '%s\\n' " + told.group(1).split(" ", 1)[1]],
                           capture_output=True, cwd=tmp_path, check=False)
        assert not (tmp_path / "pwned").exists(), (shell, told.group(1))
        if b"$'" not in told.group(1).encode():
            assert r.stdout.decode().splitlines()[-1] == NAME, (shell, r.stdout)
