"""The ``trajledger`` command (also ``python -m trajledger``).

Only the standard library is imported here, so that a Ctrl-C while the command's modules load
(click, cryptography, pyarrow: most of a second on a cold cache) exits 130 with one line, as a
Ctrl-C during the command does (``ledger.clikit.Group.invoke``), not with a traceback. SIGTERM
and SIGHUP stop the command the same way, with 128 + the signal's number
(`trajledger._signals`). On a system that is not POSIX, the command says so in one line and
exits 3 (``trajledger._platform``).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import gc
import io
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # (importlib.abc costs every command 1.5 ms to import; duck typing does)
    import importlib.abc
    import importlib.machinery

__all__ = ["main"]


def main() -> None:
    """Load the command line and run it."""
    from trajledger._platform import SHOWN, UnsupportedPlatformError
    from trajledger._signals import Terminated, stop_on_termination, stopped_line

    _standard_streams(SHOWN)
    stop_on_termination()
    gc.disable()  # (`_loaded_for_good`)
    try:
        from trajledger.runner.cli import main as command
    except Terminated as e:
        sys.stderr.write(stopped_line(f"stopped by {e.name}") + "\n")
        raise SystemExit(e.status) from None
    except KeyboardInterrupt:
        sys.stderr.write(stopped_line("interrupted") + "\n")
        raise SystemExit(130) from None
    except UnsupportedPlatformError as e:
        sys.stderr.write(f"FAIL: {e}\n")
        raise SystemExit(3) from None  # operational: this system, not the input
    finally:
        _loaded_for_good()
    _arrow_without_pandas()
    status: list[int] = []
    atexit.register(_end_before_teardown, status)  # the first registered runs last
    try:
        command()
    except SystemExit as e:
        status.append(_exit_status(e.code))
        raise
    status.append(0)


def _standard_streams(errors: str = "backslashreplace") -> None:
    """Open ``/dev/null`` on a standard stream the command was started without.

    A command started with a standard stream closed (``trajledger verify X 2>&-``) has no
    ``sys.stderr`` (the interpreter sets it to None), and the next file it opens takes that
    descriptor: an object being stored, a key file, whatever a training command's output then
    goes into, as its stderr. So each of descriptors 0, 1 and 2 that is not open gets
    ``/dev/null`` (as OpenSSH does), and its Python stream is made again: what would have been
    printed there is discarded, and the exit code still says how it went (a closed stderr made
    `verify` exit 4 on a lineage that verified). ``errors``: the error handler of stdout and
    stderr (``_platform.SHOWN``: a name that is not UTF-8 shown as ``\\xfd``).
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdin is None:
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 (for good)
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors=errors,  # noqa: SIM115
                          closefd=False)
    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show ✓ (a Latin-1
        if isinstance(stream, io.TextIOWrapper):  # locale) gets \u2713, not a BUG, exit 4
            stream.reconfigure(errors=errors)


def _loaded_for_good() -> None:
    """Keep what loading the command line made out of the cyclic garbage collector's work.

    The modules, classes and functions that loading the command line creates live until the
    process ends, yet while they are made, every few hundred allocations start a collection
    that walks them all again, and every later collection (and the one at exit) walks them
    once more: about 0.03 CPU-s of a command's 0.14 at start-up. So the collector is off while
    they load (`main`) and then moved into the permanent generation (``gc.freeze``), which it
    never walks; what the command itself allocates is collected as usual. The entry point only:
    a library user's process is not touched.
    """
    gc.freeze()
    gc.enable()


def _arrow_without_pandas() -> None:
    """Spare the command the import of pandas that pyarrow makes for nothing.

    pyarrow's ``pa.array(values)`` asks, on its first call with anything but a numpy array,
    whether pandas is installed, by importing it (about 0.45 CPU-s, a third of a small
    ``record``): the command never hands pyarrow a pandas object, but where pandas is installed
    (it is, with TRL or ``datasets``) every command that builds a table paid for it. So in this
    process, once pyarrow is imported, its first ``pa.array`` runs while pandas cannot be
    imported, and pyarrow settles on "no pandas". Nothing is lost: whatever imports pandas
    later (``datasets``, a trainer) is served as before, and pyarrow is then told pandas is there
    (its ``to_pandas`` looks again), so pandas objects handed to pyarrow convert as pandas
    objects. A library user's process is not touched: only the command's entry point does this.
    """
    if "pyarrow" not in sys.modules and "pandas" not in sys.modules:
        hooks = {"pyarrow": _pyarrow_loaded, "pandas": _pandas_loaded}
        sys.meta_path.insert(0, _AfterImport(hooks))


def _pyarrow_loaded(pyarrow: Any) -> None:
    if "pandas" in sys.modules:  # pyarrow imported by pandas: nothing to spare
        return
    refuse = _Refuse("pandas")
    sys.meta_path.insert(0, refuse)
    try:
        pyarrow.array([])
    finally:
        sys.meta_path.remove(refuse)


def _pandas_loaded(_pandas: ModuleType) -> None:
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.table({}).to_pandas()


class _Refuse:
    """A finder that makes importing one top-level package fail, as if it were not installed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == self.name:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


class _AfterImport:
    """Runs a function on a top-level package once its import has run (a post-import hook):
    the spec comes from the finders after this one, with a loader that calls the function
    after the package's own code."""

    def __init__(self, hooks: dict[str, Any]) -> None:
        self.hooks = hooks

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        hook = self.hooks.pop(name, None)
        if hook is None:
            return None
        if not self.hooks:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                loader = spec.loader
                if loader is not None and hasattr(loader, "exec_module"):
                    spec.loader = cast("importlib.abc.Loader", _ThenCall(loader, hook))
                return spec
        return None


class _ThenCall:
    """The package's own loader, then the hook; the module keeps its own loader (resources,
    ``get_source`` and the like are asked of it, as without the hook)."""

    def __init__(self, loader: importlib.abc.Loader, hook: Any) -> None:
        self.loader, self.hook = loader, hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.hook(module)


def _exit_status(code: object) -> int:
    """The process's exit status for ``SystemExit(code)``, as Python computes it."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _end_before_teardown(status: list[int]) -> None:
    """The last exit handler: once the command is done, end the process before the
    interpreter (and the C++ runtime of a library it loaded) tears down.

    A process that used pyarrow can abort after its work is done and its output written:
    "terminate called without an active exception", exit 134, when a worker of Arrow's
    thread pools is still alive during that teardown (apache/arrow#34314, open; seen here once
    in CI, after ``export --format parquet`` had written its files). And the teardown of any
    command frees, one by one, every object the process still holds, which no result of the
    command depends on: about 6 ms of CPU (walk50: a `verify`'s, paid on one core after its
    re-hashing workers have ended; it was done only with pyarrow or lancedb loaded before).
    Registered first, this handler runs after every exit handler the command's libraries
    registered (temporary directories left to finalizers are removed; loading the command
    line registers none); it flushes the output and ends with ``os._exit`` and the command's
    status. Every file the command wrote was made durable by the command itself before it
    returned. Without a status (an exception escaped the command: a bug) the interpreter ends
    as usual. Output that cannot be written (``> FILE`` on a full disk: what a command left in
    the stream's buffer, ``show --content``'s bytes) is said in one line and a command that
    succeeded exits 3: the interpreter's own flush said so and exited 120; this handler's first
    form ended 0 with the output lost (rev49 finding 1). A reader gone (``| head``) is no error.
    """
    if not status:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except ValueError:  # a closed stream
            pass
        except OSError as e:
            if stream is sys.stdout and e.errno != errno.EPIPE:
                _unwritten(e, status)
    os._exit(status[0])


def _unwritten(e: OSError, status: list[int]) -> None:
    """For a command that had succeeded, the ``FAIL:`` line of its output that could not be
    written, and exit 3 (an operational problem). A command that failed has said why (its own
    write to stdout failing, ``clikit``'s ``FAIL:`` line, leaves the bytes in the buffer)."""
    from trajledger.ledger.errors import next_step

    if status[0] != 0:
        return
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"FAIL: standard output: cannot write: {e.strerror or e}"
                         f"{next_step(e)}\n")
        sys.stderr.flush()
    status[0] = 3


if __name__ == "__main__":
    main()
