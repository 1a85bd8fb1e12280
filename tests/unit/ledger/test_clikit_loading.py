"""The command's start-up kept out of the cyclic garbage collector's work (`clikit.loading`,
``trajledger.__main__``): only in the command's own process, and the collector always back on.

The process-wide parts run in a fresh interpreter: freezing this test process's objects would
keep them for the rest of the suite.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

from trajledger.ledger.clikit import loading


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_loading_changes_nothing_where_the_entry_point_froze_nothing() -> None:
    assert gc.get_freeze_count() == 0  # (pytest's process: no entry point of ours)
    with loading():
        assert gc.isenabled()
        made = [[] for _ in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    del made


def test_loading_in_the_commands_own_process_freezes_what_it_made() -> None:
    out = run_python("""
        import gc
        from trajledger.ledger.clikit import loading
        gc.freeze()  # as trajledger.__main__ does for the command line's start-up
        before = gc.get_freeze_count()
        with loading():
            off = not gc.isenabled()
            made = [[] for _ in range(1000)]
        print(off, gc.isenabled(), gc.get_freeze_count() >= before + 1000)
    """)
    assert out == "True True True"


def test_loading_turns_the_collector_back_on_when_the_block_raises() -> None:
    out = run_python("""
        import gc
        from trajledger.ledger.clikit import loading
        gc.freeze()
        try:
            with loading():
                raise KeyError("no ledger")
        except KeyError:
            pass
        print(gc.isenabled())
    """)
    assert out == "True"


def test_the_entry_point_freezes_its_start_up_and_leaves_the_collector_on() -> None:
    out = run_python("""
        import atexit, gc, sys
        atexit.register(lambda: print(gc.isenabled(), gc.get_freeze_count() > 1000))
        sys.argv = ["trajledger", "--version"]
        import trajledger.__main__ as entry
        entry._end_before_teardown = lambda status: None  # (its os._exit skips this handler)
        entry.main()
    """)
    assert out.splitlines()[-1] == "True True"



def test_the_collector_is_back_on_whatever_ends_the_start_up() -> None:
    """A usage error, ``--help``, a platform refused and an import that fails (as a broken
    install does): the entry point leaves the collector on every way out."""
    for argv, failure in [
        (["trajledger", "no-such-command"], ""),
        (["trajledger", "--help"], ""),
        (["trajledger", "--version"], "UnsupportedPlatformError('not here')"),
        (["trajledger", "--version"], "ImportError('broken install')"),
    ]:
        code = f"""
            import gc, sys
            from trajledger._platform import UnsupportedPlatformError
            class Fail:
                def find_spec(self, name, *args):
                    if name == "trajledger.runner.cli" and {failure!r}:
                        raise {failure or "None"}
            sys.meta_path.insert(0, Fail())
            sys.argv = {argv!r}
            from trajledger.__main__ import main
            try:
                main()
            except BaseException as e:
                print("ended by", type(e).__name__)
            print("on" if gc.isenabled() else "off", flush=True)
        """
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.stdout.splitlines()[-1] == "on", (argv, failure, done.stdout, done.stderr)
