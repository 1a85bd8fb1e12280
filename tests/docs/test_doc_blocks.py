"""Every example of the docs runs as written: README.md, docs/*.md, keys/README.md and
schemas/*.md.

What runs. Each fenced block tagged ``sh``, ``bash``, ``shell``, ``console`` or ``python``, in
document order, in ONE bash session per document (blocks build on each other, as a reader runs
them: shell variables, ``export`` and ``cd`` carry over), started in an empty temporary
directory with a fresh ``HOME`` and ``TRAJLEDGER_STATE_DIR``, no ``TRAJLEDGER_HOME`` or
``TRAJLEDGER_PASSPHRASE`` (a document that needs a passphrase sets it in a block it shows), no
standard input, and the directory of ``sys.executable`` first on ``PATH`` (the ``trajledger``
command and ``python`` of this checkout's environment).

- ``sh``/``bash``/``shell``: the body runs under ``set -e -o pipefail``.
- ``console``: a transcript. Each ``$ COMMAND`` line (with ``\\`` continuations) runs in the
  session; the lines under it are what it printed. A command whose shown output has a
  ``FAIL:`` or ``Error:`` line must exit non-zero, any other must exit 0; and every shown line
  that starts with ``OK:``, ``FAIL:``, ``WARNING:``, ``Error:`` or ``sha256:`` must match a line
  it printed (stdout or stderr), where ``…`` stands for any text and a run of 8 or more hex
  digits for any hex digits (key ids and envelope digests differ from run to run).
- ``python``: a block whose first line is a comment naming a file (``# make_cartpole.py: ...``)
  is that file: it is written to the current directory, as the reader saves it, and run only
  where the document runs it. A ``toml`` block whose first line is such a comment
  (``# card.toml``) is written the same way. Any other ``python`` block runs as a script in the
  session's current directory.

What does not run, visibly. A block right after the line
``<!-- docs-harness: skip (REASON) -->`` is not run; REASON is required and shown. Output and
formats are fenced ``text``, ``toml``, ``json`` (or untagged) and are not runnable.
``test_skipped_blocks_are_listed`` prints every skipped block with its reason under "docs
harness: skipped blocks" at the end of the run, so a skip cannot hide. README's tour blocks (after
a ``<!-- tour -->`` line) are run by tests/e2e/test_readme_tour.py, in this environment, and
listed here as skipped.

A failing block fails its document's test with the document, the block's line, the command that
failed (bash's ``ERR`` trap) and the end of its output.

How ``trajledger`` runs (tests/zygote.py; the README tour runs the same way). A fresh process
per command spends most of its CPU on the interpreter's start and imports, so each command runs
in a fork of a server that has imported the command line and the libraries commands load (the
``docs_zygote`` fixture: one server per session, an xdist worker). The ``trajledger`` found
first on the session's ``PATH`` is a small client that hands the server its arguments, working
directory, environment, umask and standard streams; the fork becomes the process the console
script would have been (same output, exit status, ``isatty`` answers, environment) and the
client exits with its status. ``python -m trajledger``, ``python -c`` and every other program run
as real processes. ``trajledger quickstart DIR``, with no other argument or option, is served
from a template built for real once per session (a copy of its ledger and user state to ``DIR``,
its output and exit status replayed) when nothing would differ; otherwise it runs for real
(`zygote.quickstart_template` says when). ``TRAJLEDGER_DOCS_NO_ZYGOTE=1`` in the test run's
environment runs every command as a real process, as a reader's shell does.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "keys" / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "schemas").glob("*.md"),
    ]
)
RUNNABLE = {"sh": "sh", "bash": "sh", "shell": "sh", "console": "console", "python": "python"}
SAVABLE = {"python", "toml"}
FENCE = re.compile(r"^(?P<indent>[ ]{0,3})(?P<fence>```+)(?P<tag>[^\s`]*)[^\n`]*$")
SKIP = re.compile(r"^<!-- docs-harness: skip \((?P<reason>[^)]+(?:\([^)]*\)[^)]*)*)\) -->$")
MARK = re.compile(r"^<!-- docs-harness:")
TOUR = "<!-- tour -->"
TOUR_SKIP = "the README tour: tests/e2e/test_readme_tour.py runs the tour's blocks as one script"
"""README's tour blocks (each after a ``<!-- tour -->`` line) run once, in the tour's test (under
``set -euo pipefail``, in the environment this harness gives a document), not here again."""
FILE_COMMENT = re.compile(r"^# (?P<name>[A-Za-z0-9_.-]+\.(?:py|toml))(?::.*)?$")
SHOWN = re.compile(r"^(OK:|FAIL:|WARNING:|Error:|sha256:)")
HEX = re.compile(r"[0-9a-f]{8,}")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its tag, its body, and why it is skipped (if it is)."""

    doc: Path
    line: int  # 1-based line of the opening fence
    tag: str
    body: str
    skip: str | None

    @property
    def where(self) -> str:
        return f"{doc_id(self.doc)}:{self.line}"

    @property
    def saved_as(self) -> str | None:
        """The file name a savable block's first line gives, else None."""
        first = self.body.split("\n", 1)[0]
        m = FILE_COMMENT.match(first)
        return m.group("name") if m and self.tag in SAVABLE else None


def blocks(doc: Path, text: str | None = None) -> list[Block]:
    """Every fenced block of ``doc`` (or of ``text``, read as that document)."""
    lines = (doc.read_text("utf-8") if text is None else text).split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        close = re.compile(rf"^[ ]{{0,3}}{m.group('fence')}`*\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        indent = len(m.group("indent"))
        body = "\n".join(ln[indent:] if ln[:indent].isspace() else ln for ln in lines[i + 1 : j])
        prev = lines[i - 1].strip() if i else ""
        skip = None
        if MARK.match(prev):
            sm = SKIP.match(prev)
            want = "<!-- docs-harness: skip (REASON) -->"
            assert sm, f"{doc}:{i}: malformed mark {prev!r}: want {want}"
            skip = sm.group("reason")
        elif prev == TOUR:
            skip = TOUR_SKIP
        out.append(Block(doc, i + 1, m.group("tag").lower(), body + "\n", skip))
        i = j + 1
    return out


def runnable(doc: Path) -> list[Block]:
    return [b for b in blocks(doc) if b.tag in RUNNABLE or b.saved_as]


def console_commands(body: str) -> list[tuple[str, list[str]]]:
    """A transcript's commands, each with the lines shown under it."""
    cmds: list[tuple[str, list[str]]] = []
    lines = body.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            cmd = line[2:]
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd += "\n" + lines[i]
            cmds.append((cmd, []))
        else:
            assert cmds, f"transcript output before any '$ ' command: {line!r}"
            cmds[-1][1].append(line)
        i += 1
    return cmds


def expects_failure(shown: list[str]) -> bool:
    return any(s.startswith(("FAIL:", "Error:")) for s in shown)


def shown_pattern(line: str) -> re.Pattern[str]:
    """A shown output line as a pattern: ``…`` is any text, 8+ hex digits any hex digits."""
    parts = []
    for piece in re.split(r"(…|[0-9a-f]{8,})", line.rstrip()):
        if piece == "…":
            parts.append(".*")
        elif HEX.fullmatch(piece):
            parts.append("[0-9a-f]+")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts) + r"\s*")


def script(doc: Path, work: Path) -> tuple[str, dict[str, tuple[Block, str, list[str]]]]:
    """The document as one bash script, and what each transcript command must show.

    Files the script needs (python blocks, saved files) go under ``work`` (outside the
    document's directory). Each block starts by announcing itself on stderr, so a failure is
    placed by the last announcement; bash's ERR trap names the failing command.
    """
    trap = "trap 'echo \"@@docs-harness command failed (exit $?): $BASH_COMMAND\" >&2' ERR"
    out = ["set -o pipefail", "__status() { return \"$1\"; }", trap]
    checks: dict[str, tuple[Block, str, list[str]]] = {}
    for n, b in enumerate(runnable(doc)):
        if b.skip is not None:
            continue
        out.append(f"echo '@@docs-harness block {b.where}' >&2")
        if b.saved_as:
            src = work / f"block-{n}.{b.saved_as.rsplit('.', 1)[1]}"
            src.write_text(b.body, "utf-8")
            out.append(f"cp {shlex.quote(str(src))} {shlex.quote(b.saved_as)}")
        elif b.tag == "python":
            src = work / f"block-{n}.py"
            src.write_text(b.body, "utf-8")
            out.append(f"set -e; python {shlex.quote(str(src))}; set +e")
        elif RUNNABLE[b.tag] == "sh":
            out.append(f"set -e\n{b.body}set +e")
        else:
            for k, (cmd, shown) in enumerate(console_commands(b.body)):
                key = f"{n}-{k}"
                cap = shlex.quote(str(work / f"out-{key}.txt"))
                want = "!= 0" if expects_failure(shown) else "== 0"
                out.append(
                    f"echo '@@docs-harness command {key}' >&2\n"
                    f"trap - ERR\n{{ {cmd}\n}} > {cap} 2>&1; __rc=$?\n{trap}\n"
                    f"if ! (( __rc {want} )); then cat {cap} >&2; echo \"@@docs-harness command"
                    f" exited $__rc, want {want}: \"{shlex.quote(cmd)} >&2; exit 1; fi\n"
                    "__status $__rc"
                )
                checks[key] = (b, cmd, shown)
    return "\n".join(out) + "\n", checks


def doc_id(doc: Path) -> str:
    """The document's path from the checkout's root (as given, for one outside it)."""
    return str(doc.relative_to(ROOT)) if doc.is_relative_to(ROOT) else str(doc)


@pytest.mark.slow  # one bash session per document, a command line each
@pytest.mark.parametrize("doc", [d for d in DOCS if any(b.skip is None for b in runnable(d))],
                         ids=doc_id)
def test_doc_runs_as_written(doc: Path, tmp_path: Path, docs_zygote: Any) -> None:
    harness = tmp_path / "harness"
    harness.mkdir()
    text, checks = script(doc, harness)
    (harness / "doc.sh").write_text(text, "utf-8")
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRAJLEDGER_HOME", "TRAJLEDGER_PASSPHRASE", "TRAJLEDGER_REQUIRE_PIN",
                        "XDG_STATE_HOME", "NO_COLOR")}  # fmt: skip
    env.update(HOME=str(home), TRAJLEDGER_STATE_DIR=str(tmp_path / "state"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))  # fmt: skip
    if docs_zygote is not None:
        env["PATH"] = docs_zygote.path(env["PATH"])
    done = subprocess.run(
        ["bash", str(harness / "doc.sh")], cwd=work, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True,
        timeout=900,  # a hang guard, not a timing assertion
    )  # fmt: skip
    if docs_zygote is not None:
        docs_zygote.check()
    if done.returncode != 0:
        placed = [ln for ln in done.stderr.splitlines() if ln.startswith("@@docs-harness block")]
        failed = [ln for ln in done.stderr.splitlines() if "@@docs-harness command " in ln
                  and ("failed" in ln or "exited" in ln)]  # fmt: skip
        tail = done.stderr.rsplit("@@docs-harness block", 1)[-1][-5000:]
        pytest.fail(
            f"{placed[-1].split()[-1] if placed else doc_id(doc)}: a block of {doc_id(doc)} "
            f"failed (exit {done.returncode})\n{failed[-1] if failed else ''}\n"
            f"--- stdout (end)\n{done.stdout[-2000:]}\n--- stderr of the block (end)\n{tail}",
            pytrace=False,
        )
    problems = []
    for key, (b, cmd, shown) in checks.items():
        got = (harness / f"out-{key}.txt").read_text("utf-8", "replace").splitlines()
        for line in shown:
            if SHOWN.match(line) and not any(shown_pattern(line).fullmatch(g) for g in got):
                problems.append(f"{b.where}: $ {cmd}\n  shown: {line}\n  got:   "
                                + "\n         ".join(got[-12:]))  # fmt: skip
    assert not problems, "transcripts whose output differs:\n" + "\n".join(problems)


def test_skipped_blocks_are_listed(record_property: pytest.RecordProperty) -> None:
    """Every runnable block the docs mark as not run, with its reason, printed at the end."""
    skipped = [b for d in DOCS for b in runnable(d) if b.skip is not None]
    for b in skipped:
        record_property("summary:docs harness: skipped blocks", f"{b.where} [{b.tag}]: {b.skip}")
    for b in skipped:
        assert len(b.skip or "") >= 10, f"{b.where}: say why the block cannot run here"


def test_the_harness_reads_blocks_and_transcripts(tmp_path: Path) -> None:
    """The extraction itself, on a small document."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# t\n\n```sh\necho one\n```\n\n<!-- docs-harness: skip (needs a network (here)) -->\n"
        "```sh\ncurl x\n```\n\n```text\nout\n```\n\n```python\n# make.py: a file\nprint(1)\n```\n"
        "\n```console\n$ trajledger x \\\n    --y\nFAIL: x: no\n$ echo $?\n1\n```\n",
        "utf-8",
    )
    got = runnable(doc)
    assert [(b.line, b.tag, b.skip, b.saved_as) for b in got] == [
        (3, "sh", None, None),
        (8, "sh", "needs a network (here)", None),
        (16, "python", None, "make.py"),
        (21, "console", None, None),
    ]
    assert console_commands(got[3].body) == [
        ("trajledger x \\\n    --y", ["FAIL: x: no"]), ("echo $?", ["1"])]
    assert expects_failure(["FAIL: x: no"]) and not expects_failure(["1"])
    pat = shown_pattern("OK: batch sha256:c42870e8… at index 3")
    assert pat.fullmatch("OK: batch sha256:0123456789abcdef at index 3")
    assert not pat.fullmatch("OK: batch sha256:0123456789abcdef at index 4")
    bad = tmp_path / "bad.md"
    bad.write_text("<!-- docs-harness: skip -->\n```sh\necho\n```\n", "utf-8")
    with pytest.raises(AssertionError, match="malformed mark"):
        blocks(bad)


def test_a_failing_block_names_its_line_and_command(tmp_path: Path) -> None:
    """A failure is placed: the block's line and the command that failed."""
    doc = tmp_path / "doc.md"
    doc.write_text("```sh\necho ok\n```\n\n```sh\ntrue\nfalse && true\nls /nonexistent-dir\n```\n")
    text, _ = script(doc, tmp_path)
    done = subprocess.run(["bash", "-c", text], cwd=tmp_path, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    assert done.returncode != 0
    assert f"@@docs-harness block {doc}:5\n" in done.stderr
    assert "command failed (exit 2): ls /nonexistent-dir" in done.stderr
