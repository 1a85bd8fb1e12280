"""A dataset card's "Check it yourself" command names the dataset as one shell word (rev49
finding 8).

``trajledger card NAME@V --format hf`` writes ``Check it yourself: `trajledger verify
NAME@V```: the name is its signer's text for an imported dataset (the ledger refuses such
names for its own records only), and a card is written to be published and read by others,
who paste the command. ``x'; touch pwned; '`` ran ``touch pwned``. docs/SECURITY.md, "Review
of 2026-12-07, thirty-seventh round (rev49)".
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import testkit
from test_rev48_signed_steps import signed_names

NAME = "grid'; touch pwned; '"


def test_the_cards_command_names_the_dataset_as_one_word(
        quickstart_template: testkit.Template[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, made = signed_names(quickstart_template, tmp_path, monkeypatch, ((NAME, "1"),))
    card = run("card", made[NAME], "--format", "hf").stdout
    told = re.search(r"Check it yourself: `(trajledger verify [^`]*)`", card)
    assert told, card
    assert shlex.split(told.group(1)) == ["trajledger", "verify", f"{NAME}@1"], told.group(1)
    subprocess.run(["bash", "-c", f"printf %s {told.group(1)}"], cwd=tmp_path, check=True,
                   capture_output=True)
    assert not (tmp_path / "pwned").exists()
