"""What an auditor reads cannot be redrawn by the strings a vendor signs (rev5's finding 1).

A vendor chooses every name, licence and reason in its signed records. A batch named
``evil<ESC>[2K<CR>✓ OK …`` with a right-to-left override, revoked for a reason that moves the
cursor up and erases lines, exported as a bundle: on a terminal, the failing verdict of
``python -m verify`` and ``trajledger verify`` was erased and replaced by a passing line.
Every text the verifier renders (the report, its failure lines, the verdict, the lineage
pictures) escapes control characters, line separators and bidirectional controls; only the
renderer's own line breaks remain.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import testkit
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger import record
from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main

NAME = "evil\x1b[2K\r\x1b[32m✓ OK: rollout-batch fine\x1b[0m\u202eabc\u2028\x85forged"
LICENCE = "MIT\x1b[31m\nFORGED LINE\t\x7f"
REASON = "oops\r\x1b[2K\x1b[1A\x1b[2K\u2066\u200f"
HIDDEN = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
"""What must not reach a reader: every control character but the line break, NEL, the line
and paragraph separators and the bidirectional controls."""


def run(home: Path, *args: str | Path) -> tuple[int, str]:
    r = new_runner().invoke(main, ["--ledger", str(home), *map(str, args)])
    assert "Traceback" not in r.output, r.output
    return r.exit_code, r.output


def write_steps(path: Path) -> Path:
    """Two episodes of three steps, as rollout JSONL."""
    path.write_text("".join(
        f'{{"episode_id": "e{e}", "step": {s}, "obs": [0.1], "action": 1, "reward": 1.0, '
        f'"terminated": {str(s == 2).lower()}, "truncated": false}}\n'
        for e in range(2) for s in range(3)))
    return path


@pytest.fixture(scope="module")
def hostile(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str, Path]:
    """A vendor ledger holding a revoked batch whose name, licence and revocation reason are
    hostile, and the batch's bundle."""
    root = tmp_path_factory.mktemp("vendor-strings")

    def build(root: Path) -> tuple[Path, str, Path]:
        with pytest.MonkeyPatch.context() as m:
            # A vendor whose own software signs a name this one refuses (rev15): what others
            # read is escaped whoever signed it.
            m.setattr(record, "check_subject_name", lambda _name: None)
            return make(root)

    def make(root: Path) -> tuple[Path, str, Path]:
        home = testkit.copy_template(quickstart_template, root / "vendor")
        steps = write_steps(root / "steps.jsonl")
        code, out = run(home, "record", steps, "--env", "cartpole@1", "--policy", "random",
                        "--key", "vendor", "--name", NAME, "--licence", LICENCE)
        assert code == 0, out
        digest = out.strip().splitlines()[-1]
        assert run(home, "revoke", digest, "--key", "vendor", "--reason", REASON)[0] == 0
        bundle = root / "evil.tar.zst"
        assert run(home, "export", digest, "--out", bundle)[0] == 0
        return home, digest, bundle

    return testkit.as_own_user(root, build)


def shown(text: str) -> list[str]:
    """The hidden characters in ``text`` (none is the answer)."""
    return sorted(set(HIDDEN.findall(text)))


def test_the_offline_verifier_escapes_what_the_vendor_signed(
    hostile: tuple[Path, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    home, _digest, bundle = hostile
    code = verify_main([str(bundle), "--policy", str(home / "policy.toml")])
    out = capsys.readouterr()
    assert code == 1
    assert shown(out.out) == [] and shown(out.err) == []
    first = out.out.splitlines()[0]
    assert first.startswith("✗ FAIL: rollout-batch evil\\u001b[2K\\u000d"), first
    assert "\\u202eabc\\u2028\\u0085forged" in first
    assert "licence MIT\\u001b[31m\\u000aFORGED LINE\\u0009\\u007f" in out.out
    assert not any(line.startswith(("FORGED", "forged")) for line in out.out.splitlines())
    # One FAIL line per problem: the reason's carriage return no longer splits it.
    fails = out.err.splitlines()
    assert len(fails) == 2 and fails[1].endswith("revoked: oops\\u000d\\u001b[2K\\u001b[1A"
                                                 "\\u001b[2K\\u2066\\u200f (log index 21)"), fails


@pytest.mark.parametrize("fmt", ["text", "mermaid", "dot", "html"])
def test_verify_and_lineage_escape_what_the_vendor_signed(
    hostile: tuple[Path, str, Path], fmt: str
) -> None:
    home, digest, bundle = hostile
    code, out = run(home, "lineage", digest, "--format", fmt)
    assert code == 1 and shown(out) == [], out
    assert "\\u202e" in out
    if fmt == "text":
        for args in ([digest], [bundle, "--policy", home / "policy.toml"]):
            code, out = run(home, "verify", *args)
            assert code == 1 and shown(out) == [], out
            assert out.startswith("✗ FAIL: rollout-batch evil\\u001b[2K\\u000d")


@pytest.mark.parametrize("command", ["show", "stats", "impact", "query"])
def test_ledger_commands_escape_what_the_vendor_signed(
    hostile: tuple[Path, str, Path], command: str
) -> None:
    """The names a command prints of the log's artifacts (stdout, and its OK, FAIL and WARNING
    lines) are escaped as the report's are."""
    home, digest, _bundle = hostile
    args = ["query", "artifacts"] if command == "query" else [command, digest]
    code, out = run(home, *args)
    assert code in (0, 1) and shown(out) == [], out
    assert "evil\\u001b[2K\\u000d" in out


def test_a_buyer_importing_it_reads_every_line_as_written(
    hostile: tuple[Path, str, Path], tmp_path: Path
) -> None:
    home, _digest, bundle = hostile
    buyer = tmp_path / "buyer"
    assert run(buyer, "init", "--origin", "buyer/log")[0] == 0
    trust = buyer / "trust"
    trust.mkdir()
    for k in ("b1", "b2"):
        assert run(buyer, "key", "new", k, "--no-encrypt")[0] == 0
    for p in [*(home / "keys").glob("*.pub"), *(buyer / "keys").glob("b*.pub")]:
        shutil.copy(p, trust / p.name)
    vkeys = f'"{Ledger.open(home).log.vkey}", "{Ledger.open(buyer).log.vkey}"'
    (buyer / "policy.toml").write_text(testkit.BUYER_POLICY.format(vkeys=vkeys))
    code, out = run(buyer, "import", bundle, "--policy", buyer / "policy.toml", "--key", "b1",
                    "--key", "b2")
    assert code == 0 and shown(out) == [], out  # a revoked batch is taken in, revoked
    assert "\nOK: rollout-batch evil\\u001b[2K\\u000d" in out, out
    assert "\nWARNING: revoked by " in out and ": oops\\u000d\\u001b[2K" in out, out
    assert not any(line.startswith(("FORGED", "forged")) for line in out.splitlines()), out


@pytest.mark.parametrize(("name", "said"), [
    ("c\u0430rtpole", "mixes letters of the Cyrillic and Latin scripts in 'c\u0430rtpole'"),
    ("cartpole-\u0442rain", "mixes letters of the Cyrillic and Latin scripts in '\u0442rain'"),
    ("\u03a9mega", "mixes letters of the Greek and Latin scripts"),
    ("cafe\u0301", "is not in Unicode normal form NFKC (U+0065, U+0301)"),
    ("\uff43\uff41\uff52\uff54", "is not in Unicode normal form NFKC"),
    ("\u00b5P", "is not in Unicode normal form NFKC (U+00B5)"),
    ("\u0441\u043e\u0440", "is written in Cyrillic letters drawn like Latin ones: "
     "'\u0441\u043e\u0440' reads as the Latin 'cop'"),
    ("\u0435\u0445\u043e-train", "'\u0435\u0445\u043e' reads as the Latin 'exo'"),
    ("\u0391\u0392\u0395-v1", "is written in Greek letters drawn like Latin ones"),
    ("\u0441\u0440\u0435\u0434\u0430", None),  # Cyrillic alone, a letter of its own ('д')
    ("\u03ba\u03b1\u03bb\u03b7-v1", None),  # a Greek word and a Latin one
    ("\u8bad\u7ec3v2", None),  # Han beside Latin: no shapes in common
    ("caf\u00e9", None),
])
def test_a_name_that_can_pass_for_another_is_refused(
    quickstart_template: testkit.Template[str], tmp_path: Path, name: str, said: str | None
) -> None:
    """Two names that look the same on a screen are two artifacts to the ledger: a reviewer
    who approves ``cаrtpole-train`` (a Cyrillic ``а``) believes they approved
    ``cartpole-train``. A name spelt so is refused when it is recorded; before, both were
    recorded side by side (an environment ``café`` twice, composed and decomposed). Since
    rev22 an environment, evaluator, dataset or checkpoint is named in ASCII (test_names.py):
    this is a batch's name (``record --name``), which keeps this rule."""
    home = testkit.copy_template(quickstart_template, tmp_path / "q")
    steps = write_steps(tmp_path / "steps.jsonl")
    code, out = run(home, "record", steps, "--env", "cartpole@1", "--policy", "random",
                    "--key", "vendor", "--name", name)
    if said is None:
        assert code == 0, out
    else:
        assert code == 1 and said in out and out.count("\n") == 1, out
        assert "spell it in one script, in NFKC form" in out, out


@pytest.mark.parametrize(("name", "said"), [
    ("c\u0430rtpole-train", "mixes letters of the Cyrillic and Latin scripts in 'c\u0430rtpole', "
     "whose shapes look alike (Cyrillic '\u0430', Latin 'a'):"),
    ("\u0441\u043e\u0440-train", "is written in Cyrillic letters drawn like Latin ones: "
     "'\u0441\u043e\u0440' reads as the Latin 'cop', so"),
])
def test_a_buyer_is_warned_of_a_vendor_name_that_can_pass_for_another(
    quickstart_template: testkit.Template[str], tmp_path: Path, name: str, said: str
) -> None:
    """A vendor's software that does not refuse such a name signs it: the buyer takes the
    batch in as signed, warned once, and told to refer to it by its digest."""
    home = testkit.copy_template(quickstart_template, tmp_path / "vendor")
    steps = write_steps(tmp_path / "steps.jsonl")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(record, "check_subject_name", lambda _name: None)
        code, out = run(home, "record", steps, "--env", "cartpole@1", "--policy", "random",
                        "--key", "vendor", "--name", name)
    assert code == 0, out
    digest = out.strip().splitlines()[-1]
    bundle = tmp_path / "b.tar.zst"
    assert run(home, "export", digest, "--out", bundle)[0] == 0
    buyer = tmp_path / "buyer"
    assert run(buyer, "init", "--origin", "buyer/log")[0] == 0
    trust = buyer / "trust"
    trust.mkdir()
    for k in ("b1", "b2"):
        assert run(buyer, "key", "new", k, "--no-encrypt")[0] == 0
    for p in [*(home / "keys").glob("*.pub"), *(buyer / "keys").glob("b*.pub")]:
        shutil.copy(p, trust / p.name)
    vkeys = f'"{Ledger.open(home).log.vkey}", "{Ledger.open(buyer).log.vkey}"'
    (buyer / "policy.toml").write_text(testkit.BUYER_POLICY.format(vkeys=vkeys))
    code, out = run(buyer, "import", bundle, "--policy", buyer / "policy.toml", "--key", "b1",
                    "--key", "b2")
    assert code == 0, out
    warned = [line for line in out.splitlines() if "can pass for another name" in line]
    assert warned == [f"WARNING: imported name {name!r} {said} it can pass for another "
                      "name; refer to it by its digest"], out
    # --json carries the same texts as `import.lookalikes` (as monitor's `updates.lookalikes`;
    # left33 finding 2), the lines still on stderr; imported again, nothing new, still said.
    r = testkit.new_runner().invoke(main, [
        "--ledger", str(buyer), "import", str(bundle), "--policy", str(buyer / "policy.toml"),
        "--key", "b1", "--key", "b2", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["import"]["lookalikes"] == [w[len("WARNING: "):]
                                                           for w in warned], r.stdout
    assert [x for x in r.stderr.splitlines() if "can pass for another name" in x] == warned


def _named_batch_bundle(template: testkit.Template[str], root: Path,
                        name: str) -> tuple[Path, str, Path]:
    """A vendor ledger, a batch it recorded under ``name`` (its own software: no check of the
    name), and the batch's bundle."""

    def make(root: Path) -> tuple[Path, str, Path]:
        home = testkit.copy_template(template, root / "vendor")
        with pytest.MonkeyPatch.context() as m:
            m.setattr(record, "check_subject_name", lambda _name: None)
            code, out = run(home, "record", write_steps(root / "steps.jsonl"), "--env",
                            "cartpole@1", "--policy", "random", "--key", "vendor", "--name",
                            name)
        assert code == 0, out
        digest = out.strip().splitlines()[-1]
        bundle = root / "fake.tar.zst"
        assert run(home, "export", digest, "--out", bundle)[0] == 0
        return home, digest, bundle

    return testkit.as_own_user(root, make)


FAKE = "cartpole-bc@3 (sha256:" + "ab" * 32 + ")\u200b\u2060\ufeff"
"""A batch's name that imitates the subject an auditor was told to compare the OK line with,
a full digest, then invisible characters (rev32)."""


def test_a_name_that_imitates_a_digest_is_shown_escaped_in_the_ok_line(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """aud34 made the OK line name the subject with its full digest, and the docs tell the
    auditor to compare it with the one they were given; a name is the producer's, and on
    bc3060a one holding ``(sha256:<the digest meant>)`` printed that digest in the OK line
    before the real one, and zero-width characters reached the terminal unescaped. Now the
    parentheses of a name and the zero-width characters are escaped where a name is shown:
    the only ``(sha256:`` of the line is the subject's own."""
    home, digest, bundle = _named_batch_bundle(
        quickstart_template, tmp_path_factory.mktemp("fake-digest"), FAKE)
    assert verify_main([str(bundle), "--policy", str(home / "policy.toml")]) == 0
    line = capsys.readouterr().err.strip()
    assert line.count("(sha256:") == 1 and f"(sha256:{digest.removeprefix('sha256:')})" in line
    assert "\\u0028sha256:abab" in line and "\\u200b\\u2060\\ufeff" in line, line
    code, out = run(home, "verify", bundle, "--policy", home / "policy.toml")
    ok = [x for x in out.splitlines() if x.startswith("OK:")]
    assert code == 0 and len(ok) == 1 and ok[0].count("(sha256:") == 1, out
    assert "\\u0028sha256:abab" in ok[0] and shown(out) == [], out


LOOKALIKES = {
    # rev33 finding 2: rev32 escaped a name's ASCII parentheses and five zero-width characters;
    # a vendor's own software signs any text, and these showed unescaped in the OK line.
    "fullwidth": "cartpole-bc@3 \uff08sha256:" + "ab" * 32 + "\uff09\u2063\u00ad",
    "ornament": "cartpole-bc@3 \u2768sha256:" + "ab" * 32 + "\u2769\ufe0f\U000e0041\u3164",
    "small": "cartpole-bc@3\u00a0\ufe59sha256:" + "ab" * 32 + "\ufe5a\u180e\u2064\u115f",
}
"""Names whose parentheses are look-alikes (fullwidth, an ornament, the small form) and whose
tails are invisible (an invisible operator, a soft hyphen, a variation selector, a tag
character, Hangul fillers, a Mongolian separator)."""


@pytest.mark.parametrize("kind", sorted(LOOKALIKES))
def test_a_name_imitating_a_digest_with_lookalike_parentheses_is_escaped(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str], kind: str,
) -> None:
    """The OK line names the subject as ``(sha256:…)``; a name whose parentheses only look
    like those (or whose characters show as nothing) is shown escaped: the line's one
    ``sha256:`` is the subject's, and nothing of it is invisible."""
    home, digest, bundle = _named_batch_bundle(
        quickstart_template, tmp_path_factory.mktemp("lookalike"), LOOKALIKES[kind])
    assert verify_main([str(bundle), "--policy", str(home / "policy.toml")]) == 0
    code, out = run(home, "verify", bundle, "--policy", home / "policy.toml")
    lines = [capsys.readouterr().err.strip(), *(x for x in out.splitlines() if x.startswith("OK:"))]
    assert code == 0 and len(lines) == 2, out
    for line in lines:
        assert line.count("(sha256:") == 1 and f"(sha256:{digest.removeprefix('sha256:')})" in line
        assert line.isascii(), line  # each character of these names beyond ASCII is escaped
        assert "sha256:" + "ab" * 32 + "\\u" in line, line  # its look-alike ")" escaped


@pytest.mark.parametrize("kind", sorted(LOOKALIKES))
def test_show_escapes_a_signed_name_as_the_verifiers_do(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory,
    kind: str,
) -> None:
    """rev33's Left: ``show`` escaped a record's name with ``HIDDEN`` only, so its first line
    (``rollout-batch NAME``) printed look-alike parentheses and invisible characters as they
    are (and a dataset's ``name:`` line). Now as `Node.label` does (`verify.nodes.NAMED`; left37):
    ASCII, the one ``sha256:`` of the digest line the record's own."""
    home, digest, _bundle = _named_batch_bundle(
        quickstart_template, tmp_path_factory.mktemp("show-lookalike"), LOOKALIKES[kind])
    code, out = run(home, "show", digest)
    assert code == 0, out
    lines = out.splitlines()
    named = [x for x in lines if x.startswith("rollout-batch ")]
    assert len(named) == 1, out
    for line in named:
        assert line.isascii() and "sha256:" + "ab" * 32 + "\\u" in line, line
