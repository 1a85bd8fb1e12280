"""What every trajledger command shares: exit codes, output conventions, progress, prompts.

Exit codes (DESIGN §8): 0 ok; 1 verification failed or data refused (and malformed evidence);
2 usage (click); 3 operational (missing file, I/O, unknown key, no ledger); 4 internal bug.
Results go to stdout (``--json`` is stable); stderr gets ``OK: <subject>`` or
``FAIL: <subject>: <message>``, one line per problem. Expected errors never print a traceback.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from trajledger._signals import STOPPING, Terminated, forget_appends, stopped_line
from trajledger.verify.errors import FormatError, ProvenanceError, VerificationError

from .config import DEFAULT_HOME, ledger_path
from .errors import (
    LedgerError,
    OptionValueError,
    PolicyFileError,
    disk_error,
    library_os_error,
    next_step,
    shell_word,
)

__all__ = [
    "EXIT_BUG",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_OPERATIONAL",
    "EXIT_USAGE",
    "JSON_OPTION",
    "MANAGED",
    "Context",
    "Group",
    "OneLineUsageError",
    "bundle_file",
    "emit_json",
    "emit_result",
    "fail",
    "is_terminal",
    "loading",
    "not_a_bundle",
    "ok",
    "one_line",
    "pass_ctx",
    "progress",
    "progress_to",
    "recorded_json",
    "refuse_outputs_in",
    "style",
    "verdict_follows",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_OPERATIONAL, EXIT_BUG = 0, 1, 2, 3, 4
HOME_ENV = "TRAJLEDGER_HOME"


@dataclass
class Context:
    """Global options, passed to every command."""

    home: Path
    verbose: bool = False
    quiet: bool = False
    opener: Callable[..., Any] | None = None
    """Opens the ledger: the public API's ``Ledger.open`` (the runner passes it), so commands
    call the same methods a Python user does."""
    found: bool = False
    """``home`` was found by walking up from the current directory (not given)."""

    def ledger(self) -> Any:
        """Open the ledger at ``home`` (raises LedgerError when there is none); first refuse
        an output path of the command inside the ledger's own files (`refuse_outputs_in`)."""
        refuse_outputs_in(self.home)
        if self.opener is None:
            from .home import LedgerHome

            ledger = LedgerHome.open(self.home, passphrase=ask_passphrase)
        else:
            ledger = self.opener(self.home, passphrase=ask_passphrase)
        quiet = self.quiet
        ledger.progress = lambda total, label: progress(total, label, quiet=quiet)
        ledger.own_process = True
        return ledger

    def keystore(self) -> Any:
        """The key store of ``home``: the ledger's (with its settings), or, before ``init``, a
        plain key directory."""
        refuse_outputs_in(self.home)
        from .keys import KeyStore

        if (self.home / "ledger.toml").exists():
            return self.ledger().keys
        return KeyStore(self.home / "keys", passphrase=ask_passphrase)


pass_ctx = click.make_pass_decorator(Context)

if TYPE_CHECKING:  # click's ParamType is generic for type checkers (and at run time only lately)
    _StrParam = click.ParamType[str]
    _AnyParam = click.ParamType[Any]
else:
    _StrParam = _AnyParam = click.ParamType


class Duration(_StrParam):
    """A duration (``30d``, ``12h``, ``90m``, ``2w`` or seconds): a bad one is a usage error."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Check the value parses; keep its text (the library parses it again)."""
        from trajledger.verify.errors import FormatError
        from trajledger.verify.policy import parse_duration

        try:
            parse_duration(value)
        except FormatError:
            self.fail(f"{value!r} is not a duration such as '30d', '12h' or seconds", param, ctx)
        return str(value)


class KeyName(_StrParam):
    """A key name that is a safe file name: a bad one is a usage error."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Check the name."""
        from .errors import KeyError_
        from .keys import check_key_name

        try:
            return check_key_name(str(value))
        except KeyError_ as e:
            self.fail(str(e).removeprefix("key name "), param, ctx)


class RecordName(_StrParam):
    """A new record's NAME or VERSION, or a new log's origin (`names.check_name`,
    `names.check_origin`): one off the grammar is a usage error (exit 2) saying the grammar,
    before the ledger is opened or anything is signed."""

    def __init__(self, kind: str = "name") -> None:
        """A name type; ``kind`` ``version`` (at most `names.VERSION_MAX` long) or ``origin``."""
        self.name = kind

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Check the value against the grammar."""
        from .names import NAME_MAX, VERSION_MAX, check_name, check_origin

        try:
            if self.name == "origin":
                return check_origin(str(value))
            return check_name(str(value), self.name,
                              VERSION_MAX if self.name == "version" else NAME_MAX)
        except FormatError as e:
            self.fail(str(e), param, ctx)


MANAGED = ("ledger.toml", "log", "log-key", "keys", "objects", "index", "tmp")
"""What a ledger directory holds of its own (beside files a user keeps there: a policy.toml)."""


def refuse_outputs_in(home: Path) -> None:
    """Refuse, as a usage error, an output path (`OutPath`) of the running command that names
    one of the ledger's own files or a path under its own directories (`MANAGED`): ``export
    --out demo/log/checkpoint`` wrote the bundle over the log's signed checkpoint, and the
    ledger no longer opened.

    Raises:
        click.UsageError: the option and value, and where to write instead.
        LedgerError: ``home`` itself is refused first (`config.ledger_path`: a loop of
            symbolic links, which `Path.resolve` raised as a bug; not UTF-8).
    """
    ledger_path(home)
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    own = [(home / name).resolve() for name in MANAGED]
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if not isinstance(param.type, OutPath) or not isinstance(value, str | Path):
            continue
        if "://" in str(value):
            continue
        try:
            out = Path(value).expanduser().resolve()
        except (RuntimeError, OSError):  # (ELOOP: RuntimeError before Python 3.13)
            raise click.UsageError(f"{param.opts[0]} {value}: goes round a loop of symbolic "
                                   "links: write elsewhere", ctx) from None
        if any(out == d or d in out.parents for d in own):
            raise click.UsageError(
                f"{param.opts[0]} {value}: inside the ledger's own files ({home}: "
                f"{', '.join(MANAGED)}); writing there would break the ledger: write it "
                "elsewhere", ctx)


class OutPath(_AnyParam):
    """A file or directory to write: its parent directory must exist (nothing is created on a
    mistyped path). With ``uri``, a URI (``s3://``) passes through as given (a ``str``);
    otherwise the value is a `Path`."""

    name = "path"

    def __init__(self, *, uri: bool = False, directory: bool = False) -> None:
        """A path type; ``uri`` also accepts URIs; ``directory``: a directory to make or fill
        (``train --output``), not a file."""
        self.uri, self.directory = uri, directory

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Check the parent directory exists (and that a ``directory`` is not a file)."""
        text = os.fspath(value)
        if self.uri and "://" in text:
            return text
        path = Path(text).expanduser()
        if self.directory and path.exists() and not path.is_dir():
            self.fail(f"{text}: is a file, want a directory", param, ctx)
        try:  # a device, FIFO or socket (or a link to one: /dev/stdout) would be replaced
            mode = 0 if self.directory else path.stat().st_mode
            link = "" if self.directory or not path.is_symlink() else os.readlink(path)
        except OSError:
            mode, link = 0, ""
        from .fs import special_kind

        special = special_kind(mode)
        if special is None and link.startswith("/proc/"):  # /dev/stdout to a file: the link
            special = f"a link to {link}"
        if special is not None:
            self.fail(f"{text}: is {special}, not a file: the output is written beside it and "
                      "renamed into place, which would replace it; give the path of a file",
                      param, ctx)
        if not path.absolute().parent.is_dir():
            self.fail(
                f"{text}: directory {path.absolute().parent} does not exist; create it first",
                param,
                ctx,
            )
        return text if self.uri else path


class VKey(_StrParam):
    """A verifier key (``<name>+<8 hex key ID>+<base64 key>``): a malformed one is a usage
    error (exit 2) naming what is wrong, before the command opens anything."""

    name = "vkey"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Parse the key; the value stays the string given."""
        from trajledger.verify.errors import FormatError
        from trajledger.verify.note import verifier_from_vkey

        try:
            verifier_from_vkey(str(value))
        except FormatError as e:
            self.fail(str(e), param, ctx)
        return str(value)


DURATION = Duration()
KEY_NAME = KeyName()
NEW_NAME = RecordName()
NEW_VERSION = RecordName("version")
NEW_ORIGIN = RecordName("origin")
VKEY = VKey()
OUT_PATH = OutPath()
OUT_PATH_OR_URI = OutPath(uri=True)
OUT_DIR = OutPath(directory=True)


def interactive() -> bool:
    """Whether a person can answer a prompt (standard input is a terminal)."""
    return is_terminal(sys.stdin)


def is_terminal(stream: IO[str] | None) -> bool:
    """Whether ``stream`` is a terminal: False for none (a process without one, as the
    interpreter leaves ``sys.stderr`` when descriptor 2 was closed)."""
    return stream is not None and stream.isatty()


def ask_passphrase(name: str, *, confirm: bool = False) -> bytes | None:
    """Prompt for a key passphrase on a terminal; None when there is no terminal. The log's
    key (``log``) is asked for like any other."""
    if not interactive():
        return None
    who = "the log's key" if name == "log" else f"key {name}"
    value = click.prompt(
        f"Passphrase for {who}", hide_input=True, confirmation_prompt=confirm, err=True
    )
    return str(value).encode("utf-8")


def style(text: str, **styles: Any) -> str:
    """``text`` styled for a terminal (`click.style`: ``bold=True``...), or plain when the
    NO_COLOR environment variable is set to anything but empty (no-color.org: no colour and no
    bold either). Where stdout or stderr is not a terminal, `click.echo` drops the escapes."""
    if os.environ.get("NO_COLOR"):
        return text
    return click.style(text, **styles)


PIPED = "not a regular file (a pipe, a device): save the bundle to a file and give that"
"""Why a bundle that is neither a file nor a directory is refused: it is read more than once."""


def not_a_bundle(ref: str, command: str, ctx: Context) -> None:
    """A bundle file given as REF: ``lineage``, ``impact`` and ``show`` read a ledger's
    records, and an auditor holding a bundle alone was told ``no ledger here; run 'trajledger
    init'`` (or, in a ledger, ``no artifact has this name``), not where a bundle's answer is
    (out48). Not a REF the ledger at ``ctx`` resolves to a record of its own: ``attest
    weights.tar.zst`` names its record so, and where that file is it was refused as a bundle
    (rev47 finding 6); an imported record's name is its signer's, who may give it the name of
    the bundle it sends (rev48 finding 7): the hint names that record by its digest.

    Raises:
        click.UsageError: REF is a file named like a bundle, and names no record of this
            ledger's own.
    """
    path = Path(ref)
    if not (path.name.endswith((".tar.zst", ".zst")) and path.is_file()):
        return
    from .catalog import Catalog, Origins

    also = ""
    with contextlib.suppress(LedgerError):  # (no ledger, no such record: the hint)
        item = Catalog(ctx.ledger()).resolve(ref)
        if not Origins(ctx.ledger()).of(item.index):  # a record of this ledger's own
            return
        # an imported one: its name is its signer's, who may name it as the file it sends
        # (rev48 finding 7): the file is not taken for it, and the record is named
        also = (f" (a record imported here is named {ref} too: "
                f"'trajledger {command} {item.digest}')")
    word = shell_word(ref)  # (a path the user gave: one shell word, rev48)
    answer = ("a bundle's lineage is its verification report: 'trajledger verify "
              f"{word} --policy POLICY' (--json: its nodes and edges; 'python -m "
              "trajledger.verify' the same, with verify/ alone)" if command != "impact" else
              "a bundle answers for its own checkpoint only: its report ('trajledger verify "
              f"{word} --policy POLICY --json') lists the batches it was trained on; which "
              "checkpoints of a lab used a batch is 'impact' on a copy of the lab's ledger "
              "(docs/AUDIT_FIRST_HOUR.md, steps 4 and 4b)")
    raise click.UsageError(f"{ref}: a bundle file{also}; '{command}' reads a ledger's records, "
                           f"by NAME@VERSION or digest: {answer}; or import it into a ledger "
                           f"('trajledger import {word} --key APPROVER'), then ask there")


def bundle_file(path: Path, also: str = "") -> Path:
    """``path``, an evidence bundle the user named (``import``, ``verify BUNDLE``, ``fsck
    --repair --from``, as ``python -m verify``): a directory or a missing file is one line,
    exit 3 (operational, like every missing file: the arguments were well formed; whether the
    path holds a bundle is a fact of the file system, not of the command line). ``also``
    names what else the option takes ("or a ledger directory")."""
    if path.is_dir():
        raise LedgerError(f"bundle {path}: is a directory, want a .tar.zst bundle file{also}")
    if not path.is_file():
        raise LedgerError(f"bundle {path}: " + (PIPED if path.exists() else "no such file"))
    return path


def visible(text: str) -> str:
    """``text`` as one line a terminal shows as it is: control characters (line breaks too),
    line separators and bidirectional controls escaped as ``\\u001b`` (`verify.report.HIDDEN`,
    as in every report). Names, licences and reasons are chosen by whoever signed them: none
    may erase, redraw, add or reorder what a reader sees."""
    from trajledger.verify.report import HIDDEN

    return text.translate(HIDDEN)


def ok(subject: str) -> None:
    """Report success on stderr, one line (`visible`)."""
    click.echo(f"OK: {visible(subject)}", err=True)


def fail(message: str) -> None:
    """Report a problem on stderr: one ``FAIL:`` line per line of ``message`` (`visible`). A
    stderr that cannot be written (``> FILE 2>&1`` on a full disk) says nothing, and the exit
    status still tells: the write's own error ended the process 1 or 120 (rev50 finding 6)."""
    with contextlib.suppress(OSError):
        for line in message.split("\n"):
            click.echo(f"FAIL: {visible(line)}", err=True)


def warn(message: str) -> None:
    """A warning on stderr, one line (`visible`)."""
    click.echo(f"WARNING: {visible(message)}", err=True)


def warnings_as_lines() -> None:
    """Show trajledger's own warnings (classes of its modules, e.g.
    `remote.CleartextEndpointWarning`) as `warn` lines; others as Python shows them."""
    import warnings

    shown = warnings.showwarning
    if getattr(shown, "trajledger", False):  # installed already (one process, many commands)
        return

    def show(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
        if category.__module__.startswith("trajledger."):
            warn(str(message))
        else:
            shown(message, category, *args, **kw)

    show.trajledger = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def emit_json(value: Any) -> None:
    """Print a JSON document on stdout (sorted keys, one line). A float JSON cannot hold (NaN,
    an infinity: a producer's data that skipped validation, read by ``query``) is printed as
    null, and a warning says how many: ``NaN`` is no JSON, and most parsers refuse it. A lone
    surrogate (a name that is not UTF-8) is printed as messages show it, ``\\xfd``
    (`verify.report_json.strict`): its ``\\udcfd`` escape is refused by strict parsers."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:
        nulled = [0]

        def finite(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                nulled[0] += 1
                return None
            if isinstance(v, dict):
                return {k: finite(x) for k, x in v.items()}
            return [finite(x) for x in v] if isinstance(v, list | tuple) else v

        text = json.dumps(finite(value), sort_keys=True, separators=(",", ":"))
        warn(f"{nulled[0]} value(s) that JSON cannot hold (NaN or an infinity) are printed as "
             "null; the output without --json shows them")
    if "\\ud" in text:  # a lone surrogate (a name that is not UTF-8): as messages show it
        from trajledger.verify.report_json import strict

        text = json.dumps(strict(json.loads(text)), sort_keys=True, separators=(",", ":"))
    click.echo(text)


JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Print the result as one JSON document (stable)."
)
"""``--json``: every command that prints a result on stdout takes it (docs/cli.md)."""


def emit_result(as_json: bool, text: str | None, data: dict[str, Any]) -> None:
    """Print a command's result on stdout: ``text`` (a reference alone, so that
    ``X=$(trajledger ...)`` keeps it; None: nothing), or with ``--json`` the document
    ``data``."""
    if as_json:
        emit_json(data)
    elif text is not None:
        click.echo(text)


def recorded_json(kind: str, rec: Any, name: str = "", version: str = "") -> dict[str, Any]:
    """What ``--json`` prints for a record a command made (a `ledger.record.Recorded`):
    ``{kind, name, version, digest, envelope, logIndex, new}``."""
    return {"kind": kind, "name": name, "version": version, "digest": rec.digest,
            "envelope": rec.envelope_digest, "logIndex": rec.index, "new": rec.new}


def _reader_gone() -> None:
    """Point stdout at /dev/null: its reader went away (``EPIPE``), and what is left to write
    (the stream's buffer, the interpreter's final flush) must not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


@contextmanager
def verdict_follows() -> Iterator[None]:
    """Around a report a verdict follows (``verify``, its files and Sigstore modes included,
    ``lineage``, ``fsck``, ``log verify``, ``admit``, ``validate``, ``release``'s refusal,
    ``monitor`` and the fork it prints, ``import``'s report and the look-alike check after
    it: fix60): a reader gone (``| head``, ``| true``)
    ends the report, not the command, whose verdict's status and ``FAIL:`` lines follow;
    `Group.invoke` ended it 0, a verification that failed with it (rev51 finding 6)."""
    try:
        yield
    except BrokenPipeError:
        _reader_gone()
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()  # (what the buffer held: to /dev/null now)


@contextmanager
def loading() -> Iterator[None]:
    """Around a command's own imports and the opening of its ledger: in the command's own
    process, the cyclic garbage collector is off meanwhile, and what was made is then frozen
    (``gc.freeze``), as ``trajledger.__main__`` does for the command line's start-up.

    Those modules and the open ledger live until the process ends: the collections that
    would walk them while they load, and every later one, are wasted (about 0.02 CPU-s of an
    ``attest``). So is a command's work whose objects live until it is done: ``export``'s
    lineage walk (its records and report, held until the bundle is written: 0.05 to 0.06
    CPU-s of its main thread on the bench's lineage, exp48), ``import`` (the bundle's
    verification and the records taken in: 0.03 to 0.05 CPU-s) and ``verify REF``'s walk
    (0.015 to 0.02 CPU-s, imp49), which run in such a block too; the cyclic garbage they leave
    meanwhile is small (192, 41 and 12 to 40 objects on that lineage of 1,003 records). What
    such a block leaves in a cycle is frozen with it and lives to the process's end: a cycle
    that holds frames holds all their callers held (one in ``verify.log_key`` kept 66,141
    objects, 7 MiB, of an import: imp49). The command's own process is the one whose entry
    point froze its start-up (a freeze count above 0); anywhere else (a test's ``CliRunner``, a
    library user calling a command in-process) nothing changes.
    """
    if not gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


@contextmanager
def progress(total: int, label: str, *, quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal and not ``--quiet``; else silent.

    Yields:
        ``advance(n)``: move the bar ``n`` units.
    """
    if quiet or not is_terminal(sys.stderr) or total <= 0:
        yield lambda n: None
        return
    with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
        yield _Advance(bar)


class _Advance:
    """``advance(n)`` of a drawn bar, whose total may grow (`verify.hash_bar.Growing`: work
    whose size is learnt as it goes shows a bar from its start)."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    def __call__(self, n: int) -> None:
        self.bar.update(n)

    def grow(self, total: int) -> None:
        """Make the total ``total`` (never below the bar's position) and redraw."""
        bar = self.bar
        if total > bar.length:
            bar.length = total
            bar.finished = bar.pos >= total
            bar.render_progress()


@contextmanager
def progress_to(*, label: str, quiet: bool = False) -> Iterator[Callable[[int, int], None]]:
    """Like `progress`, for library callbacks that report ``(done, total)``.

    Yields:
        ``report(done, total)``; the bar is created on the first call (when the total is known).
    """
    state: list[Any] = []  # [context manager, advance, done]

    def report(done: int, total: int) -> None:
        if not state:
            cm = progress(total, label, quiet=quiet)
            state.extend([cm, cm.__enter__(), 0])
        state[1](done - state[2])
        state[2] = done

    try:
        yield report
    finally:
        if state:
            state[0].__exit__(None, None, None)


EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT)."""


def exit_code_for(e: BaseException) -> int:
    """The CLI exit code of an exception (DESIGN §8)."""
    if isinstance(e, PolicyFileError | OptionValueError):  # the user's to fix: usage (left36)
        return EXIT_USAGE
    if isinstance(e, VerificationError | FormatError):
        return EXIT_FAILED
    if isinstance(e, LedgerError | ProvenanceError | OSError):
        return EXIT_OPERATIONAL
    return EXIT_BUG


def os_error_line(e: OSError) -> str:
    """The ``FAIL:`` line of an operating-system error no command turned into its own: the file
    (a temporary file of ours, ``.tmp-…``, named by its directory, which is where the user
    asked to write), the system's words, and for a full, read-only or forbidden place what to
    do next. A library's error without an ``errno`` (pyarrow's ``[errno 28]``) is read for one.
    """
    from .fs import TMP_PREFIX

    name = os.fsdecode(e.filename) if e.filename else ""
    if name and os.path.basename(name).startswith(TMP_PREFIX):
        name = f"cannot write in {os.path.dirname(name) or '.'}"
    return f"{name + ': ' if name else ''}{e.strerror or e}{next_step(e)}"


GLOBAL_OPTIONS = {"--ledger": 1, "-v": 0, "--verbose": 0, "-q": 0, "--quiet": 0}
"""The top-level options accepted anywhere on the line, and how many values each takes."""


def hoist_global_options(args: list[str]) -> list[str]:
    """Move global options given after the subcommand to the front, so that
    ``trajledger verify X --ledger L -q`` means ``trajledger --ledger L -q verify X``. Nothing
    after ``--`` moves."""
    front: list[str] = []
    rest: list[str] = []
    seen_command = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest.extend(args[i:])
            break
        name = a.split("=", 1)[0]
        if seen_command and name in GLOBAL_OPTIONS:
            n = 0 if "=" in a else GLOBAL_OPTIONS[name]
            front.extend(args[i : i + 1 + n])
            i += 1 + n
            continue
        if not a.startswith("-") and not seen_command:
            # The first bare word is the subcommand unless it is the value of --ledger.
            prev = args[i - 1] if i else ""
            seen_command = prev != "--ledger"
        rest.append(a)
        i += 1
    return front + rest


def _closest(e: click.NoSuchOption) -> click.NoSuchOption:
    """click's "no such option" with the catalog's suggestions (`catalog.suggest`): the closest
    options only (``--fromat`` gets ``--format``, not also ``--out``)."""
    from .suggestions import suggest

    return click.NoSuchOption(e.option_name, possibilities=suggest(e.option_name,
                                                                     e.possibilities or []),
                              ctx=e.ctx)


class OneLineUsageError(click.UsageError):
    """A usage error (exit 2) in one line, ``Error: <what was wrong>; see 'trajledger CMD
    --help'``: click's is three (the usage, a hint, the error), and the first two said nothing
    the last did not (an old Left, left35). ``--help`` itself is unchanged. ``path``: the
    command whose help to read (default: the context's)."""

    def __init__(self, message: str, ctx: click.Context | None = None,
                 path: str | None = None) -> None:
        super().__init__(message, ctx)
        self.path = path or (ctx.command_path if ctx is not None else None)

    def show(self, file: Any = None) -> None:
        """Print the one line on stderr (or ``file``)."""
        said = self.format_message().rstrip(".")
        if self.path:  # after a question ("Did you mean …?"), a sentence of its own
            said += (" S" if said.endswith("?") else "; s") + f"ee '{self.path} --help'"
        click.echo(f"Error: {said}", file=file, err=file is None)


def one_line(e: click.UsageError, ctx: click.Context | None = None) -> click.UsageError:
    """``e`` as a `OneLineUsageError` (but the help a group without arguments prints); one that
    names no context (click's parser raises some so) points at the subcommand ``ctx``, the
    group's, was invoking."""
    if isinstance(e, OneLineUsageError | click.exceptions.NoArgsIsHelpError):
        return e
    path = None
    if e.ctx is None and ctx is not None:
        path = " ".join([ctx.command_path, *([ctx.invoked_subcommand]
                                              if ctx.invoked_subcommand else [])])
    return OneLineUsageError(e.format_message(), e.ctx, path)


def refuse_repeats(cmd: click.Command, ctx: click.Context, args: list[str]) -> None:
    """Refuse an option that takes one value given more than once: click keeps the last value
    silently (``train --dataset A --dataset B`` would train on B alone). Options that take many
    values (``multiple``), counts and flags may repeat. A line click cannot parse is left to
    click, which says what is wrong with it.

    Also refuse an option whose value is another of the command's options: ``--batch $B --key
    k`` with ``B`` empty took ``--key`` as the batch, and click then said "Missing option
    '--key'"; and an empty path (``--policy ''``, ``--out ''``: read or written as the
    current directory, exit 1 or 3 after work; left37).

    Raises:
        click.UsageError: an option was given twice, took an option as its value, or a path
            was empty (exit 2).
    """
    if ctx.resilient_parsing:  # shell completion of a partial line
        return
    try:
        values, _, order = cmd.make_parser(ctx).parse_args(list(args))
    except click.UsageError:
        return
    names = {o for p in cmd.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
    for param in dict.fromkeys(order):
        flag = not isinstance(param, click.Option) or param.is_flag
        given = None if flag else values.get(param.name)
        taken = [v for v in (given if isinstance(given, list | tuple) else [given])
                 if isinstance(v, str) and v in names]
        if taken:
            raise click.UsageError(
                f"{param.opts[0]} took the option {taken[0]} as its value: give {param.opts[0]} "
                "a value first (an unquoted shell variable left empty?)", ctx)
    for param in dict.fromkeys(order):  # '' is the directory here, to read or to write over
        given = values.get(param.name)
        if isinstance(param.type, click.Path | OutPath) and "" in (
                given if isinstance(given, list | tuple) else [given]):
            what = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
            raise click.UsageError(f"{what} is empty: give the path of a file or directory "
                                   "(an unquoted shell variable left empty?)", ctx)
    for param in dict.fromkeys(order):
        if (isinstance(param, click.Option) and not (param.multiple or param.count
                                                     or param.is_flag)
                and (n := order.count(param)) > 1):
            raise click.UsageError(
                f"{param.opts[0]} was given {n} times; it takes one value: give it once", ctx)


# Words users try for a question another command answers (out47 finding 7: `status` got
# "Did you mean 'stats'?", episode statistics).
_ANSWERED_BY = {
    "status": "whether a record still stands, and why not, is 'trajledger verify REF' "
              "('trajledger show REF' describes it)",
}


class Group(click.Group):
    """A click group that maps exceptions to exit codes and one-line messages."""

    def main(self, args: Any = None, *rest: Any, **kw: Any) -> Any:
        """Run the command line (global options are accepted after the subcommand too). What
        click writes while it parses (``--version``, ``--help``) to a full disk is one line,
        exit 3, as a command's output is (`invoke`), not a traceback, exit 1 (rev49)."""
        argv = list(sys.argv[1:] if args is None else args)
        forget_appends()  # what this command line records (`stopped_line`)
        stdout = sys.stdout
        try:
            return super().main(hoist_global_options(argv), *rest, **kw)
        except OSError as e:  # (click passes on all but EPIPE)
            fail(os_error_line(e))
            raise SystemExit(EXIT_OPERATIONAL) from None
        except SystemExit as e:  # click's EPIPE: 1, as a verification that failed (rev50)
            wrapped = getattr(sys.stdout, "wrapped", None) is stdout  # (click's wrapper, then
            if e.code == 1 and wrapped and "Pacify" in type(sys.stdout).__name__:  # only)
                raise SystemExit(EXIT_OK) from None  # a reader gone: no error (`invoke`)
            raise

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        """click's, with a usage error of the group's own options in one line (`one_line`)."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            raise one_line(e) from None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse the group's own options; a mistyped one gets the closest (`_closest`)."""
        refuse_repeats(self, ctx, args)
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            raise _closest(e) from None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Find the subcommand; a mistyped one gets the closest (``verfy``: ``verify``, not
        also ``query``), by `suggestions.suggest` as names and options are (with click's 60%
        cutoff: ``nwe`` gets ``new``)."""
        from .suggestions import suggest

        try:
            name, cmd, rest = super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as e:
            if e.command_name in _ANSWERED_BY:  # a word users try: the command that answers
                raise click.UsageError(f"No such command {e.command_name!r}: "
                                       f"{_ANSWERED_BY[e.command_name]}", ctx=e.ctx) from None
            raise click.exceptions.NoSuchCommand(
                e.command_name,
                possibilities=suggest(e.command_name, self.list_commands(ctx), close=0.6),
                ctx=e.ctx) from None
        if cmd is not None and not isinstance(cmd, click.Group):  # a group checks its own
            refuse_repeats(cmd, click.Context(cmd, info_name=name, parent=ctx), rest)
        return name, cmd, rest

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; translate expected errors, report bugs."""
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as e:  # a subcommand's option mistyped
            raise one_line(_closest(e), ctx) from None
        except click.UsageError as e:  # a subcommand's, or a command's own: one line
            raise one_line(e, ctx) from None
        except (KeyboardInterrupt, click.exceptions.Abort) as e:
            # SIGTERM, SIGHUP: as Ctrl-C, with the shell's status for them; also when train's or
            # eval's COMMAND was stopped by one (runner.command.CommandInterrupted, out40), or
            # while a prompt waited (click's Abort holds it as its context, out41)
            e = e.__context__ if isinstance(e.__context__, Terminated) else e
            signum = getattr(e, "signum", None)
            stop = e if isinstance(e, Terminated) else (
                Terminated(signum) if signum in STOPPING else None)
            if stop is not None:
                click.echo(stopped_line(f"stopped by {stop.name}"), err=True)
                raise click.exceptions.Exit(stop.status) from e
            # Ctrl-C (or an aborted prompt): every write is a temp file renamed into place and an
            # append commits all or nothing, so stopping anywhere leaves no half-written state;
            # the next writer removes the temporary files. 130 = 128 + SIGINT, as shells say.
            click.echo(stopped_line("interrupted"), err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from e
        except (click.exceptions.Exit, click.ClickException):
            raise
        except BrokenPipeError as e:
            # The reader went away (``trajledger log show | head``): not an error, the command
            # ends (a report its verdict follows is `verdict_follows`'s).
            _reader_gone()
            raise click.exceptions.Exit(EXIT_OK) from e
        except OptionValueError as e:  # a value typed for an option: usage, one line (left37)
            raise one_line(click.UsageError(str(e)), ctx) from e
        except ProvenanceError as e:
            fail(str(e))
            raise click.exceptions.Exit(exit_code_for(e)) from e
        except OSError as e:
            fail(os_error_line(e))
            raise click.exceptions.Exit(EXIT_OPERATIONAL) from e
        except MemoryError as e:  # this machine's limit (a ulimit, a container), not a bug
            fail("out of memory; an append or a store write either completed or left nothing "
                 "(give the command more memory, or smaller input)")
            raise click.exceptions.Exit(EXIT_OPERATIONAL) from e
        except Exception as e:
            if disk_error(e):  # a database's read or write the disk failed: not a bug
                fail(f"database: {e} (a read or write of the user's state or an index failed; "
                     "the disk, not the ledger's contents)")
                raise click.exceptions.Exit(EXIT_OPERATIONAL) from e
            if (system := library_os_error(e)) is not None:  # lance's full disk: not a bug
                fail(os_error_line(system))
                raise click.exceptions.Exit(EXIT_OPERATIONAL) from e
            verbose = bool(ctx.find_object(Context) and ctx.find_object(Context).verbose)  # type: ignore[union-attr]
            if verbose:
                traceback.print_exc()
            click.echo(
                f"BUG: {type(e).__name__}: {e}\nThis is a bug in trajledger; please report it"
                + ("" if verbose else " (rerun with --verbose for the traceback)"),
                err=True,
            )
            raise click.exceptions.Exit(EXIT_BUG) from e


def default_home() -> Path:
    """``$TRAJLEDGER_HOME``; else, like git, the nearest ledger from the current directory up:
    a directory that is a ledger itself (it holds ``ledger.toml`` and ``log/``: run from inside
    ``demo/`` made by ``trajledger quickstart demo``, or from its ``keys/``) or holds one in
    ``.trajledger``; else ``./.trajledger`` (where ``init`` creates one)."""
    explicit = os.environ.get(HOME_ENV)
    if explicit:
        return Path(explicit)
    try:
        here = Path.cwd()
    except OSError:  # the current directory was deleted
        return Path(DEFAULT_HOME)
    for d in (here, *here.parents):
        if (d / "ledger.toml").is_file() and (d / "log").is_dir():
            return d
        if (d / DEFAULT_HOME / "ledger.toml").is_file():
            return d / DEFAULT_HOME
    return Path(DEFAULT_HOME)
