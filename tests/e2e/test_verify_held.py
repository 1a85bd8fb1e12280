"""In a command's own process, `verify_ref` holds the last verifier it made (walk50).

Freeing what a walk judged, one object at a time, when `verify_ref` returned cost ``verify`` 5.5
to 7 ms of a lineage of 1,003 records on one core, after its re-hashing workers had ended; held,
it is never freed: ``trajledger.__main__`` ends the process before the interpreter's teardown.
A library caller's process frees it as before; a command holds one at most.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import testkit

from trajledger import Ledger
from trajledger.verify import lineage

_VERIFY = """
import os
import sys
import weakref
from trajledger.verify import lineage

real = lineage.LineageVerifier.__init__

def init(self, *args, **kwargs):
    real(self, *args, **kwargs)
    weakref.finalize(self, os.write, 2, b"verifier freed\\\\n").atexit = False

lineage.LineageVerifier.__init__ = init
from trajledger.__main__ import main
sys.argv = ["trajledger", "--ledger", sys.argv[1], "verify", sys.argv[2]]
main()
"""


def test_the_command_never_frees_its_verifier(quickstart_template: testkit.Template[str],
                                              tmp_path: Path) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    r = subprocess.run([sys.executable, "-c", _VERIFY, str(home), quickstart_template.value],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "OK: " in r.stdout, r.stdout
    assert "verifier freed" not in r.stderr, r.stderr


def test_one_verifier_at_most_and_none_in_a_library_callers_process(
        quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    made: list[weakref.ref[lineage.LineageVerifier]] = []
    real = lineage.LineageVerifier.__init__

    def init(self: lineage.LineageVerifier, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(weakref.ref(self))

    setattr(lineage.LineageVerifier, "__init__", init)  # noqa: B010 (restored below)
    try:
        ledger = Ledger.open(home)
        assert ledger.verify(quickstart_template.value, skip_data=True).ok
        gc.collect()
        assert made and made[-1]() is None  # a library caller's: freed
        ledger.own_process = True  # a command's
        for _ in range(2):
            assert ledger.verify(quickstart_template.value, skip_data=True).ok
        gc.collect()
        assert [ref() is not None for ref in made[-2:]] == [False, True]  # the last one held
    finally:
        setattr(lineage.LineageVerifier, "__init__", real)  # noqa: B010
