"""The README runs as written: its tour, and its first two commands as CI runs them.

Which blocks are the tour: every fenced ```` ```sh ```` block whose opening fence comes right
after a line ``<!-- tour -->`` (the comment does not render on GitHub). The test also checks that
every ``sh`` block under the ``## A tour`` heading carries the mark, so a new step cannot be left
out of the run by forgetting it, and that no marked block lies outside that section.

The tour test concatenates the marked blocks, in README order, into one bash script run with
``set -euo pipefail`` in an empty temporary directory: a fresh ``HOME`` and
``TRAJLEDGER_STATE_DIR``; ``TRAJLEDGER_HOME``, ``TRAJLEDGER_PASSPHRASE`` (the tour sets it itself),
``TRAJLEDGER_REQUIRE_PIN``, ``XDG_STATE_HOME`` and ``NO_COLOR`` unset, no standard input, and the
directory of ``sys.executable`` first on ``PATH`` (the ``trajledger`` console script and ``python``
of this environment). It must exit 0. (That is the environment tests/docs/test_doc_blocks.py gives
a document; the docs harness leaves the tour's blocks to this test rather than run them a second
time.) Steps whose point is to fail check their own exit code in the README
(``code=0; cmd || code=$?`` then ``test "$code" -eq 1``), so a refusal that stopped happening fails
the run. The script runs with ``-x``: on failure, the assertion message ends with the trace of the
failing command. Its ``trajledger`` commands run as the docs harness runs them (a fork server and
its client first on ``PATH``; ``TRAJLEDGER_DOCS_NO_ZYGOTE=1``: real processes): see
tests/docs/test_doc_blocks.py and tests/zygote.py.

The CI test parses README's "Start" section (its first two ``sh`` blocks) and ``.ci/run`` (the
lines after its ``# README, command 1`` and ``# README, command 2`` comments) and requires the
same commands: the venv steps aside (CI makes its venv in a scratch directory), and the
quickstart run in that scratch directory (``(cd "$work" && ...)``). The first command installs
no extra; CI checks between the two that it left no test-only package installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
MARK = "<!-- tour -->"
FENCE = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a ``## `` line), up to the next ``## `` heading."""
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def sh_blocks(text: str) -> list[tuple[bool, str]]:
    """Every ``sh`` block of ``text``: (marked as tour, its body)."""
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        out.append((before.strip() == MARK, m.group(1)))
    return out


def tour_script(text: str) -> str:
    """The tour as one bash script."""
    blocks = sh_blocks(text)
    marked = [body for is_tour, body in blocks if is_tour]
    in_section = sh_blocks(section(text, "## A tour"))
    unmarked = [body.splitlines()[0] for is_tour, body in in_section if not is_tour]
    assert not unmarked, f"sh blocks under '## A tour' without {MARK}: {unmarked}"
    assert len(marked) == len(in_section), f"{MARK} blocks outside '## A tour'"
    assert len(marked) >= 8, f"only {len(marked)} tour blocks found"
    return "set -euo pipefail\n" + "\n".join(marked)


@pytest.mark.slow  # the tour as a bash script
def test_the_tour_runs_as_written(tmp_path: Path, docs_zygote: Any) -> None:
    script = tmp_path / "tour.sh"
    script.write_text(tour_script(README.read_text("utf-8")))
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRAJLEDGER_HOME", "TRAJLEDGER_PASSPHRASE", "TRAJLEDGER_REQUIRE_PIN",
                        "XDG_STATE_HOME", "NO_COLOR")}  # fmt: skip
    env["HOME"] = str(tmp_path / "home")
    env["TRAJLEDGER_STATE_DIR"] = str(tmp_path / "state")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    if docs_zygote is not None:
        env["PATH"] = docs_zygote.path(env["PATH"])
    done = subprocess.run(
        ["bash", "-x", str(script)],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard, not a timing assertion
    )
    if docs_zygote is not None:
        docs_zygote.check()
    assert done.returncode == 0, (
        f"the README tour exited {done.returncode}\n--- stdout (end)\n{done.stdout[-3000:]}"
        f"\n--- stderr (end)\n{done.stderr[-6000:]}"
    )
    # What the tour says it makes, it made.
    made = ["steps.jsonl", "policy.toml", "lineage.html", "cartpole-train-2.tar.zst",
            "vendor.pub", "buyer/policy.toml", "buyer/.trajledger/log/checkpoint"]  # fmt: skip
    assert [m for m in made if not (work / m).is_file()] == []


def test_the_tour_blocks_are_found() -> None:
    """The extraction itself: marks, order, and the section rule (on a small document)."""
    doc = (
        "## Start\n\n```sh\necho start\n```\n\n## A tour\n\n"
        + "".join(f"{MARK}\n```sh\necho {i}\n```\n\n" for i in range(8))
        + "## After\n\n```sh\necho not run\n```\n"
    )
    assert tour_script(doc) == "set -euo pipefail\n" + "\n".join(f"echo {i}\n" for i in range(8))
    forgotten = doc.replace(f"{MARK}\n```sh\necho 3", "```sh\necho 3")
    try:
        tour_script(forgotten)
    except AssertionError as e:
        assert "without <!-- tour -->: ['echo 3']" in str(e)
    else:
        raise AssertionError("an unmarked block in the tour section was not reported")


def ci_section(lines: list[str], marker: str) -> list[str]:
    """The commands of ``.ci/run`` after the comment starting ``marker``, up to the next
    comment or blank line; ``phase NAME`` lines only print the time a phase took."""
    start = next(i for i, line in enumerate(lines) if line.startswith(marker))
    out = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith("#"):
            break
        if not line.startswith("phase "):
            out.append(line.strip())
    return out


def test_the_first_two_commands_are_the_ones_ci_runs() -> None:
    start = section(README.read_text("utf-8"), "## Start")
    blocks = [body.strip() for _, body in sh_blocks(start)]
    assert len(blocks) >= 2, blocks
    install, tests = blocks[0], blocks[1]
    assert "\n" not in install and "\n" not in tests, "each of the two commands is one line"
    steps = install.split(" && ")
    assert steps[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"], steps

    lines = CI_RUN.read_text("utf-8").splitlines()
    assert 'python3 -m venv "$work/venv"' in lines
    assert '. "$work/venv/bin/activate"' in lines
    ci_install = ci_section(lines, "# README, command 1")
    scratch = re.compile(r'^\(cd "\$work" && (.*)\)$')
    unwrapped = [scratch.sub(r"\1", c) for c in ci_install]
    assert unwrapped == steps[2:], (ci_install, steps)
    assert any(scratch.match(c) for c in ci_install), "CI runs the quickstart in a scratch dir"
    assert ci_section(lines, "# README, command 2") == tests.split(" && ")
    assert "[test]" not in install, "the first command installs only what running needs"
    assert tests.startswith("pip install -e '.[test]' && "), "the second adds the test extra"
    assert ci_section(lines, "# Command 1 installed no test-only package") == [
        "python .ci/runtime_only.py"]
