"""``python -m verify BUNDLE --policy F``: verify an evidence bundle with only ``verify/``.

Scope: the third party's command line (argparse, so it runs from a copy of ``verify/`` in a
venv holding only ``cryptography`` and ``zstandard``). It opens the bundle
(`verify.bundle.BundleEvidence`), verifies the artifact and its lineage under the policy given
(`verify.bundle.verify_bundle`), with ``--files DIR`` checks a directory of the subject's files
against its manifest, and renders the report.

Output: the report on stdout (a text tree, or ``--json``); on stderr ``OK: <bundle>: N checks
passed`` or one ``FAIL: <bundle>: <reason>`` line per failure. Exit codes, as ``trajledger``:
0 ok; 1 verification failed or malformed evidence (a policy inside the bundle included); 2 usage
(your own ``--policy`` file invalid: not TOML or JSON, unknown settings); 3 operational (missing
or unreadable file, zstandard not installed); 4 internal bug.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .bundle import BundleEvidence, verify_bundle
from .errors import FormatError, ProvenanceError, VerificationError
from .nodes import short
from .policy import load_policy_file
from .report import HIDDEN

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_OPERATIONAL, EXIT_BUG = 0, 1, 2, 3, 4


class _Parser(argparse.ArgumentParser):
    """argparse, with "did you mean" for a misspelt option in any usage error (its options as
    added, the arguments as given: ``given``), in one line as `trajledger`'s (its control
    characters escaped: an argument is printed in it), exit 2."""

    given: Sequence[str] = ()

    def error(self, message: str) -> NoReturn:
        from .did_you_mean import suggestions  # only on a usage error

        options = tuple(o for action in self._actions for o in action.option_strings)
        said = (message + suggestions(self.given, options)).translate(HIDDEN)
        see = (" S" if said.endswith("?") else "; s") + f"ee '{self.prog} --help'"
        self.exit(2, f"{self.prog}: error: {said}{see}\n")


class _Version(argparse.Action):
    """``-V``: the installed trajledger's version, or that this is a copy of ``verify/``."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> NoReturn:
        from .version_line import print_version  # -V only

        print_version(parser.prog)
        parser.exit(0)


def _parser(given: Sequence[str]) -> argparse.ArgumentParser:
    p = _Parser(
        prog=f"python -m {__package__ or 'verify'}",
        description="Verify an evidence bundle exported by 'trajledger export' offline, under your "
        "trust policy (its log keys are the ones trusted). Nothing is remembered between runs.",
        epilog="Exit codes: 0 ok, 1 verification failed, 2 usage, 3 operational problem.",
    )
    p.given = given
    p.add_argument("bundle", type=Path, help="the bundle (.tar.zst)")
    p.add_argument("-V", "--version", nargs=0, action=_Version, help="show the version and exit")
    p.add_argument("--policy", required=True, type=Path,
                   help="your trust policy: TOML (key paths relative to it) or its JSON form")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--skip-data",
        action="store_true",
        help="do not re-hash data blobs: compare their sizes with the manifests only (the "
        "report says so); metadata, signatures and proofs are checked in full",
    )
    p.add_argument(
        "--known-checkpoint",
        type=Path, metavar="FILE",
        help="a checkpoint of the log you saw before: the bundle's must extend it (else: no "
        "rollback or fork is seen, as nothing is remembered)",
    )
    p.add_argument("--expect", metavar="DIGEST", help="the sha256:HEX of the checkpoint or "
                   "dataset you were given: exit 1 when the bundle is the evidence of another")
    p.add_argument(
        "--files",
        type=Path,
        metavar="DIR",
        help="a directory of the subject's files (the model): each file its manifest lists is "
        "found there by path and hashed, and named OK, differs or missing; a file it does not "
        "list is extra (exit 1 for the last three); symbolic links are not followed",
    )
    return p


def _fail(subject: str, message: str, code: int = EXIT_FAILED) -> int:
    """Print a ``FAIL:`` line per line of ``message``; return the exit ``code``."""
    for line in message.split("\n"):  # one line each, nothing in them may break or redraw it
        print(f"FAIL: {subject}: {line}".translate(HIDDEN), file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    """Verify the bundle named in ``args``; print the report; return the exit code."""
    subject = str(args.bundle)
    try:
        policy = load_policy_file(args.policy)
    except FormatError as e:  # the auditor's own file to fix, not evidence: usage (left35)
        return _fail(subject, str(e), EXIT_USAGE)
    try:
        known = args.known_checkpoint.read_bytes() if args.known_checkpoint else None
    except OSError as e:
        raise OSError(f"known checkpoint {args.known_checkpoint}: {e.strerror or e}") from e
    if known is not None:  # no signed checkpoint at all: the auditor's file to fix (left37)
        from .consistency import not_a_checkpoint
        if why := not_a_checkpoint(known):
            return _fail(subject, f"--known-checkpoint {args.known_checkpoint}: {why}", EXIT_USAGE)
    if not args.bundle.is_file():  # exit 3 as a missing file (docs/cli.md says why)
        raise OSError(f"bundle {args.bundle}: " + (
            "is a directory, want a .tar.zst bundle file" if args.bundle.is_dir() else
            "not a regular file: save it to a file" if args.bundle.exists() else "no such file"))
    with BundleEvidence.open(args.bundle) as evidence:
        report = verify_bundle(
            evidence, policy, data="size" if args.skip_data else "hash", known_checkpoint=known,
            files=args.files, declared=True,
        )
    if other := args.expect and args.expect != report.subject:  # another artifact (aud34 #1),
        from .expect import other_subject  # not a release of the one expected (out54)
        other = other_subject(report, args.expect)
    if args.json:  # ok false for another artifact too, as the exit code says (out37)
        from .report_json import dumps  # (to_json loads it): strict: a byte not UTF-8 as \xfd

        _out(dumps(report.to_json() | ({"ok": False} if other else {})))
    else:
        _out("\n".join(report.render()))
    n, failed = report.count()
    if other:
        return _fail(subject, other)
    if failed:
        return _fail(subject, f"{failed} of {n} checks failed\n" + "\n".join(report.failures()))
    # What was not checked is said where the verdict is read: data left out (``--no-data``, or
    # stripped by whoever handed the bundle over) like data compared by size only.
    omitted = len(evidence.index.omitted)
    how = (f" ({omitted} data blob(s) not in the bundle: their bytes not checked)" if omitted
           else "") + (" (data: sizes only, not re-hashed)" if args.skip_data else "")
    node = report.nodes.get(report.subject)  # named in full: is it the one meant? (aud34)
    what = node.label.replace(short(node.id), node.id) if node else report.subject
    print(f"OK: {subject}: {what}: {n} checks passed{how}".translate(HIDDEN), file=sys.stderr)
    return EXIT_OK


def _out(text: str) -> None:
    """The report on stdout: a reader gone (``| head``) ends it, and the verdict follows."""
    try:
        print(text, flush=True)
    except BrokenPipeError:  # (rev51's Left: exit 3 whatever the verdict)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code (argparse exits 2 on usage errors itself)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):  # started closed: /dev/null, so the report
        if getattr(sys, name) is None:  # is not printed on stdout, nor a file opened there
            os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
            setattr(sys, name, open(fd, "w", encoding="utf-8", closefd=False))  # noqa: SIM115
        stream = getattr(sys, name)  # a terminal that cannot show ✓ (Latin-1) gets \u2713,
        if isinstance(stream, io.TextIOWrapper):  # not a BUG
            stream.reconfigure(errors="backslashreplace")
    argv = sys.argv[1:] if argv is None else argv
    args = (parser := _parser(argv)).parse_args(argv)
    if args.expect is not None:  # a full digest, else a usage error (exit 2) before any work
        from .expect import expected_digest

        args.expect = expected_digest(args.expect, parser.error)
    try:
        return run(args)
    except (VerificationError, FormatError) as e:
        if args.json:  # still a report to parse (out44 finding 6)
            from .refused_report import failed_bundle
            _out(failed_bundle(args.bundle.name, str(e)))
        return _fail(str(args.bundle), str(e))
    except (ProvenanceError, OSError, MemoryError) as e:  # (the last: this machine's limit)
        return _fail(str(args.bundle), str(e) or "out of memory: nothing was decided",
                     EXIT_OPERATIONAL)
    except Exception as e:  # the last resort of a command line: report, never a bare traceback
        traceback.print_exc()
        print(f"BUG: {type(e).__name__}: {e}; please report it", file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
