"""A checkpoint's signed name in the lines ``impact`` and `status.label` print (rev47).

A name is its signer's: a lab's or a vendor's own software signs any text (the ledger's
`names.check_name` refuses it only for the records it writes). The verifier's report escapes
every name it draws (`verify.nodes.NAMED`: control characters, and parentheses, so that a
name holding ``(sha256:<another digest>)`` cannot pass for the subject's: rev32). Two lines
printed the raw name beside it: ``impact``'s ``N checkpoint(s) reached:`` summary (out48
touched it; ``click.echo``, no escaping at all: an ESC sequence reached the terminal), and
`status.label`, the ``kind NAME@VERSION (sha256:…)`` of every ``affected here``, revocation
and compromise line (its WARNING escaped control characters, not parentheses; its ``--json``
``label`` the same text).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import testkit
from testkit import new_runner

from trajledger.ledger import names, record
from trajledger.runner.cli import main

NAME = "bc\x1b[2K\r\x1b[32m (sha256:" + "ab" * 32 + ")"
"""A checkpoint name that erases its line and names another digest in parentheses."""


def run(home: Path, *args: str | Path) -> tuple[int, str]:
    r = new_runner().invoke(main, ["--ledger", str(home), *map(str, args)])
    assert "Traceback" not in r.output, r.output
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def hostile(quickstart_template: testkit.Template[str],
            tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A quickstart ledger holding a checkpoint trained on cartpole-train@2 under ``NAME``
    (signed by software that does not check names) and that checkpoint's digest."""
    root = tmp_path_factory.mktemp("rev47-names")

    def make(root: Path) -> tuple[Path, str]:
        home = testkit.copy_template(quickstart_template, root / "lab")
        with pytest.MonkeyPatch.context() as m:
            m.setattr(names, "check_name", lambda value, *_a, **_k: value)
            m.setattr(record, "check_subject_name", lambda _name: None)
            code, out = run(home, "train", "--dataset", "cartpole-train@2", "--key", "trainer",
                            "--name", NAME, "--version", "1", "--seed", "7")
        assert code == 0, out
        return home, out.strip().splitlines()[-1]

    return testkit.as_own_user(root, make)


def test_impact_names_the_checkpoints_it_reaches_escaped(hostile: tuple[Path, str]) -> None:
    home, _ck = hostile
    code, out = run(home, "impact", "cartpole-train@2")
    line = next((x for x in out.split("\n") if "checkpoint(s) reached: " in x), None)
    assert code == 0 and line is not None, out
    assert "\x1b" not in line and "\r" not in line, repr(line)
    assert "bc\\u001b[2K\\u000d" in line and "\\u0028sha256:abab" in line, repr(line)


def test_a_records_label_escapes_its_name(hostile: tuple[Path, str]) -> None:
    """`status.label`: one ``(sha256:`` on the line, the record's own."""
    from trajledger import Ledger
    from trajledger.ledger.status import label

    home, ck = hostile
    said = label(Ledger.open(home), ck)
    assert re.findall(r"\(sha256:[0-9a-f]+", said) == [f"({ck[:19]}"], said
    assert "\x1b" not in said and "\\u0028sha256:abab" in said, said


def test_a_record_named_like_a_bundle_is_shown_where_its_file_is(
        quickstart_template: testkit.Template[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """rev47 finding 6: out48's ``not_a_bundle`` took any REF naming a file ending ``.zst`` for
    a bundle: ``attest weights.tar.zst`` names its record ``weights.tar.zst`` (the path's
    name), and ``show``, ``lineage`` and ``impact`` of that name, run where the file is (where
    it was attested), were usage errors (exit 2) telling to verify a bundle. A REF this ledger
    resolves is its record; a bundle file that names no record still gets the hint."""
    home = testkit.copy_template(quickstart_template, tmp_path / "lab")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights.tar.zst").write_bytes(bytes(range(256)) * 4)
    code, out = run(home, "attest", "weights.tar.zst", "--key", "vendor")
    assert code == 0, out
    for command in ("show", "lineage", "impact"):
        code, out = run(home, command, "weights.tar.zst")
        assert "a bundle file" not in out and code in (0, 1), (command, out)
    (tmp_path / "other.tar.zst").write_bytes(b"x")
    code, out = run(home, "show", "other.tar.zst")
    assert code == 2 and "a bundle file" in out, out
