"""The built-in evaluator imports the module ``check_env_module`` allowed, no other (rev49
finding 5).

``check_env_module`` reads a Gymnasium id's module as the part before its first colon (what
``--allow-env-module`` names); ``evaluate._spec`` imported the part before its last:
``allowed:x:ID`` passed the check as ``allowed`` and then imported ``allowed:x`` (a file
``allowed:x.py`` on the path). docs/SECURITY.md, "Review of 2026-12-07, thirty-seventh round
(rev49)".
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trajledger.runner.evaluate import _spec
from trajledger.runner.rollouts import RolloutError


def test_the_module_imported_is_the_one_the_check_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rev49allowed:x.py").write_text("import sys\nsys.rev49_ran = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RolloutError, match="cannot be made"):
        _spec("rev49allowed:x:CartPole-v1")
    assert not getattr(sys, "rev49_ran", False), "the module after the first colon was run"
    assert "rev49allowed:x" not in sys.modules


def test_an_id_with_two_colons_is_one_line_not_a_bug() -> None:
    """rev50 finding 7: ``eval --allow-env-module allowed --pass-return R`` of an imported
    suite whose id is ``allowed:x:ID`` (no `_spec` then) reached ``gymnasium.make``, whose
    ``MODULE:ID`` split raised ``ValueError: too many values to unpack``: ``BUG``, exit 4."""
    from trajledger.runner.rollouts import run_policy

    with pytest.raises(RolloutError, match="one ':' at most"):
        run_policy(None, "os:x:CartPole-v1", 1, 0, policy_version="sha256:" + "0" * 64)
