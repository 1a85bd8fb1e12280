"""One word a POSIX shell reads back as the text it stands for, and a terminal shows as it is.

Scope: `shell_word`: a path, a name or a digest put into a command a message tells the user to
run (``'trajledger approve NAME@V --key NAME'``, ``run 'chmod 600 PATH'``). A signed name is
its signer's text: it may hold ``'``, ``;``, ``$(...)`` or a line break, which a command built
by concatenation would hand to the user's shell as code (rev48; rev47's Left). Loaded on use
(by the lines that print such a command), as ``ledger.errors`` re-exports it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from itertools import groupby
from pathlib import Path

__all__ = ["every_shell", "shell_word"]


def shell_word(text: str | Path, shown: Mapping[int, str] | None = None) -> str:
    """``text`` as one word a POSIX shell reads back as that text: as it is when it needs no
    quoting, else in single quotes (`shlex.quote`: a path with spaces was pasted as two words,
    out39's Left; a name holding ``'; rm -rf ~`` is one word); and when a terminal would not
    show it as it is, by ``shown`` (by default `verify.nodes.HIDDEN`, imported on use, as
    ``ledger.errors``, which nearly every module imports, re-exports this one and a reader's
    worker must not load the verifier's modules and ``cryptography`` through it: control
    characters, NEL and the other C1 controls, line separators, bidirectional controls;
    `verify.nodes.NAMED` for a signed name: parentheses and look-alikes too), or it holds a
    byte that is not UTF-8 (``os.fsdecode``'s surrogate for it), in pieces: printable ASCII
    quoted as above, each run of other bytes of its UTF-8 (or the file name's own byte) as
    ``$'\\xHH…'``, which the shell reads back as those bytes (bash, zsh, ksh, POSIX.1-2024). A
    ``$'...'`` holds nothing but ``\\xHH``: a shell without it (dash, Debian's ``sh``) reads a
    wrong word, never code (``$'\\x01\\'; touch x; #'`` ran ``touch x`` there: rev49 finding 2).
    The message shows ``\\xfd`` for a byte that is not UTF-8, as every message and ``--json`` do
    (docs/cli.md, "Names that are not UTF-8"). A path (a `Path`) that starts with ``-`` is
    written ``./-…``, the same file, which no command reads as an option (``policy set
    -p.toml``: ``No such option '-p'``; rev51 finding 4)."""
    if shown is None:
        from .nodes import HIDDEN

        shown = HIDDEN
    text = f"./{text}" if isinstance(text, Path) and str(text).startswith("-") else str(text)
    if _plain(text, shown):
        return _quoted(text)
    try:
        raw = os.fsencode(text)  # each surrogate of a byte back to that byte
    except UnicodeEncodeError:  # a lone surrogate no file name holds: shown as it is
        raw = text.encode("utf-8", "backslashreplace")
    runs = groupby(raw, lambda b: 32 <= b < 127 and chr(b).translate(shown) == chr(b))
    return "".join(_quoted(bytes(run).decode()) if plain else
                   "$'" + "".join(f"\\x{b:02x}" for b in run) + "'" for plain, run in runs)


def every_shell(text: str, shown: Mapping[int, str]) -> bool:
    """Whether every common shell (bash, dash, zsh, fish) reads `shell_word` of ``text`` back
    as ``text``, and a command as an argument: no ``$'...'`` piece (dash reads another word,
    fish refuses the line) and no leading ``-`` (an option: ``--purpose=eval@1``). A step that
    names a record by a name that is not is printed with its digest (rev50 finding 4)."""
    return not text.startswith("-") and _plain(text, shown)


def _plain(text: str, shown: Mapping[int, str]) -> bool:
    """Whether ``text`` is shown as it is (``shown`` changes none of it) and holds no byte that
    is not UTF-8 (``os.fsdecode``'s surrogates): one quoted word, no ``$'...'`` piece."""
    return text.translate(shown) == text and not any(0xD800 <= ord(c) < 0xE000 for c in text)


def _quoted(text: str) -> str:
    """``text`` (printable) quoted as `shlex.quote` does, but each backslash outside the
    quotes (``\\\\``): fish reads ``\\'`` inside single quotes as a quote, so ``'a\\'"'"'"; touch
    x; #'`` ran ``touch x`` there (rev50 finding 3); and a word starting ``=`` quoted, which
    zsh reads as a command's path (``=sh``: ``/usr/bin/sh``)."""
    import shlex

    words = [shlex.quote(part) if part else "" for part in text.split("\\")]
    words[0] = f"'{words[0]}'" if words[0].startswith("=") else words[0]
    return "\\\\".join(words) or "''"
