"""``python -m verify``'s usage errors and ``-V`` (the installed package; a copy of ``verify/``
alone is run by tests/e2e/test_third_party_verify.py)."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from trajledger.verify.__main__ import main


@pytest.mark.parametrize(
    ("argv", "tail"),
    [
        (["b.tar.zst", "--polcy", "p.toml"], "for --polcy, did you mean --policy?"),
        (["b.tar.zst", "--policy", "p.toml", "--jsn"], "unrecognized arguments: --jsn; for "
         "--jsn, did you mean --json?"),
        (["b.tar.zst", "--policy=p", "--fils=d"], "for --fils, did you mean --files?"),
        (["b.tar.zst", "--policy", "p.toml", "--zzz"], "unrecognized arguments: --zzz"),
    ],
)
def test_a_misspelt_option_gets_the_close_one(
    argv: list[str], tail: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    see = (" S" if tail.endswith("?") else "; s") + "ee 'python -m trajledger.verify --help'"
    assert capsys.readouterr().err.endswith(f"{tail}{see}\n")


@pytest.mark.parametrize("argv", [[], ["b.tar.zst"], ["b", "--policy", "p", "--bad\x1b[2J\nOK: x"]])
def test_a_usage_error_is_one_line_its_arguments_escaped(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """One line, as `trajledger`'s (argparse printed the usage first: four lines); an argument
    that holds a terminal's escape or a line break cannot redraw the screen or add a line."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err, err
    assert err.startswith("python -m trajledger.verify: error: ")


def test_an_abbreviation_is_not_a_misspelling(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["b.tar.zst", "--polic", "p.toml", "--jsn"])
    assert "for --polic" not in capsys.readouterr().err


def test_dash_v_names_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["-V"])
    assert e.value.code == 0
    assert capsys.readouterr().out.endswith(f"(trajledger {version('trajledger')})\n")


def test_the_help_says_what_is_trusted_and_that_nothing_is_remembered(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user who knows `trajledger verify` (which holds a floor per log in their state) must
    not believe that this verifier refuses a rollback of a log they saw: it keeps nothing, and
    it trusts the log keys of the policy given (review rev25; the help said neither)."""
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "under your trust policy (its log keys are the ones trusted). Nothing is remembered " \
        "between runs." in out
    assert "the bundle's must extend it (else: no rollback or fork is seen, as nothing is " \
        "remembered)" in out
